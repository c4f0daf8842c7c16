"""The fused MoE kernel and its twin against equation (1) in float64, on awkward routings."""

from __future__ import annotations

import pytest
import torch

from kernels import fused_moe
from kernels.dispatch import LAUNCHES
from kernels.fused_moe import align_block_size, fused_moe_reference, fused_moe_torch, fused_moe_triton_forward

# (tokens, hidden, intermediate, experts, top-k, how experts are drawn)
SHAPES = {
    "ragged": (13, 24, 20, 6, 2, "ragged"),
    "empty-experts": (9, 16, 12, 8, 2, "skip-half"),
    "single-token": (1, 16, 8, 4, 2, "ragged"),
    "more-experts-than-tokens": (3, 16, 8, 12, 3, "ragged"),
    "one-expert-takes-all": (17, 16, 8, 5, 1, "one"),
}


def make_problem(
    shape: tuple[int, int, int, int, int, str],
    *,
    gated: bool = True,
    bias: bool = False,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
) -> tuple[list[torch.Tensor], dict[str, torch.Tensor | None]]:
    T, H, I, E, k, draw = shape
    gen = torch.Generator().manual_seed(seed)
    if draw == "one":
        ids = torch.full((T, k), E - 1, dtype=torch.int64)
    else:
        # Distinct experts per token, drawn from all experts or from the even ones only (odd ones stay empty).
        pool = torch.arange(0, E, 2 if draw == "skip-half" else 1)
        draws = [torch.randperm(len(pool), generator=gen)[:k] for _ in range(T)]
        ids = pool[torch.stack(draws)] if draws else torch.empty(0, k, dtype=torch.int64)
    rows = (2 if gated else 1) * I
    hidden = torch.randn(T, H, generator=gen, dtype=dtype)
    w_gate_up = torch.randn(E, rows, H, generator=gen, dtype=dtype) / H**0.5
    w_down = torch.randn(E, H, I, generator=gen, dtype=dtype) / I**0.5
    weights = torch.rand(T, k, generator=gen, dtype=dtype)
    biases = {
        "b_gate_up": torch.randn(E, rows, generator=gen, dtype=dtype) if bias else None,
        "b_down": torch.randn(E, H, generator=gen, dtype=dtype) if bias else None,
    }
    return [hidden, w_gate_up, w_down, ids, weights], biases


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return float((actual.double() - expected).abs().max() / expected.abs().max().clamp_min(1e-12))


