"""Checkpoints keep their dtype; bad inputs are refused before weights load; sidecar-only edits
make stock loaders fail loudly instead of computing another model."""

import json
from pathlib import Path

import pytest
import torch

from mlcore.hf import HFModelError, adapt, load_model
from mlcore.hf.checkpoint import SIDECAR_MODEL_TYPE
from tests.mlcore.hf.conftest import build, logits, token_ids


def save_with_tokenizer(model, folder: Path, vocab_size: int = 300) -> Path:
    from mlcore.zoo.tokenizer import save_hf_tokenizer, train_bpe

    model.save_pretrained(folder)
    text = " ".join(f"word{i} other{i % 7}" for i in range(400))
    save_hf_tokenizer(train_bpe([text], vocab_size=vocab_size), folder, model_max_length=64)
    return folder


def test_a_bfloat16_checkpoint_loads_and_saves_as_bfloat16_with_sizes_from_its_dtype(tmp_path: Path) -> None:
    from safetensors import safe_open

    from mlcore.compress.report import sizes

    source = save_with_tokenizer(build("qwen3_moe", vocab_size=300).to(torch.bfloat16), tmp_path / "bf16")
    model = load_model(source, need_tokenizer=True)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert logits(model, token_ids()).dtype == torch.bfloat16
    adapter = adapt(model)
    measured = sizes(model, adapter)
    assert measured["bytes_stored"] == 2 * measured["parameters_stored"]
    adapter.replace_with_novices({adapter.layers[0].index: {1: torch.ones(32)}})
    after = sizes(model, adapter)
    per_expert = sum(p[0].numel() for p in adapter.layers[0].experts.parameters(recurse=False))
    assert measured["bytes_effective"] - after["bytes_effective"] == 2 * (per_expert - 32)
    out = tmp_path / "out"
    adapter.save(out)
    with safe_open(out / "model.safetensors", "pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"BF16"}  # noqa: SIM118
    assert load_model(out).dtype == torch.bfloat16


def test_a_tokenizer_larger_than_the_embedding_is_refused_before_weights_load(tmp_path: Path) -> None:
    folder = save_with_tokenizer(build("olmoe"), tmp_path / "m", vocab_size=300)
    (folder / "model.safetensors").write_bytes(b"")  # never read: the refusal comes first
    with pytest.raises(HFModelError, match=r"tokenizer has \d+ token ids but the model's embedding has 128 rows"):
        load_model(folder)


def test_a_missing_tokenizer_is_refused_when_the_job_needs_one(tmp_path: Path) -> None:
    build("olmoe").save_pretrained(tmp_path)
    with pytest.raises(HFModelError, match=r"has no tokenizer; include tokenizer\.json"):
        load_model(tmp_path, need_tokenizer=True)
    assert load_model(tmp_path) is not None


def test_a_quantised_config_is_refused_naming_its_format(tmp_path: Path) -> None:
    build("olmoe").save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(HFModelError, match=r"quantised \(FP8\).*Dequantise it to bfloat16"):
        load_model(tmp_path)


def test_quantised_tensors_are_refused_from_the_header_alone(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    build("olmoe").save_pretrained(tmp_path)
    save_file({"model.extra": torch.zeros(4, dtype=torch.float8_e4m3fn)}, tmp_path / "model-extra.safetensors")
    with pytest.raises(HFModelError, match=r"quantised tensors \(FP8 \(E4M3\)"):
        load_model(tmp_path)


def test_a_checkpoint_whose_novices_live_in_the_sidecar_fails_loudly_in_stock_transformers(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = build("mixtral")
    adapter = adapt(model)
    adapter.replace_with_novices({0: {2: torch.linspace(-1, 1, 32)}})
    adapter.save(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == SIDECAR_MODEL_TYPE
    assert (tmp_path / "modeling_moelab_sidecar.py").is_file()
    with pytest.raises(ValueError, match="contains custom code"):
        AutoModelForCausalLM.from_pretrained(tmp_path)
    # A tool that reads only config and weights cannot mistake it for a stock mixtral either.
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    assert SIDECAR_MODEL_TYPE not in CONFIG_MAPPING
    assert torch.equal(logits(load_model(tmp_path), token_ids()), logits(model, token_ids()))


def test_a_checkpoint_whose_edits_fit_the_stock_weights_stays_stock(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = build("gpt_oss")
    adapter = adapt(model)
    # Uneven removal masks through the router's bias (-inf there is never selected): stock weights.
    # (GPT-OSS novices are not such an edit any more: the compact checkpoint stores no novice weights.)
    adapter.remove_experts({adapter.layers[0].index: [0, 1, 3, 4, 5, 7]})
    assert adapter.masks
    adapter.save(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "gpt_oss"
    stock = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    torch.testing.assert_close(logits(stock, token_ids()), logits(model, token_ids()), rtol=0, atol=1e-5)
