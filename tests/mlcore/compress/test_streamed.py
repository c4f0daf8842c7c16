"""A plan written layer by layer is the checkpoint the in-memory path saves: the same calibration
statistics from the sequential pass, the same tensors in the files (the compact MoNE layout: kept
experts only, in the family's own on-disk layout) and the same logits after loading, for families
whose novices, removal and masks live in different places."""

from pathlib import Path
from typing import Any

import pytest
import torch

from mlcore.compress.calibrate import calibrate
from mlcore.compress.methods import compressed_copy, make_plan
from mlcore.compress.streamed import write_compressed
from mlcore.hf import adapt, layer_by_layer, load_model
from mlcore.hf.families import tiny_family_config
from tests.mlcore.hf.conftest import file_tensors

WINDOWS = torch.randint(3, 128, (8, 16), generator=torch.Generator().manual_seed(2))
IDS = torch.randint(3, 128, (2, 12), generator=torch.Generator().manual_seed(1))


def saved(model_type: str, folder: Path) -> Path:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(tiny_family_config(model_type)).eval().save_pretrained(folder)
    return folder


def logits(folder: Path) -> Any:
    with torch.no_grad():
        return load_model(folder)(IDS, use_cache=False).logits


# OLMoE: sidecar novices, sliced removal; GPT-OSS: novices in the experts' own biases; DeepSeek-V3:
# group-limited routing, so removal masks through the selection bias.
@pytest.mark.parametrize("model_type", ["olmoe", "gpt_oss", "deepseek_v3"])
def test_a_plan_written_layer_by_layer_loads_with_the_in_memory_checkpoints_logits(
    model_type: str, tmp_path: Path
) -> None:
    source = saved(model_type, tmp_path / "source")
    model = load_model(source)
    adapter = adapt(model)
    calibration = calibrate(adapter, WINDOWS, batch_size=4)
    with layer_by_layer(source) as streamed:
        sequential = calibrate(adapt(streamed), WINDOWS, batch_size=4, sequential=True)
    torch.testing.assert_close(sequential.statistics.mean, calibration.statistics.mean)
    torch.testing.assert_close(sequential.gated_norm_sum, calibration.gated_norm_sum)
    for method in ("mone", "frequency"):
        plan = make_plan(method, adapter, calibration, 6, scope="layer")
        _, in_memory = compressed_copy(model, plan)
        in_memory.save(tmp_path / f"memory-{method}")
        write_compressed(source, plan, tmp_path / f"streamed-{method}")
        written, saved_whole = (
            file_tensors(tmp_path / f"streamed-{method}"),
            file_tensors(tmp_path / f"memory-{method}"),
        )
        assert sorted(written) == sorted(saved_whole)
        for name, tensor in saved_whole.items():
            assert torch.equal(written[name], tensor), name
        if method == "mone":
            # Two novices per layer: only the six kept experts' weights are stored.
            kept = [t for name, t in written.items() if name.endswith(".kept")]
            assert kept and all(t.numel() == 6 for t in kept)
        torch.testing.assert_close(
            logits(tmp_path / f"streamed-{method}"), logits(tmp_path / f"memory-{method}"), rtol=0, atol=1e-6
        )
        assert (tmp_path / f"streamed-{method}" / "model.safetensors.index.json").is_file()
