"""Group attention, kernel and twin, against dense masked attention in float64."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernels import group_attention
from kernels.dispatch import LAUNCHES
from kernels.group_attention import (
    GroupSort,
    group_attention_reference,
    group_attention_torch,
    group_attention_triton_forward,
    segment_blocks,
)

# (batch, heads, tokens, head dim, groups, how groups are drawn)
SHAPES = {
    "ragged": (2, 2, 37, 8, 4, "random"),
    "empty-groups": (1, 2, 23, 12, 6, "skip-odd"),
    "single-token": (1, 1, 1, 4, 3, "random"),
    "one-group": (1, 2, 20, 16, 1, "random"),
    "more-groups-than-tokens": (2, 1, 5, 8, 9, "random"),
}
MASKS = {"plain": (False, None), "causal": (True, None), "window": (False, 4), "causal-window": (True, 3)}


def make_problem(
    shape: tuple[int, int, int, int, int, str], dtype: torch.dtype = torch.float64, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    B, heads, N, d, G, draw = shape
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, heads, N, d, generator=gen, dtype=dtype) for _ in range(3))
    groups = torch.randint(0, G, (B, N), generator=gen)
    if draw == "skip-odd":
        groups = groups // 2 * 2
    return q, k, v, groups


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return float((actual.double() - expected).abs().max() / expected.abs().max().clamp_min(1e-12))


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize("mask", MASKS.values(), ids=MASKS.keys())
def test_the_twin_matches_dense_masked_attention(shape: tuple, mask: tuple[bool, int | None]) -> None:
    causal, window = mask
    q, k, v, groups = make_problem(shape)
    expected = group_attention_reference(q, k, v, groups, causal=causal, window=window)
    actual = group_attention_torch(q, k, v, groups, causal=causal, window=window)
    assert relative_error(actual, expected) < 1e-12


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize("mask", MASKS.values(), ids=MASKS.keys())
def test_the_triton_kernel_matches_dense_masked_attention(
    shape: tuple, mask: tuple[bool, int | None], triton_interpreted: None
) -> None:
    causal, window = mask
    q, k, v, groups = make_problem(shape)
    expected = group_attention_reference(q, k, v, groups, causal=causal, window=window, scale=0.3)
    before = LAUNCHES["group_attention"]
    actual = group_attention_triton_forward(
        q.float(), k.float(), v.float(), groups, causal=causal, window=window, scale=0.3
    )
    assert LAUNCHES["group_attention"] == before + 1
    assert relative_error(actual, expected) < 1e-5


def test_one_group_equals_full_sdpa() -> None:
    q, k, v, _ = make_problem(SHAPES["one-group"])
    groups = torch.zeros(q.shape[0], q.shape[2], dtype=torch.int64)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert relative_error(group_attention_torch(q, k, v, groups, causal=True), expected) < 1e-12


def test_the_output_is_permutation_equivariant() -> None:
    q, k, v, groups = make_problem(SHAPES["ragged"])
    shuffle = torch.randperm(q.shape[2], generator=torch.Generator().manual_seed(1))
    out = group_attention_torch(q, k, v, groups)
    shuffled = group_attention_torch(q[:, :, shuffle], k[:, :, shuffle], v[:, :, shuffle], groups[:, shuffle])
    assert relative_error(shuffled, out[:, :, shuffle]) < 1e-12


def test_the_dispatcher_runs_the_triton_kernel_and_backpropagates_like_the_twin(
    force_backend, triton_interpreted: None
) -> None:
    q, k, v, groups = make_problem(SHAPES["empty-groups"], dtype=torch.float32)
    grad_out = torch.randn(q.shape)
    grads = {}
    for backend in ("triton", "torch"):
        force_backend(backend)
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        before = LAUNCHES["group_attention"]
        out = group_attention(*leaves, groups, causal=True)
        assert LAUNCHES["group_attention"] == before + (backend == "triton")
        grads[backend] = torch.autograd.grad(out, leaves, grad_out)
    for a, e in zip(grads["triton"], grads["torch"]):
        assert torch.allclose(a, e, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("mask", MASKS.values(), ids=MASKS.keys())
def test_twin_passes_gradcheck_on_a_tiny_problem(mask: tuple[bool, int | None]) -> None:
    causal, window = mask
    q, k, v, groups = make_problem((1, 1, 7, 3, 3, "random"))
    inputs = [t.requires_grad_() for t in (q, k, v)]
    assert torch.autograd.gradcheck(
        lambda q, k, v: group_attention_torch(q, k, v, groups, causal=causal, window=window), inputs
    )


def test_segment_blocks_cover_every_group_in_block_sized_pieces() -> None:
    groups = torch.tensor([[1, 1, 0, 1, 1, 1, 3], [0, 0, 0, 0, 0, 0, 0]])
    batch, q_start, seg_start, seg_end = segment_blocks(GroupSort(groups), block_m=2)
    # Sequence 0 sorts to [g0 | g1 g1 g1 g1 g1 | g3]; sequence 1 is one group of 7.
    assert batch.tolist() == [0, 0, 0, 0, 0, 1, 1, 1, 1]
    assert q_start.tolist() == [0, 1, 3, 5, 6, 0, 2, 4, 6]
    assert seg_start.tolist() == [0, 1, 1, 1, 6, 0, 0, 0, 0]
    assert seg_end.tolist() == [1, 6, 6, 6, 7, 7, 7, 7, 7]


def test_it_rejects_group_ids_of_the_wrong_shape() -> None:
    q, k, v, groups = make_problem(SHAPES["ragged"])
    with pytest.raises(ValueError, match="group_ids must be"):
        group_attention_torch(q, k, v, groups[:, :-1])


def test_it_rejects_a_window_of_zero() -> None:
    q, k, v, groups = make_problem(SHAPES["ragged"])
    with pytest.raises(ValueError, match="window must be"):
        group_attention_torch(q, k, v, groups, window=0)
