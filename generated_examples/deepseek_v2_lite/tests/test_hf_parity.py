"""Parity with transformers on tiny random HF checkpoints, built offline with save_pretrained.

For each model_type this package runs (ascend_runtime.args.hf_model_types), with the RoPE
scaling it was rendered with (yarn), the package's prefill logits and STEPS greedy decode
steps (eager decode and compiled decode) match transformers' `generate` in fp32 within
rtol=atol=1e-4, and the greedy tokens are identical. transformers is a test-only
dependency: without it these tests are skipped.
"""

import json
from importlib.util import find_spec

import pytest
import torch
from ascend_runtime import (
    ops,
)
from ascend_runtime.args import hf_model_types
from ascend_runtime.generation import (
    generate,
)
from ascend_runtime.graph import (
    compile_decode,
)
from ascend_runtime.testing.hf_configs import tiny_hf_configs
from ascend_runtime.weights import (
    CheckpointError,
    load_checkpoint,
    load_pretrained,
    model_args_from_hf,
)
from conftest import RENDERED_CONFIG, compile_config, greedy, setup_test_caches

from deepseek_v2_lite import (
    MODEL,
)
from deepseek_v2_lite.architecture import (
    ModelArgs,
)
from deepseek_v2_lite.modeling import (
    Transformer,
)

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
# A tiny config of each model_type this package runs: the loader's answer
# (ascend_runtime.args.hf_model_types), with what real checkpoints of that type use.
CONFIGS = tiny_hf_configs(ModelArgs())
# YaRN's ramp over the tiny head_dims keeps a few pairs, blends some, divides the rest; the
# cos/sin scale is derived from the factor (no attention_factor).
ROPE_FIELDS = {
    "rope_scaling": {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 4096,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "mscale": 1.0,  # DeepSeek-V3's: cos/sin and the softmax scale both scaled
        "mscale_all_dim": 1.0,
    }
}
# For the refusal test: a checkpoint without the RoPE scaling this package was rendered with.
OTHER_ROPE_FIELDS: dict = {}
OTHER_ROPE_SCALING = "none"
TYPES = list(CONFIGS) or [
    pytest.param("none", marks=pytest.mark.skip(reason="no HF model_type fits this package"))
]


def hf_model(model_type: str):
    import transformers

    name, extra = CONFIGS[model_type]
    config = getattr(transformers, name)(**{**TINY, **extra}, **ROPE_FIELDS)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    return model


def save(model, model_type: str, path, **kwargs) -> None:
    """save_pretrained, with config.json saying `model_type` (Kimi-K2 ships DeepSeek-V3's
    architecture under its own model_type, which transformers has no class for)."""
    model.save_pretrained(path, **kwargs)
    if model.config.model_type != model_type:
        config = json.loads((path / "config.json").read_text())
        (path / "config.json").write_text(json.dumps({**config, "model_type": model_type}))


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
            save(model, model_type, path)
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
    config = RENDERED_CONFIG
    return compile_config("npugraph_ex", False) if config.exe_mode == "eager" else config


