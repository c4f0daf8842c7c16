"""Layer-by-layer loading runs transformers' own weight conversion on one layer's tensors at a time.

Families whose on-disk tensors are not the model's (renamed prefixes, a fused ``query_key_value`` or
``in_proj`` split to the model's shapes, q/k/v convolutions concatenated, per-expert matrices
stacked) must stream into exactly the tensors ``from_pretrained`` loads, reading only the layer
at hand.
"""

from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor

from mlcore.hf import HFModelError, layer_by_layer, load_model
from mlcore.hf.conversion import CheckpointConversion
from mlcore.hf.families import tiny_family_config
from mlcore.hf.layerwise import ShardIndex
from mlcore.hf.loading import weight_files

#: Families whose checkpoints need converters or renamings beyond per-expert fusion, and two that do not.
CONVERTED = [
    "bailing_hybrid",
    "deepseek_v4",
    "granitemoe",
    "granitemoe_swa",
    "granitemoehybrid",
    "granitemoeshared",
    "kimi_linear",
    "lara_mini",
    "nemotron_h",
    "sarvam_moe",
    "glm_moe_dsa",
    "hy_v4",
    "mixtral",
    "olmoe",
]
#: Their linear attention runs transformers' reference kernels on CPU, about 7 s a forward here: the
#: tensors are compared exactly, the logits by the family test.
SLOW_FORWARD = {"bailing_hybrid", "kimi_linear"}


def saved(model_type: str, folder: Path) -> Path:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(tiny_family_config(model_type)).eval().save_pretrained(folder)
    return folder


def token_ids() -> Tensor:
    return torch.randint(3, 128, (2, 12), generator=torch.Generator().manual_seed(1))


def disk_keys(folder: Path) -> list[str]:
    keys: list[str] = []
    for file in weight_files(folder):
        with safe_open(file, framework="pt") as shard:
            keys.extend(shard.keys())
    return keys


@pytest.mark.parametrize("model_type", CONVERTED)
def test_every_streamed_layer_holds_exactly_what_from_pretrained_loads(model_type: str, tmp_path: Path) -> None:
    folder = saved(model_type, tmp_path / model_type)
    whole = load_model(folder)
    ids = token_ids()
    with layer_by_layer(folder) as streamed, torch.no_grad():
        stream = streamed.moelab_stream
        # Outside the layers: weights and the rotary tables rebuilt from the config.
        outside = [whole.state_dict(), dict(whole.named_buffers())]
        for got, expected in zip([streamed.state_dict(), dict(streamed.named_buffers())], outside, strict=True):
            assert_same(got, {n: t for n, t in expected.items() if not n.startswith("model.layers.")})
        for index, layer in enumerate(whole.model.layers):
            with stream.hold(index) as held:
                assert held.state_dict().keys() == layer.state_dict().keys()
                assert_same(held.state_dict(), layer.state_dict())
        if model_type not in SLOW_FORWARD:
            assert torch.equal(streamed(ids, use_cache=False).logits, whole(ids, use_cache=False).logits)


def assert_same(got: dict[str, Tensor], expected: dict[str, Tensor]) -> None:
    for name, tensor in expected.items():
        assert got[name].dtype == tensor.dtype and torch.equal(got[name], tensor), name


@pytest.mark.parametrize("model_type", ["nemotron_h", "sarvam_moe", "lara_mini"])
def test_a_forward_reads_each_layer_once_and_only_that_layers_tensors(
    model_type: str, tmp_path: Path, monkeypatch: Any
) -> None:
    folder = saved(model_type, tmp_path / model_type)
    reads: list[list[str]] = []
    original = ShardIndex.read

    def recording(self: ShardIndex, names: list[str]) -> dict[str, Tensor]:
        reads.append(list(names))
        return original(self, names)

    monkeypatch.setattr(ShardIndex, "read", recording)
    with layer_by_layer(folder) as streamed, torch.no_grad():
        target = streamed.moelab_stream.shards.target
        reads.clear()
        streamed(token_ids(), use_cache=False)
        layers = len(streamed.model.layers)
    assert len(reads) == layers
    for index, names in enumerate(reads):
        prefix = f"model.layers.{index}."
        assert sorted(names) == sorted(key for key, name in target.items() if name.startswith(prefix))
    # Every on-disk tensor the model uses was read once: outside the layers at load, each layer's here.
    inside = [name for names in reads for name in names]
    assert len(inside) == len(set(inside))
    assert set(inside) | {k for k, name in target.items() if not name.startswith("model.layers.")} == set(
        disk_keys(folder)
    )


def test_one_converter_gathers_every_expert_of_a_layer_in_expert_order(tmp_path: Path) -> None:
    """Twelve experts: natural key order (expert 10 after 9), as transformers stacks them."""
    from transformers import AutoModelForCausalLM

    config = tiny_family_config("mixtral", num_local_experts=12)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    ids = token_ids()
    with torch.no_grad():
        expected = load_model(tmp_path)(ids, use_cache=False).logits
        with layer_by_layer(tmp_path) as streamed:
            assert torch.equal(streamed(ids, use_cache=False).logits, expected)


def test_a_layer_missing_an_experts_tensor_is_refused_with_the_shapes(tmp_path: Path) -> None:
    folder = saved("mixtral", tmp_path)
    file = weight_files(folder)[0]
    with safe_open(file, framework="pt") as shard:
        tensors = {k: shard.get_tensor(k) for k in shard.keys()}  # noqa: SIM118 - safe_open is not iterable
        metadata = shard.metadata()
    dropped = [k for k in tensors if k.startswith("model.layers.1.") and ".experts.5." in k]
    assert dropped
    save_file({k: t for k, t in tensors.items() if k not in dropped}, file, metadata=metadata)
    with layer_by_layer(folder) as streamed, pytest.raises(HFModelError, match=r"gate_up_proj \[7, "):
        streamed(token_ids(), use_cache=False)


def test_tensors_converted_for_another_layer_are_refused() -> None:
    with pytest.raises(HFModelError, match="several layers"):
        CheckpointConversion.check_within({"model.layers.2.mlp.experts.down_proj": torch.zeros(1)}, "model.layers.1.")
