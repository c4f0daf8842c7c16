"""The sequential pass: each decoder layer read once for all batches, the model's own logits, values
a layer returns besides its hidden states carried to the next layer exactly, and a refusal where a
layer's input depends on earlier outputs in a way the pass cannot carry."""

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from mlcore.hf import HFModelError, adapt, layer_by_layer
from mlcore.hf.families import tiny_family_config
from mlcore.hf.layerwise import ShardIndex
from mlcore.hf.sequential import PassCheckpoint, run_sequentially


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


@pytest.mark.parametrize("model_type", ["glm_moe_dsa", "hy_v4"])
@pytest.mark.parametrize("batch_size", [1, 2])
def test_layers_that_hand_on_their_indexers_top_k_run_with_the_models_own_logits(
    model_type: str, batch_size: int
) -> None:
    # The tiny configs select 4 of 12 keys and reuse the top-k in their last layer, so a wrong
    # carried top-k changes the logits. Batch size 1 makes the plain recording fail to unpack a
    # layer's output; 2 unpacks the hidden states along the batch and only the probe sees it.
    model = tiny(model_type)
    assert model.config.indexer_types[-1] == "shared" and model.config.index_topk < 12
    ids = [torch.randint(3, 128, (batch_size, 12), generator=torch.Generator().manual_seed(s)) for s in range(2)]
    found = logits_of(model, ids)
    with torch.no_grad():
        for b, batch in enumerate(ids):
            torch.testing.assert_close(found[b], model(batch, use_cache=False).logits, rtol=0, atol=1e-5)


def test_a_carrying_pass_killed_after_a_layer_resumes_with_the_same_logits(tmp_path: Path) -> None:
    model = tiny("hy_v4")
    whole = logits_of(model, batches(2))

    def checkpoint() -> PassCheckpoint:
        return PassCheckpoint(tmp_path, "hy_v4", save_state=lambda path: path.touch(), load_state=lambda path: None)

    def killed(done: int, total: int) -> None:
        if done == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sequentially(model, batches(2), on_layer=killed, checkpoint=checkpoint())
    resumed: list[int] = []
    found = logits_of(model, batches(2), checkpoint=checkpoint(), on_layer=lambda done, total: resumed.append(done))
    assert resumed == [2, 3]
    for b in whole:
        assert torch.equal(found[b], whole[b])


class _ToyLayer(nn.Module):
    """Returns its hidden states and a summary of them, which the toy model may hand to the next layer."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, hidden: Tensor, prev: Tensor | None = None) -> tuple[Tensor, Tensor]:
        out = self.linear(hidden) + (0 if prev is None else prev)
        return out, out.mean(dim=-1, keepdim=True)


class _Toy(nn.Module):
    def __init__(self, hand_on: Any) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(128, 4)
        self.model = nn.Module()
        self.model.layers = nn.ModuleList(_ToyLayer() for _ in range(3))
        self.hand_on = hand_on

    def forward(self, input_ids: Tensor, use_cache: bool = False) -> Any:
        hidden, extra, extras = self.embed(input_ids), None, []
        for layer in self.model.layers:
            hidden, extra = layer(hidden, prev=self.hand_on(extra, extras))
            extras.append(extra)
        return SimpleNamespace(logits=hidden)


def test_a_value_handed_on_unchanged_to_the_next_layer_is_carried_exactly() -> None:
    model = _Toy(lambda extra, extras: extra)
    found = logits_of(model, batches(2))
    with torch.no_grad():
        for b, ids in enumerate(batches(2)):
            assert torch.equal(found[b], model(ids).logits)


@pytest.mark.parametrize(
    ("hand_on", "message"),
    [
        (lambda extra, extras: None if extra is None else extra * 2, "more than hidden states"),
        (lambda extra, extras: extras[0] if len(extras) > 1 else extra, "only the previous layer's values"),
    ],
    ids=["changed on the way", "from an older layer"],
)
def test_a_returned_value_the_pass_cannot_carry_exactly_is_refused(hand_on: Any, message: str) -> None:
    with pytest.raises(HFModelError, match=message):
        run_sequentially(_Toy(hand_on), batches(1))
