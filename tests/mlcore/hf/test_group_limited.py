"""Group-limited routing (DeepSeek): removal keeps the shapes and masks router rows."""

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from mlcore.hf import HFModelError, adapt, load_model
from tests.mlcore.hf.conftest import build, logits, token_ids

GROUPED = {
    "deepseek_v2": {"topk_method": "group_limited_greedy", "n_group": 2, "topk_group": 1},
    "deepseek_v3": {"n_group": 2, "topk_group": 1},
}
# Two groups of four (experts 0-3, 4-7); three live experts in each.
KEEP = [0, 1, 3, 4, 6, 7]


@pytest.mark.parametrize("arch", sorted(GROUPED))
def test_group_limited_removal_is_reported_as_masked(arch: str) -> None:
    assert adapt(build(arch, **GROUPED[arch])).support()["remove_experts"] == "masked"
    assert adapt(build(arch)).support()["remove_experts"] == "yes"


@pytest.mark.parametrize("arch", sorted(GROUPED))
def test_group_limited_removal_masks_saves_and_reloads(arch: str, tmp_path: Path) -> None:
    model = build(arch, **GROUPED[arch])
    adapter = adapt(model)
    before = logits(model, token_ids())
    adapter.remove_experts({info.index: KEEP for info in adapter.layers})
    assert model.config.n_routed_experts == 8
    assert all(info.router.weight.shape == (8, 32) for info in adapter.layers)
    assert all(mask.tolist() == [i not in KEEP for i in range(8)] for mask in adapter.masks.values())

    chosen: list[Any] = []
    ids = token_ids(length=24)
    with torch.no_grad(), adapter.capture_routing(lambda layer, e, g, lg: chosen.append((e, lg)), logits=True):
        masked = model(ids, use_cache=False).logits
    for expert_ids, router_logits in chosen:
        assert set(expert_ids.unique().tolist()) <= set(KEEP)
        assert torch.isinf(router_logits[:, [2, 5]]).all()
    assert not torch.allclose(logits(model, token_ids()), before)

    adapter.save(tmp_path)
    torch.testing.assert_close(logits(load_model(tmp_path), ids), masked, rtol=0, atol=0)


def test_deepseek_v3_masks_live_in_the_stock_checkpoint(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = build("deepseek_v3", **GROUPED["deepseek_v3"])
    adapter = adapt(model)
    adapter.remove_experts({info.index: KEEP for info in adapter.layers})
    adapter.save(tmp_path)
    stock = AutoModelForCausalLM.from_pretrained(tmp_path, use_safetensors=True).eval()
    torch.testing.assert_close(logits(stock, token_ids()), logits(model, token_ids()), rtol=0, atol=0)


def test_it_refuses_a_mask_that_leaves_a_group_too_few_experts() -> None:
    adapter = adapt(build("deepseek_v3", n_group=2, topk_group=2, num_experts_per_tok=4))
    # Group 0 keeps one expert, so only one group can be chosen but two are needed.
    with pytest.raises(HFModelError, match="topk_group=2 groups"):
        adapter.remove_experts({info.index: [0, 4, 5, 6, 7] for info in adapter.layers})


def test_the_export_without_novices_under_group_limited_routing_serves_in_stock_transformers(tmp_path: Path) -> None:
    """Deleting novices would break the contiguous index groups, so the export masks them in the
    selection bias: a stock checkpoint that stock transformers serves with the export's logits."""
    from transformers import AutoModelForCausalLM

    model = build("deepseek_v3", **GROUPED["deepseek_v3"])
    adapter = adapt(model)
    hidden = adapter.layers[0].hidden
    pruned = [e for e in range(8) if e not in KEEP]
    adapter.replace_with_novices(
        {info.index: {e: torch.full((hidden,), 0.1 * e) for e in pruned} for info in adapter.layers}
    )
    exported = adapter.save_without_novices(tmp_path)
    # Unmarked: a stock type that plain loaders accept (the sidecar only records the masks it carries).
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "deepseek_v3"
    assert not exported.novices
    assert all(mask.tolist() == [i not in KEEP for i in range(8)] for mask in exported.masks.values())
    stock = AutoModelForCausalLM.from_pretrained(tmp_path, use_safetensors=True).eval()
    torch.testing.assert_close(logits(stock, token_ids()), logits(exported.model, token_ids()), rtol=0, atol=1e-6)
    # A masked expert is never chosen by the stock model either.
    chosen: list[Any] = []
    with torch.no_grad(), adapt(stock).capture_routing(lambda layer, e, g, lg: chosen.append(e)):
        stock(token_ids(length=24), use_cache=False)
    assert chosen and not any(bool(torch.isin(e, torch.tensor(pruned)).any()) for e in chosen)


def test_the_export_without_novices_is_refused_where_group_limited_routing_has_no_selection_term() -> None:
    model = build("deepseek_v2", **GROUPED["deepseek_v2"])
    adapter = adapt(model)
    hidden = adapter.layers[0].hidden
    adapter.replace_with_novices({info.index: {2: torch.zeros(hidden)} for info in adapter.layers})
    with pytest.raises(HFModelError, match="no per-expert selection term"):
        adapter.save_without_novices(Path("unused"))
