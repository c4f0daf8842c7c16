"""The sequential pass: each decoder layer read once for all batches, the model's own logits, and
a refusal where a layer's input depends on more than the hidden states before it."""

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

from mlcore.hf import HFModelError, adapt, layer_by_layer
from mlcore.hf.families import tiny_family_config
from mlcore.hf.layerwise import ShardIndex
from mlcore.hf.sequential import run_sequentially


def tiny(model_type: str = "olmoe") -> Any:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(tiny_family_config(model_type)).eval()


def batches(count: int = 3) -> list[Tensor]:
    return [torch.randint(3, 128, (2, 12), generator=torch.Generator().manual_seed(s)) for s in range(count)]


def logits_of(model: Any, ids: list[Tensor], **kwargs: Any) -> dict[int, Tensor]:
    found: dict[int, Tensor] = {}
    run_sequentially(model, ids, on_output=lambda b, out: found.__setitem__(b, out.logits), **kwargs)
    return found


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Any, Path]:
    model = tiny()
    model.save_pretrained(tmp_path / "olmoe")
    return model, tmp_path / "olmoe"


def test_a_streamed_model_reads_each_layer_once_for_all_batches(saved: tuple[Any, Path], monkeypatch: Any) -> None:
    model, folder = saved
    reads: list[str] = []
    original = ShardIndex.read

    def counting(self: ShardIndex, names: list[str]) -> dict[str, Tensor]:
        reads.extend(names)
        return original(self, names)

    monkeypatch.setattr(ShardIndex, "read", counting)
    with layer_by_layer(folder) as streamed:
        reads.clear()
        found = logits_of(streamed, batches())
    per_layer = {name.split(".")[2] for name in reads if name.startswith("model.layers.")}
    layer_reads = [name for name in reads if name.startswith("model.layers.0.")]
    assert per_layer == {str(i) for i in range(model.config.num_hidden_layers)}
    assert len(layer_reads) == len(set(layer_reads)), "layer 0 was read more than once"
    with torch.no_grad():
        for b, ids in enumerate(batches()):
            torch.testing.assert_close(found[b], model(ids, use_cache=False).logits, rtol=0, atol=1e-5)


def test_carried_activations_spilled_to_disk_give_the_same_logits_and_are_removed(tmp_path: Path) -> None:
    model = tiny()
    in_memory = logits_of(model, batches())
    spill = tmp_path / "spill"
    spill.mkdir()
    on_disk = logits_of(model, batches(), spill_bytes=0, spill_dir=spill)
    for b in in_memory:
        assert torch.equal(in_memory[b], on_disk[b])
    assert not any(spill.iterdir()), "the spilled activations outlived the pass"


def test_routing_hooks_see_every_layer_and_batch_as_in_a_plain_forward() -> None:
    model = tiny()
    adapter = adapt(model)
    plain: dict[tuple[int, int], Tensor] = {}
    sequential: dict[tuple[int, int], Tensor] = {}
    current = [0]

    def record(into: dict[tuple[int, int], Tensor]) -> Any:
        return lambda layer, ids, gates, _: into.__setitem__((layer, current[0]), ids.clone())

    with torch.no_grad(), adapter.capture_routing(record(plain)):
        for b, ids in enumerate(batches()):
            current[0] = b
            model(ids, use_cache=False)
    with adapter.capture_routing(record(sequential)):
        run_sequentially(model, batches(), before_batch=lambda b: current.__setitem__(0, b))
    assert sequential.keys() == plain.keys()
    assert all(torch.equal(sequential[key], plain[key]) for key in plain)


def test_progress_is_reported_once_per_layer() -> None:
    model = tiny()
    seen: list[tuple[int, int]] = []
    run_sequentially(model, batches(2), on_layer=lambda done, total: seen.append((done, total)))
    layers = model.config.num_hidden_layers
    assert seen == [(i, layers) for i in range(1, layers + 1)]


def inkling2_loop(**overrides: Any) -> Any:
    from transformers import AutoModelForCausalLM

    config = tiny_family_config("inkling2_loop_text")
    for name, value in overrides.items():
        setattr(config, name, value)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config).eval()


def test_a_model_that_runs_a_layer_twice_per_forward_is_refused() -> None:
    looped = inkling2_loop(loop_layer_index_start=1, loop_layer_index_end=2, loop_num_passes=2)
    with pytest.raises(HFModelError, match="more than once per forward"):
        run_sequentially(looped, batches(1))


def test_a_model_whose_layers_get_states_built_from_earlier_outputs_is_refused() -> None:
    # A block boundary at every layer: each layer also gets the stacked outputs of the blocks before it.
    with pytest.raises(HFModelError, match="computed from earlier layers' outputs"):
        run_sequentially(inkling2_loop(n_layers_per_attn_res_block=1), batches(1))


def test_a_model_whose_layers_hand_on_more_than_hidden_states_is_refused() -> None:
    with pytest.raises(HFModelError, match="more than hidden states"):
        run_sequentially(tiny("glm_moe_dsa"), batches(1))
