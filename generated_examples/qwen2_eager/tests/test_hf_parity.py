"""Parity with transformers on tiny random HF checkpoints, built offline with save_pretrained.

For each model_type this package's rendered architecture runs (weights.MODEL_TYPES), the
package's prefill logits and STEPS greedy decode steps (eager decode and compiled decode)
match transformers' `generate` in fp32 within rtol=atol=1e-4, and the greedy tokens are
identical. transformers is a test-only dependency: without it these tests are skipped.
"""

from importlib.util import find_spec

import pytest
import torch
from conftest import CONFIG_PATH, compile_config, greedy

from qwen2_eager import ops
from qwen2_eager.config import load_config
from qwen2_eager.graph import compile_decode
from qwen2_eager.weights import MODEL_TYPES, ROPE_SCALING, load_checkpoint, load_pretrained

pytestmark = pytest.mark.skipif(
    find_spec("transformers") is None or find_spec("safetensors") is None,
    reason="HF parity needs the test-only dependencies transformers and safetensors",
)

STEPS = 8
BATCH = 2
PROMPT_LEN = 8
RTOL = ATOL = 1e-4  # fp32 logits
TINY = dict(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    initializer_range=0.1,
)
# One tiny config per model_type, each exercising what real checkpoints of that type use.
CONFIGS = {
    "llama": ("LlamaConfig", dict(head_dim=16, rope_theta=500000.0)),
    "mistral": ("MistralConfig", dict(head_dim=32, sliding_window=None)),
    "qwen2": ("Qwen2Config", dict(rope_theta=1000000.0, tie_word_embeddings=True)),
    "qwen3": ("Qwen3Config", dict(head_dim=32, rope_theta=1000000.0, tie_word_embeddings=True)),
}
# The RoPE scaling this package was rendered with; llama3's bands are sized so that the
# tiny head_dim has a kept, a blended and a scaled frequency.
ROPE_SCALING_FIELDS = {
    "none": {},
    "linear": {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
    "llama3": {
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 48,
        }
    },
    # YaRN's ramp over the tiny head_dims keeps a few pairs, blends some, divides the rest;
    # the cos/sin scale is derived from the factor (no attention_factor).
    "yarn": {
        "rope_scaling": {
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
        }
    },
}[ROPE_SCALING]
TYPES = [t for t in CONFIGS if t in MODEL_TYPES] or [
    pytest.param("none", marks=pytest.mark.skip(reason="no HF model_type fits this package"))
]


def hf_model(model_type: str):
    import transformers

    name, extra = CONFIGS[model_type]
    config = getattr(transformers, name)(**TINY, **extra, **ROPE_SCALING_FIELDS)
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


def prompt() -> torch.Tensor:
    generator = torch.Generator().manual_seed(3)
    return torch.randint(0, TINY["vocab_size"], (BATCH, PROMPT_LEN), generator=generator)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """model_type -> (checkpoint dir, transformers' per-step logits, greedy tokens)."""
    made = {}

    def get(model_type: str):
        if model_type not in made:
            path = tmp_path_factory.mktemp(model_type)
            model = hf_model(model_type)
            model.save_pretrained(path)
            ids = prompt()
            with torch.inference_mode():
                out = model.generate(
                    ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=STEPS + 1,
                    do_sample=False,
                    output_logits=True,
                    return_dict_in_generate=True,
                    eos_token_id=None,  # never stop early: compare every step
                    pad_token_id=0,
                )
            made[model_type] = (path, torch.stack(out.logits, 1), out.sequences[:, PROMPT_LEN:])
        return made[model_type]

    return get


def decode_config():
    """The package's own compiled mode (a host-list npugraph_ex config if it renders eager)."""
    config = load_config(CONFIG_PATH).model_config
    return compile_config("npugraph_ex", False) if config.exe_mode == "eager" else config


@pytest.mark.parametrize("compiled", [False, True], ids=["eager-decode", "compiled-decode"])
@pytest.mark.parametrize("model_type", TYPES)
def test_matches_transformers(checkpoints, model_type, compiled):
    path, ref_logits, ref_tokens = checkpoints(model_type)
    model = load_pretrained(path, ops.load("portable"), dtype=torch.float32, batch_size=BATCH)
    config = decode_config()
    decode = compile_decode(model, config) if compiled else model.decode
    steps = greedy(model, decode, prompt(), STEPS, config.tensor_lengths)
    logits = torch.cat(steps, dim=1)  # (batch, STEPS + 1, vocab): prefill, then each decode
    assert logits.shape == ref_logits.shape
    for step in range(STEPS + 1):
        torch.testing.assert_close(
            logits[:, step], ref_logits[:, step], rtol=RTOL, atol=ATOL, msg=f"step {step}"
        )
    assert torch.equal(logits.argmax(-1), ref_tokens)


@pytest.mark.parametrize("model_type", TYPES[:1])
def test_sharded_checkpoint_loads_the_same_weights(checkpoints, model_type, tmp_path):
    path, _, _ = checkpoints(model_type)
    hf_model(model_type).save_pretrained(tmp_path, max_shard_size="40KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    single = load_pretrained(path, ops.load("portable"))
    sharded = load_pretrained(tmp_path, ops.load("portable"))
    for (name, a), (_, b) in zip(
        single.state_dict().items(), sharded.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("model_type", TYPES[:1])
def test_mismatch_lists_missing_and_unexpected_keys(checkpoints, model_type, tmp_path):
    from safetensors.torch import load_file, save_file

    path, _, _ = checkpoints(model_type)
    (tmp_path / "config.json").write_text((path / "config.json").read_text())
    tensors = load_file(path / "model.safetensors")
    del tensors["model.layers.1.self_attn.k_proj.weight"]
    tensors["model.layers.0.mlp.extra.weight"] = torch.zeros(1)
    save_file(tensors, tmp_path / "model.safetensors")
    model = load_pretrained(path, ops.load("portable"))
    with pytest.raises(ValueError, match="missing 1: model.layers.1.self_attn.k_proj.weight") as e:
        load_checkpoint(model, tmp_path)
    assert "unexpected 1: model.layers.0.mlp.extra.weight" in str(e.value)


def test_other_model_types_are_refused(tmp_path):
    from qwen2_eager.weights import model_args_from_hf

    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')
    with pytest.raises(ValueError, match="model_type 'gpt2' cannot run on this package"):
        model_args_from_hf(tmp_path)
