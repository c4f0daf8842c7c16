"""Loading reads local safetensors only and never runs code from a checkpoint."""

import json
from pathlib import Path

import pytest
import torch

from mlcore.hf import HFModelError, load_model
from tests.mlcore.hf.conftest import build, logits, token_ids


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    build("olmoe").save_pretrained(tmp_path)
    return tmp_path


def test_it_loads_an_unedited_checkpoint_with_identical_logits(saved: Path) -> None:
    torch.testing.assert_close(logits(load_model(saved), token_ids()), logits(build("olmoe"), token_ids()))


def test_it_refuses_a_pickle_checkpoint(saved: Path) -> None:
    model = build("olmoe")
    (saved / "model.safetensors").unlink()
    torch.save(model.state_dict(), saved / "pytorch_model.bin")
    with pytest.raises(HFModelError, match=r"no safetensors weights \(found pickle files pytorch_model.bin\)"):
        load_model(saved)


def test_it_reads_safetensors_even_when_a_pickle_lies_beside_them(saved: Path) -> None:
    (saved / "pytorch_model.bin").write_bytes(b"not a pickle: opening it would fail loudly")
    torch.testing.assert_close(logits(load_model(saved), token_ids()), logits(build("olmoe"), token_ids()))


def test_it_refuses_a_config_that_needs_remote_code(saved: Path) -> None:
    config = json.loads((saved / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"}
    (saved / "config.json").write_text(json.dumps(config))
    (saved / "modeling_evil.py").write_text("raise SystemExit('remote code ran')\n")
    with pytest.raises(HFModelError, match="remote code"):
        load_model(saved)


def test_it_refuses_a_dense_model_type_before_loading_weights(saved: Path) -> None:
    config = json.loads((saved / "config.json").read_text())
    config = {k: v for k, v in config.items() if k not in ("num_experts", "num_experts_per_tok")}
    config["model_type"] = "llama"
    (saved / "config.json").write_text(json.dumps(config))
    with pytest.raises(HFModelError, match="llama config declares no routed experts"):
        load_model(saved)


def test_it_refuses_a_model_type_transformers_does_not_ship(saved: Path) -> None:
    config = json.loads((saved / "config.json").read_text())
    config["model_type"] = "my_own_moe"
    (saved / "config.json").write_text(json.dumps(config))
    with pytest.raises(HFModelError, match="'my_own_moe' is not one transformers ships"):
        load_model(saved)


def test_it_refuses_a_path_that_is_not_a_model_directory(tmp_path: Path) -> None:
    with pytest.raises(HFModelError, match="not a local model directory"):
        load_model(tmp_path / "missing")
    with pytest.raises(HFModelError, match="not a local model directory"):
        load_model(tmp_path)


def test_it_refuses_a_sidecar_written_for_another_architecture(saved: Path, tmp_path: Path) -> None:
    from mlcore.hf import adapt

    other = tmp_path / "other"
    model = build("mixtral")
    adapter = adapt(model)
    adapter.replace_with_novices({0: {1: torch.ones(32)}})
    adapter.save(other)
    (saved / "moelab_experts.safetensors").write_bytes((other / "moelab_experts.safetensors").read_bytes())
    with pytest.raises(HFModelError, match="not a MoE Lab expert sidecar for a olmoe model"):
        load_model(saved)


def test_it_refuses_a_checkpoint_that_lacks_a_tensor_rather_than_filling_it_with_random_values(saved: Path) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(saved / "model.safetensors")
    del tensors["model.layers.0.self_attn.q_proj.weight"]
    save_file(tensors, saved / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(HFModelError, match=r"lacks 1 tensor\(s\) .*model.layers.0.self_attn.q_proj.weight"):
        load_model(saved)