@pytest.mark.parametrize("compiled", [False, True], ids=["eager-decode", "compiled-decode"])
@pytest.mark.parametrize("model_type", TYPES)
def test_matches_transformers(checkpoints, model_type, compiled):
    path, ref_logits, ref_tokens = checkpoints(model_type)
    model = load_pretrained(
        MODEL, path, ops.load("portable"), dtype=torch.float32, batch_size=BATCH
    )
    setup_test_caches(model, BATCH)  # the test's rows, not the rendered budget
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
def test_ragged_batch_equals_transformers_per_prompt(checkpoints, model_type):
    """Each row of a ragged batch (prompts of different lengths, compiled decode) equals
    transformers' greedy `generate` of that prompt alone: tokens, and logits within 1e-4."""
    path, _, _ = checkpoints(model_type)
    reference = hf_model(model_type)
    generator = torch.Generator().manual_seed(4)
    batch = [
        torch.randint(0, TINY["vocab_size"], (n,), generator=generator).tolist()
        for n in (5, 9, 1, 7)
    ]
    model = load_pretrained(MODEL, path, ops.load("portable"), batch_size=len(batch))
    setup_test_caches(model, len(batch))  # the test's rows, not the rendered budget
    config = decode_config()
    decode = compile_decode(model, config)
    tensor_lengths = config.tensor_lengths
    ours = generate(model, decode, batch, STEPS, tensor_lengths=tensor_lengths, keep_logits=True)
    for row, ids in enumerate(batch):
        tokens = torch.tensor([ids])
        with torch.inference_mode():
            out = reference.generate(
                tokens,
                attention_mask=torch.ones_like(tokens),
                max_new_tokens=STEPS,
                do_sample=False,
                output_logits=True,
                return_dict_in_generate=True,
                eos_token_id=None,
                pad_token_id=0,
            )
        assert ours.tokens[row] == out.sequences[0, len(ids) :].tolist(), f"row {row}"
        mine = torch.stack([step[row, -1] for step in ours.logits[: len(ours.tokens[row])]])
        torch.testing.assert_close(
            mine, torch.cat(out.logits, dim=0), rtol=RTOL, atol=ATOL, msg=f"row {row}"
        )


