"""ascend-scaffold's runtime: the machinery a rendered model package runs on.

A package keeps its model (ModelArgs, the layers, the decoder with its prefill/decode
split, the weight map, the YAML config, its tests) and imports the rest from here: the
YAML config and its validation (config), the compile seam per exe_mode (graph), the step
inputs (metadata), the KV caches (kv_cache, paged_kv_cache, block_allocator, model),
checkpoint loading (weights), the Hugging Face config reader (hf_config), tokenizer,
generation and sampling, the runner, validate and triage CLIs, and the test kit (testing).

Importing this package imports nothing else: `hf_config` is standard library only, so
the scaffold reads config.json with it without torch installed.
"""

__version__ = "0.5.0"
# A rendered package declares `ascend-scaffold>=RUNTIME_API,<next minor>`: the runtime's
# API changes only with the minor version.
RUNTIME_API = "0.5"
