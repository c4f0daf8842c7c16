"""The masked-routing rules must reproduce the stock transformers routers exactly when nothing
is masked; otherwise a mask would silently change routing beyond the masked experts."""

from typing import Any

import pytest
import torch

from mlcore.hf import adapt
from mlcore.hf.routing import deepseek_v2, softmax_topk
from tests.mlcore.hf.conftest import build

CASES = [
    ("mixtral", {}, softmax_topk),
    ("qwen2_moe", {}, softmax_topk),
    ("qwen3_moe", {}, softmax_topk),
    ("olmoe", {}, softmax_topk),
    ("deepseek_v2", {}, deepseek_v2),
    ("deepseek_v2", {"topk_method": "group_limited_greedy", "n_group": 4, "topk_group": 2}, deepseek_v2),
]


@pytest.mark.parametrize(("arch", "overrides", "rule"), CASES, ids=[f"{c[0]}{c[1] and '-grouped'}" for c in CASES])
def test_the_rule_without_a_mask_is_the_stock_router(arch: str, overrides: dict, rule: Any) -> None:
    router = adapt(build(arch, **overrides)).layers[0].router
    hidden = torch.randn(64, 32, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        logits, weights, indices = router(hidden)
        mine_weights, mine_indices = rule(router, logits, torch.zeros(8, dtype=torch.bool))
    assert torch.equal(mine_indices, indices)
    torch.testing.assert_close(mine_weights.to(weights.dtype), weights, rtol=0, atol=0)
