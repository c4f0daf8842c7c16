import pytest
import torch
import torch.nn.functional as F

from kernels.group_attention import group_attention_reference
from mlcore.video.attention import (
    VideoAttention,
    block_topk_attention,
    block_topk_mask,
    in_group_mass,
    masked_group_attention,
    mass_inside,
    random_group_ids,
    sliding_tile_attention,
    static_group_attention,
    tile_layout,
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


# ------------------------------------------------------------------------------ sparse baselines


def dense_masked_reference(q, k, v, mask):
    """Softmax attention written out with an explicit [.., Nq, N] boolean mask (float64 reference)."""
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    return scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v


def block_topk_reference_mask(q, k, size, topk):
    """Query by query and head by head: mean-pool each block's keys, keep the top-k blocks by q·k̄."""
    B, H, N, _ = q.shape
    mask = torch.zeros(B, H, N, N, dtype=torch.bool)
    for b in range(B):
        for h in range(H):
            pooled = torch.stack([k[b, h, s : s + size].mean(0) for s in range(0, N, size)])
            for i in range(N):
                for block in (pooled @ q[b, h, i]).argsort(descending=True)[:topk].tolist():
                    mask[b, h, i, block * size : (block + 1) * size] = True
    return mask


def sta_reference_mask(grid, tile, window):
    """Token by token: a query sees the key tiles of a window of tiles centred on its tile, shifted inward."""
    f, h, w = grid
    coords = [(t, y, x) for t in range(f) for y in range(h) for x in range(w)]
    counts = [g // s for g, s in zip(grid, tile)]
    mask = torch.zeros(len(coords), len(coords), dtype=torch.bool)
    for i, ci in enumerate(coords):
        tile_i = [c // s for c, s in zip(ci, tile)]
        start = [min(max(t - wd // 2, 0), n - wd) for t, wd, n in zip(tile_i, window, counts)]
        for j, cj in enumerate(coords):
            tile_j = [c // s for c, s in zip(cj, tile)]
            mask[i, j] = all(s <= t < s + wd for t, s, wd in zip(tile_j, start, window))
    return mask


def test_block_top_k_equals_dense_attention_over_each_querys_top_k_blocks_on_both_paths():
    q, k, v = qkv(N=48, dtype=torch.float64)
    expected = dense_masked_reference(q, k, v, block_topk_reference_mask(q, k, 8, 2))
    torch.testing.assert_close(block_topk_attention(q, k, v, 8, 2), expected)
    torch.testing.assert_close(block_topk_attention(q, k, v, 8, 2, gather=True), expected)


def test_block_top_k_makes_each_query_attend_exactly_top_k_blocks_of_keys():
    q, k, _ = qkv(N=64)
    mask = block_topk_mask(q, k, 8, 3)
    assert mask.shape == (2, 2, 64, 64)
    assert (mask.sum(-1) == 24).all() and mask.float().mean() == pytest.approx(3 / 8)
    # different queries pick different blocks: the pattern is content-dependent, not static
    assert not (mask == mask[:, :, :1]).all()


def test_sliding_tile_attention_equals_dense_attention_over_a_brute_force_neighbourhood_on_both_paths():
    grid, tile, window = (4, 4, 6), (2, 2, 2), (1, 2, 3)
    q, k, v = qkv(N=96, dtype=torch.float64)
    expected = dense_masked_reference(q, k, v, sta_reference_mask(grid, tile, window))
    torch.testing.assert_close(sliding_tile_attention(q, k, v, grid, tile, window), expected)
    torch.testing.assert_close(sliding_tile_attention(q, k, v, grid, tile, window, gather=True), expected)


def test_sliding_tile_attention_gathers_in_chunks_without_changing_the_result(monkeypatch):
    import mlcore.video.attention as attention

    grid, tile, window = (4, 4, 6), (2, 2, 2), (1, 2, 3)
    q, k, v = qkv(N=96, dtype=torch.float64)
    whole = sliding_tile_attention(q, k, v, grid, tile, window, gather=True)
    monkeypatch.setattr(attention, "GATHER_ELEMENTS", 1)  # one tile per chunk
    torch.testing.assert_close(sliding_tile_attention(q, k, v, grid, tile, window, gather=True), whole)


def test_the_mask_of_sampled_query_rows_is_those_rows_of_the_whole_mask():
    layout = tile_layout((8, 8, 8), (2, 2, 2), (3, 3, 3))
    rows = torch.tensor([0, 77, 300, 511])
    assert torch.equal(layout.mask(rows), layout.mask()[rows])


def test_sliding_tile_gives_every_query_the_same_number_of_keys_even_at_the_borders():
    layout = tile_layout((8, 8, 8), (2, 2, 2), (3, 3, 3))
    mask = layout.mask()
    assert (mask.sum(-1) == 27 * 8).all()
    assert layout.flop_fraction() == pytest.approx(27 / 64) and mask.float().mean() == pytest.approx(27 / 64)
    assert torch.equal(mask, sta_reference_mask((8, 8, 8), (2, 2, 2), (3, 3, 3)))
    # a corner query's window is shifted inward: it sees tiles 0..2 along each axis, not −1..1
    assert mask[0].reshape(8, 8, 8)[:6, :6, :6].all()


def test_random_groups_are_a_fixed_equal_partition_and_the_mode_averages_them_with_the_local_branches():
    ids = random_group_ids(64, 4)
    assert torch.bincount(ids).tolist() == [16] * 4
    assert torch.equal(ids, random_group_ids(64, 4)) and not torch.equal(ids, torch.arange(64) % 4)
    torch.manual_seed(5)
    layer = VideoAttention(16, 2, mode="random", num_groups=4, window=(2, 2, 2)).double()
    grid = (4, 4, 4)
    x = torch.randn(2, 64, 16, dtype=torch.float64)
    q, k, v = layer.qkv(x).reshape(2, 64, 3, 2, 8).permute(2, 0, 3, 1, 4)

    def same(group):
        return (group[:, None] == group[None, :])[None, None]

    branches = [same(window_ids(grid, (2, 2, 2))), same(window_ids(grid, (1, 4, 4))), same(ids)]
    expected = torch.stack([dense_masked_reference(q, k, v, m) for m in branches]).mean(0)
    torch.testing.assert_close(layer(x, grid), layer.proj(expected.transpose(1, 2).reshape(2, 64, 16)))
    layer.moga_backend = "kernel"  # the group-attention twin path gives the same output
    torch.testing.assert_close(layer(x, grid), layer.proj(expected.transpose(1, 2).reshape(2, 64, 16)))


@pytest.mark.parametrize("mode", ["blocktopk", "sta"])
def test_the_sparse_paths_give_the_same_gradients_as_the_masked_paths(mode):
    q, k, v = (t.requires_grad_() for t in qkv(N=64, dtype=torch.float64))

    def run(gather):
        if mode == "blocktopk":
            return block_topk_attention(q, k, v, 8, 3, gather=gather)
        return sliding_tile_attention(q, k, v, (4, 4, 4), (2, 2, 2), (1, 2, 2), gather=gather)

    grads = [torch.autograd.grad(run(g).square().sum(), (q, k, v)) for g in (False, True)]
    for masked, sparse in zip(*grads):
        torch.testing.assert_close(sparse, masked)


def test_the_video_attention_modes_use_their_sparse_patterns_and_long_inputs_take_the_sparse_path():
    torch.manual_seed(6)
    layer = VideoAttention(16, 2, block_count=8, block_topk=2, sta_tile=(2, 2, 2), sta_window=(1, 2, 2)).double()
    grid = (4, 4, 4)
    x = torch.randn(1, 64, 16, dtype=torch.float64)
    q, k, v = layer.qkv(x).reshape(1, 64, 3, 2, 8).permute(2, 0, 3, 1, 4)

    def project(o):
        return layer.proj(o.transpose(1, 2).reshape(1, 64, 16))

    blocks = dense_masked_reference(q, k, v, block_topk_reference_mask(q, k, 8, 2))
    tiles = dense_masked_reference(q, k, v, sta_reference_mask(grid, (2, 2, 2), (1, 2, 2)))
    torch.testing.assert_close(layer(x, grid, mode="blocktopk"), project(blocks))
    torch.testing.assert_close(layer(x, grid, mode="sta"), project(tiles))
    long = torch.randn(1, 2048, 16, dtype=torch.float64)  # beyond MASKED_MOGA_MAX_TOKENS
    assert layer(long, (8, 16, 16), mode="sta").shape == (1, 2048, 16)


def test_mass_inside_is_one_for_everything_and_matches_in_group_mass_for_a_group_mask():
    q, k, _ = qkv(B=1, N=24)
    everything = mass_inside(q, k, torch.ones(24, 24, dtype=torch.bool))
    assert torch.allclose(everything, torch.ones_like(everything))
    groups = (torch.arange(24) % 3).unsqueeze(0)
    same = (groups[0][:, None] == groups[0][None, :])[None, None]
    assert torch.allclose(mass_inside(q, k, same), in_group_mass(q, k, groups))
