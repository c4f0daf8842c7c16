import pytest
import torch
import torch.nn.functional as F

from kernels.group_attention import group_attention_reference
from mlcore.video.attention import (
    VideoAttention,
    in_group_mass,
    masked_group_attention,
    static_group_attention,
    window_ids,
)


def qkv(B=2, H=2, N=32, D=8, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, N, D, generator=gen, dtype=dtype) for _ in range(3)]


def test_window_ids_tile_the_grid_into_equal_space_time_windows():
    ids = window_ids((4, 4, 4), (2, 2, 2)).reshape(4, 4, 4)
    assert ids.unique().numel() == 8
    assert torch.bincount(ids.reshape(-1)).tolist() == [8] * 8
    assert ids[0, 0, 0] == ids[1, 1, 1] and ids[0, 0, 0] != ids[2, 0, 0] and ids[0, 0, 0] != ids[0, 0, 2]


def test_a_grid_the_window_does_not_divide_is_refused():
    with pytest.raises(ValueError, match="divisible"):
        window_ids((3, 4, 4), (2, 2, 2))


def test_static_windows_equal_sdpa_with_a_block_diagonal_mask():
    q, k, v = qkv()
    ids = window_ids((2, 4, 4), (1, 2, 2))
    expected = group_attention_reference(q, k, v, ids.expand(2, -1))
    assert torch.allclose(static_group_attention(q, k, v, ids), expected, atol=1e-5)


def test_the_masked_moga_path_equals_the_group_kernel_on_ragged_and_empty_groups():
    from kernels import group_attention

    q, k, v = qkv(N=40)
    groups = torch.randint(0, 5, (2, 40), generator=torch.Generator().manual_seed(3))
    groups[groups == 4] = 3  # group 4 is empty
    assert torch.allclose(masked_group_attention(q, k, v, groups), group_attention(q, k, v, groups), atol=1e-5)


def test_with_one_group_moga_is_full_attention_and_the_gate_is_one():
    torch.manual_seed(0)
    layer = VideoAttention(16, 2, mode="moga", num_groups=1)
    x = torch.randn(2, 32, 16)
    q, k, v = layer.qkv(x).reshape(2, 32, 3, 2, 8).permute(2, 0, 3, 1, 4)
    moga = layer._moga(x, q, k, v)
    assert torch.allclose(moga, F.scaled_dot_product_attention(q, k, v), atol=1e-5)
    assert layer.last_stats is not None and layer.last_stats.flop_fraction() == pytest.approx(1.0)


def test_moga_output_is_permutation_equivariant_over_the_tokens():
    torch.manual_seed(1)
    layer = VideoAttention(16, 2, mode="moga", num_groups=3)
    x = torch.randn(1, 32, 16)
    q, k, v = layer.qkv(x).reshape(1, 32, 3, 2, 8).permute(2, 0, 3, 1, 4)
    out = layer._moga(x, q, k, v)
    perm = torch.randperm(32)
    out_perm = layer._moga(x[:, perm], q[:, :, perm], k[:, :, perm], v[:, :, perm])
    assert torch.allclose(out_perm, out[:, :, perm], atol=1e-5)


def test_the_router_gets_gradient_through_the_gate_and_gradcheck_passes_in_float64():
    torch.manual_seed(2)
    layer = VideoAttention(8, 2, mode="moga", num_groups=3, window=(1, 2, 2)).double()
    x = torch.randn(1, 8, 8, dtype=torch.float64, requires_grad=True)

    def f(x):
        return layer(x, (2, 2, 2))

    assert torch.autograd.gradcheck(f, (x,), eps=1e-6, atol=1e-5)
    layer.zero_grad()
    f(x).sum().backward()
    assert layer.router.weight.grad is not None and layer.router.weight.grad.abs().sum() > 0


def test_moga_mode_averages_three_branches_and_local_mode_two():
    torch.manual_seed(3)
    layer = VideoAttention(16, 2, mode="moga", num_groups=2, window=(2, 2, 2))
    x = torch.randn(2, 32, 16)
    grid = (2, 4, 4)
    q, k, v = layer.qkv(x).reshape(2, 32, 3, 2, 8).permute(2, 0, 3, 1, 4)
    window = static_group_attention(q, k, v, window_ids(grid, (2, 2, 2)))
    frame = static_group_attention(q, k, v, window_ids(grid, (1, 4, 4)))
    moga = layer._moga(x, q, k, v)

    def project(o):
        return layer.proj(o.transpose(1, 2).reshape(2, 32, 16))

    assert torch.allclose(layer(x, grid), project((window + frame + moga) / 3), atol=1e-5)
    assert torch.allclose(layer(x, grid, mode="local"), project((window + frame) / 2), atol=1e-5)
    assert torch.allclose(layer(x, grid, mode="full"), project(F.scaled_dot_product_attention(q, k, v)), atol=1e-5)


def test_balance_loss_and_group_sizes_are_recorded_with_empty_groups_counted():
    torch.manual_seed(4)
    layer = VideoAttention(16, 2, mode="moga", num_groups=6)
    with torch.no_grad():
        layer.router.weight[5] = -100.0
    layer(torch.rand(2, 16, 16) + 0.1, (1, 4, 4))  # positive inputs: group 5 scores about −100·Σx
    stats = layer.last_stats
    assert stats is not None
    sizes = stats.group_sizes()
    assert sizes.shape == (6,) and sizes[5] == 0 and sizes.sum() == 32
    assert stats.balance_loss > 0 and 0 < stats.flop_fraction() <= 1


def test_in_group_mass_is_one_for_a_single_group_and_smaller_for_a_split():
    q, k, _ = qkv(B=1, N=24)
    one = in_group_mass(q, k, torch.zeros(1, 24, dtype=torch.long))
    halves = in_group_mass(q, k, (torch.arange(24) % 2).unsqueeze(0))
    assert torch.allclose(one, torch.ones_like(one))
    assert (halves < 1).all() and (halves > 0).all()


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="attention mode"):
        VideoAttention(16, 2, mode="sparse")  # type: ignore[arg-type]
