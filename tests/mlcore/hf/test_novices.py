"""Novices: an expert replaced by a constant vector, scaled by its unchanged gate."""

from pathlib import Path

import pytest
import torch

from mlcore.hf import HFModelError, MoEAdapter, adapt, load_model
from tests.mlcore.hf.conftest import ARCHS, build, logits, token_ids
from tests.mlcore.hf.test_capture import reconstruct


def novice_vectors(adapter: MoEAdapter, seed: int = 7) -> dict[int, dict[int, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return {
        info.index: {1: torch.randn(32, generator=generator), 6: torch.randn(32, generator=generator)}
        for info in adapter.layers
    }


@pytest.mark.parametrize("arch", ARCHS)
def test_novices_output_their_vector_keep_the_routing_and_reload_exactly(arch: str, tmp_path: Path) -> None:
    model = build(arch)
    adapter = adapt(model)
    ids = token_ids(length=16)
    routes_before: dict[int, torch.Tensor] = {}
    with torch.no_grad(), adapter.capture_routing(lambda layer, e, g, lg: routes_before.update({layer: e})):
        before = model(ids, use_cache=False).logits
    novices = novice_vectors(adapter)
    adapter.replace_with_novices(novices)

    outputs: dict[tuple[int, int], torch.Tensor] = {}
    routes_after: dict[int, torch.Tensor] = {}
    with (
        torch.no_grad(),
        adapter.capture_routing(lambda layer, e, g, lg: routes_after.update({layer: e})),
        adapter.capture_expert_outputs(lambda layer, e, out, g, rows: outputs.update({(layer, e): out})),
    ):
        replaced = model(ids, use_cache=False).logits
    assert not torch.allclose(replaced, before)
    # Routers are untouched: the first MoE layer (whose input no novice changed) routes as before.
    first = adapter.layers[0].index
    assert torch.equal(routes_after[first], routes_before[first])
    hit = [(layer, e) for layer, vectors in novices.items() for e in vectors if (layer, e) in outputs]
    assert hit, "no token reached a novice; use a longer sequence"
    for layer, expert in hit:
        got = outputs[(layer, expert)]
        torch.testing.assert_close(got, novices[layer][expert].expand_as(got), rtol=0, atol=0)
    reconstruct(model, arch, ids)

    adapter.save(tmp_path)
    reloaded = load_model(tmp_path)
    assert sorted(adapt(reloaded).novices) == sorted(novices)
    torch.testing.assert_close(logits(reloaded, ids), replaced, rtol=0, atol=0)


def test_gpt_oss_novices_load_in_stock_transformers_through_the_shipped_code_only(tmp_path: Path) -> None:
    """GPT-OSS's biases could hold a novice in stock weights, but only with its zeroed weights
    stored; the compact checkpoint leaves them out, so a plain load must fail loudly."""
    from transformers import AutoModelForCausalLM

    model = build("gpt_oss")
    adapter = adapt(model)
    adapter.replace_with_novices(novice_vectors(adapter))
    adapter.save(tmp_path)
    with pytest.raises(ValueError, match="custom code"):
        AutoModelForCausalLM.from_pretrained(tmp_path, use_safetensors=True)
    stock = AutoModelForCausalLM.from_pretrained(tmp_path, use_safetensors=True, trust_remote_code=True).eval()
    torch.testing.assert_close(logits(stock, token_ids()), logits(model, token_ids()), rtol=0, atol=1e-6)


def test_novices_survive_a_later_removal_of_other_experts(tmp_path: Path) -> None:
    model = build("qwen2_moe")
    adapter = adapt(model)
    adapter.replace_with_novices({1: {6: torch.ones(32)}})
    adapter.remove_experts({info.index: [0, 2, 5, 6] for info in adapter.layers})
    assert list(adapter.novices) == [1] and list(adapter.novices[1]) == [3]
    torch.testing.assert_close(adapter.novices[1][3], torch.ones(32))
    adapter.save(tmp_path)
    torch.testing.assert_close(logits(load_model(tmp_path), token_ids()), logits(model, token_ids()), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("novices", "message"),
    [
        ({0: {8: torch.zeros(32)}}, "not in"),
        ({0: {1: torch.zeros(31)}}, "shape"),
        ({0: {1: torch.full((32,), float("nan"))}}, "finite"),
    ],
)
def test_it_refuses_a_bad_novice(novices: dict[int, dict[int, torch.Tensor]], message: str) -> None:
    with pytest.raises(HFModelError, match=message):
        adapt(build("olmoe")).replace_with_novices(novices)