def as_float32(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    return [t.float() if t.is_floating_point() else t for t in tensors]


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize("activation", ["silu", "gelu", "relu"])
def test_the_twin_matches_the_reference_in_float64(shape: tuple, activation: str) -> None:
    for gated in (True, False):
        for bias in (False, True):
            args, biases = make_problem(shape, gated=gated, bias=bias)
            expected = fused_moe_reference(*args, activation=activation, gated=gated, **biases)
            actual = fused_moe_torch(*args, activation=activation, gated=gated, **biases)
            assert relative_error(actual, expected) < 1e-12, (gated, bias)


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize("activation", ["silu", "gelu", "relu"])
def test_the_triton_kernel_matches_the_reference_in_float32(
    shape: tuple, activation: str, triton_interpreted: None
) -> None:
    for gated, bias in ((True, False), (False, True)):
        args, biases = make_problem(shape, gated=gated, bias=bias)
        expected = fused_moe_reference(*args, activation=activation, gated=gated, **biases)
        f32_biases = {name: None if b is None else b.float() for name, b in biases.items()}
        before = LAUNCHES["fused_moe"]
        actual = fused_moe_triton_forward(*as_float32(args), activation=activation, gated=gated, **f32_biases)
        assert LAUNCHES["fused_moe"] == before + 1
        assert actual.dtype == torch.float32
        assert relative_error(actual, expected) < 1e-5, (gated, bias)


def test_the_dispatcher_runs_the_triton_kernel_when_forced(force_backend, triton_interpreted: None) -> None:
    force_backend("triton")
    args, biases = make_problem(SHAPES["ragged"], bias=True)
    before = LAUNCHES["fused_moe"]
    out = fused_moe(*as_float32(args), **{n: b.float() for n, b in biases.items()})
    assert LAUNCHES["fused_moe"] == before + 1
    assert relative_error(out, fused_moe_reference(*args, **biases)) < 1e-5


def test_the_twin_never_launches_a_kernel(force_backend) -> None:
    force_backend("torch")
    before = LAUNCHES["fused_moe"]
    fused_moe(*as_float32(make_problem(SHAPES["ragged"])[0]))
    assert LAUNCHES["fused_moe"] == before


@pytest.mark.parametrize("shape", [SHAPES["ragged"], SHAPES["empty-experts"]], ids=["ragged", "empty-experts"])
@pytest.mark.parametrize("activation", ["silu", "gelu", "relu"])
def test_twin_gradients_match_autograd_through_the_reference(shape: tuple, activation: str) -> None:
    for gated in (True, False):
        args, biases = make_problem(shape, gated=gated, bias=True)
        leaves = [t.requires_grad_() for i, t in enumerate(args) if i != 3]
        bias_leaves = [b.requires_grad_() for b in biases.values()]
        grad_out = torch.randn(args[0].shape, dtype=torch.float64)
        expected = torch.autograd.grad(
            fused_moe_reference(*args, activation=activation, gated=gated, **biases), leaves + bias_leaves, grad_out
        )
        actual = torch.autograd.grad(
            fused_moe_torch(*args, activation=activation, gated=gated, **biases), leaves + bias_leaves, grad_out
        )
        for a, e in zip(actual, expected):
            assert relative_error(a, e) < 1e-12


def test_twin_passes_gradcheck_on_a_tiny_problem() -> None:
    args, biases = make_problem((4, 5, 3, 3, 2, "ragged"), bias=True)
    ids = args[3]

    def layer(hidden, w_gate_up, w_down, weights, b_gate_up, b_down):
        return fused_moe_torch(hidden, w_gate_up, w_down, ids, weights, b_gate_up=b_gate_up, b_down=b_down)

    inputs = [t.requires_grad_() for t in (args[0], args[1], args[2], args[4], *biases.values())]
    assert torch.autograd.gradcheck(layer, inputs)


def test_the_triton_path_backpropagates_like_the_twin(force_backend, triton_interpreted: None) -> None:
    args, biases = make_problem(SHAPES["empty-experts"], bias=True, dtype=torch.float32)
    grad_out = torch.randn(args[0].shape)
    grads = {}
    for backend in ("triton", "torch"):
        force_backend(backend)
        leaves = [t.detach().requires_grad_() for i, t in enumerate(args) if i != 3]
        bias_leaves = [b.detach().requires_grad_() for b in biases.values()]
        out = fused_moe(
            leaves[0], leaves[1], leaves[2], args[3], leaves[3], b_gate_up=bias_leaves[0], b_down=bias_leaves[1]
        )
        grads[backend] = torch.autograd.grad(out, leaves + bias_leaves, grad_out)
    for a, e in zip(grads["triton"], grads["torch"]):
        assert torch.allclose(a, e, atol=1e-5, rtol=1e-4)


def test_block_alignment_pads_each_expert_to_whole_blocks_and_skips_empty_ones() -> None:
    ids = torch.tensor([[2, 0], [2, 3], [0, 2]])
    sorted_ids, block_expert = align_block_size(ids, num_experts=5, block_m=4)
    assert block_expert.tolist() == [0, 2, 3]
    pad = ids.numel()
    assert sorted_ids.tolist() == [1, 4, pad, pad, 0, 2, 5, pad, 3, pad, pad, pad]


def test_it_rejects_an_expert_id_out_of_range() -> None:
    args, _ = make_problem(SHAPES["ragged"])
    args[3][0, 0] = 6
    with pytest.raises(ValueError, match="topk_ids must lie in"):
        fused_moe_torch(*args)


def test_it_rejects_weights_in_the_wrong_layout() -> None:
    args, _ = make_problem(SHAPES["ragged"])
    args[1] = args[1].transpose(1, 2)
    with pytest.raises(ValueError, match="w_gate_up must be"):
        fused_moe_torch(*args)


def test_it_returns_an_empty_output_for_no_tokens() -> None:
    args, _ = make_problem((0, 8, 4, 3, 2, "ragged"))
    assert fused_moe_torch(*args).shape == (0, 8)


def test_the_gate_is_the_first_half_of_gate_up_as_in_transformers_mixtral() -> None:
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralExperts

    config = MixtralConfig(hidden_size=16, intermediate_size=8, num_local_experts=5, hidden_act="silu")
    experts = MixtralExperts(config).double()
    torch.nn.init.normal_(experts.gate_up_proj, std=0.3)
    torch.nn.init.normal_(experts.down_proj, std=0.3)
    (hidden, _, _, ids, weights), _ = make_problem((11, 16, 8, 5, 2, "ragged"))
    with torch.no_grad():
        expected = experts(hidden, ids, weights)
        actual = fused_moe_torch(hidden, experts.gate_up_proj, experts.down_proj, ids, weights)
    assert relative_error(actual, expected) < 1e-12