@pytest.mark.parametrize("model_type", TYPES[:1])
def test_sharded_checkpoint_loads_the_same_weights(checkpoints, model_type, tmp_path):
    path, _, _ = checkpoints(model_type)
    save(hf_model(model_type), model_type, tmp_path, max_shard_size="40KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    single = load_pretrained(MODEL, path, ops.load("portable"))
    sharded = load_pretrained(MODEL, tmp_path, ops.load("portable"))
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
    del tensors["model.layers.1.self_attn.kv_b_proj.weight"]
    tensors["model.layers.0.mlp.extra.weight"] = torch.zeros(1)
    save_file(tensors, tmp_path / "model.safetensors")
    model = load_pretrained(MODEL, path, ops.load("portable"))
    missing = "missing 1: model.layers.1.self_attn.kv_b_proj.weight"
    with pytest.raises(ValueError, match=missing) as e:
        load_checkpoint(MODEL, model, tmp_path)
    assert "unexpected 1: model.layers.0.mlp.extra.weight" in str(e.value)


def test_loaded_model_is_built_on_meta_then_materialized(checkpoints):
    """load_pretrained builds on the meta device and assigns the checkpoint's tensors: none
    is left on meta, all are in the asked dtype, a tied lm_head stays one tensor, and the RoPE
    tables equal those of a model built on the device."""
    if not CONFIGS:
        pytest.skip("no HF model_type fits this package")
    path, _, _ = checkpoints(TYPES[0])
    model = load_pretrained(MODEL, path, ops.load("portable"), dtype=torch.bfloat16)
    tensors = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    assert [name for name, tensor in tensors.items() if tensor.is_meta] == []
    assert {tensor.dtype for tensor in tensors.values()} == {torch.bfloat16}
    if model.args.tie_word_embeddings:
        assert model.lm_head.weight is model.embed_tokens.weight
    reference = Transformer(model.args, ops.load("portable")).to(torch.bfloat16)
    for name, buffer in reference.named_buffers():
        assert torch.equal(tensors[name], buffer), name


def test_configs_are_this_packages_model_types():
    assert tuple(CONFIGS) == hf_model_types(ModelArgs())


def test_unsupported_model_types_are_refused(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')
    with pytest.raises(CheckpointError, match="model_type 'gpt2' is not supported"):
        model_args_from_hf(MODEL, tmp_path)


def test_another_architecture_is_refused(tmp_path):
    from transformers import Qwen3Config

    Qwen3Config(**TINY).save_pretrained(tmp_path)
    message = "model_type 'qwen3' cannot run on this package"
    with pytest.raises(CheckpointError, match=message):
        model_args_from_hf(MODEL, tmp_path)


@pytest.mark.parametrize("model_type", TYPES[:1])
def test_another_rope_scaling_is_refused(model_type, tmp_path):
    import transformers

    name, extra = CONFIGS[model_type]
    config = getattr(transformers, name)(**{**TINY, **extra}, **OTHER_ROPE_FIELDS)
    config.save_pretrained(tmp_path)
    message = f"RoPE scaling '{OTHER_ROPE_SCALING}' does not match this package's rope_scaling="
    with pytest.raises(CheckpointError, match=message):
        model_args_from_hf(MODEL, tmp_path)


@pytest.mark.parametrize("model_type", TYPES[:1])
def test_fused_expert_tensors_load_like_per_expert_keys(checkpoints, model_type, tmp_path):
    """transformers 5 keeps experts as 3-D tensors in memory (`mlp.experts.gate_up_proj`
    [E, 2I, H], `down_proj` [E, H, I]); a checkpoint saved in that form loads the same."""
    from safetensors.torch import save_file

    path, _, _ = checkpoints(model_type)
    state = {k: v.contiguous() for k, v in hf_model(model_type).state_dict().items()}
    assert any(k.endswith("mlp.experts.gate_up_proj") for k in state)
    if TINY.get("tie_word_embeddings") or "lm_head.weight" not in state:
        state.pop("lm_head.weight", None)
    (tmp_path / "config.json").write_text((path / "config.json").read_text())
    save_file(state, tmp_path / "model.safetensors")
    per_expert = load_pretrained(MODEL, path, ops.load("portable"))
    fused = load_pretrained(MODEL, tmp_path, ops.load("portable"))
    for (name, a), (_, b) in zip(
        per_expert.state_dict().items(), fused.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("model_type", TYPES[:1])
def test_a_missing_expert_is_named(checkpoints, model_type, tmp_path):
    from safetensors.torch import load_file, save_file

    path, _, _ = checkpoints(model_type)
    (tmp_path / "config.json").write_text((path / "config.json").read_text())
    tensors = load_file(path / "model.safetensors")
    missing = next(k for k in sorted(tensors) if ".experts.3." in k)
    del tensors[missing]
    save_file(tensors, tmp_path / "model.safetensors")
    model = load_pretrained(MODEL, path, ops.load("portable"))
    with pytest.raises(CheckpointError, match=f"missing 1: {missing}"):
        load_checkpoint(MODEL, model, tmp_path)


@pytest.mark.parametrize("model_type", TYPES[:1])
def test_mtp_layers_are_skipped_with_a_note(checkpoints, model_type, tmp_path, caplog):
    """DeepSeek checkpoints store num_nextn_predict_layers multi-token-prediction layers after
    the last decoder layer: they are skipped with one line; undeclared, they are unexpected."""
    from safetensors.torch import load_file, save_file

    path, _, _ = checkpoints(model_type)
    config = json.loads((path / "config.json").read_text())
    tensors = load_file(path / "model.safetensors")
    mtp = f"model.layers.{config['num_hidden_layers']}"
    tensors[f"{mtp}.eh_proj.weight"] = torch.zeros(2, 2)
    tensors[f"{mtp}.enorm.weight"] = torch.ones(2)
    save_file(tensors, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_nextn_predict_layers": 1}))
    with caplog.at_level("WARNING"):
        load_pretrained(MODEL, tmp_path, ops.load("portable"))
    assert "skipping 2 tensors of 1 multi-token-prediction layer(s)" in caplog.text
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_nextn_predict_layers": 0}))
    with pytest.raises(CheckpointError, match=f"unexpected 2: {mtp}.eh_proj.weight"):
        load_pretrained(MODEL, tmp_path, ops.load("portable"))


@pytest.mark.parametrize("model_type", TYPES[:1])
def test_an_fp8_checkpoint_is_refused_in_one_line(checkpoints, model_type, tmp_path):
    """DeepSeek-V3's own weights are fp8 blocks (quantization_config, weight_scale_inv):
    the loader takes float weights and says to dequantise first."""
    path, _, _ = checkpoints(model_type)
    config = json.loads((path / "config.json").read_text())
    fp8 = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    (tmp_path / "config.json").write_text(json.dumps({**config, "quantization_config": fp8}))
    with pytest.raises(CheckpointError, match=r"quantization_config \(fp8\) .*dequantise"):
        model_args_from_hf(MODEL, tmp_path)
