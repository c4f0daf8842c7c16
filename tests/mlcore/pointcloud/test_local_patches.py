"""The local patch layout: a patch far from a window's edge holds the same tokens whether the window
is cut or not (the rank layout's do not), padding changes nothing, and old configurations keep the
rank layout and their numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mlcore.pointcloud import ptv3
from mlcore.pointcloud.pipeline import load_segmenter, save_segmenter
from mlcore.pointcloud.ptv3 import (
    Level,
    Patches,
    PointBatch,
    PTv3,
    PTv3Config,
    grid_pool,
    layout_patches,
    leaf_depths,
    make_local_patches,
    make_patches,
    morton,
)

TINY = {"channels": (16, 32), "depths": (1, 1), "dec_depths": (1,), "patch": 16, "embed_dim": 8}
#: A window's lowest corner sits at a multiple of the root cube (segment.WINDOW_ALIGN_VOXELS).
ROOT = 2**ptv3.LOCAL_ROOT_BITS


def street(size: int, seed: int = 0) -> torch.Tensor:
    """[N, 3] float voxel coordinates of a street-like surface: half the voxels of a ground plane
    ``size`` × ``size``, and two walls 12 voxels high along y."""
    g = torch.Generator().manual_seed(seed)
    ground = torch.cartesian_prod(torch.arange(size), torch.arange(size), torch.zeros(1, dtype=torch.long))
    walls = [
        torch.cartesian_prod(torch.arange(size), torch.tensor([y]), torch.arange(1, 13)) for y in (size // 5, size - 3)
    ]
    cells = torch.cat([ground, *walls])
    cells = cells[torch.rand(len(cells), generator=g) < 0.5]
    return cells.float() + torch.rand(len(cells), 3, generator=g) * 0.9


def members(patches: Patches, ids: torch.Tensor) -> list[frozenset[int]]:
    """Per token, the ids of the tokens in its patch."""
    patch_of = torch.zeros(len(patches.slot_of), dtype=torch.long)
    patch_id = torch.zeros(len(patches.index), dtype=torch.long)
    start, first = 0, 0
    for size, run in patches.runs():
        count = (run.stop - run.start) // size
        patch_id[run] = torch.arange(first, first + count).repeat_interleave(size)
        first += count
        start = run.stop
    assert start == len(patches.index)
    patch_of[patches.index[patches.valid]] = patch_id[patches.valid]
    groups: dict[int, set[int]] = {}
    for token, p in enumerate(patch_of.tolist()):
        groups.setdefault(p, set()).add(int(ids[token]))
    return [frozenset(groups[p]) for p in patch_of.tolist()]


def changed_far_from_the_cut(layout: str, transpose: bool, *, cut: float, far: float) -> float:
    """The share of tokens more than ``far`` voxels inside a window (x < cut) whose patch holds other
    tokens than in the whole cloud. The window is shifted by one root cube, as a tile's may be."""
    coord = street(160)
    batch = torch.zeros(len(coord), dtype=torch.long)
    ids = torch.arange(len(coord))
    inside = coord[:, 0] < cut
    shift = torch.tensor([ROOT, 0, 0])

    def patches(grid: torch.Tensor, b: torch.Tensor) -> Patches:
        if layout == "local":
            return make_local_patches(grid, b, 16, transpose=transpose, root_bits=ptv3.LOCAL_ROOT_BITS)
        return make_patches(grid, b, 16, transpose=transpose)

    whole = members(patches(coord.long(), batch), ids)
    window = members(patches(coord[inside].long() + shift, batch[inside]), ids[inside])
    far_ids = ids[inside][coord[inside, 0] < cut - far]
    position = {int(i): k for k, i in enumerate(ids[inside].tolist())}
    differ = [whole[int(i)] != window[position[int(i)]] for i in far_ids]
    return sum(differ) / len(differ)


@pytest.mark.parametrize("transpose", [False, True])
def test_patches_far_from_a_windows_edge_hold_the_same_tokens_whether_the_window_is_cut_or_not(transpose: bool) -> None:
    assert changed_far_from_the_cut("local", transpose, cut=100.5, far=16) == 0.0
    # The rank layout re-cuts every patch after the first token that the window lost along the curve.
    assert changed_far_from_the_cut("rank", transpose, cut=100.5, far=16) > 0.2


def test_each_token_sits_in_the_shallowest_octree_cube_holding_at_most_patch_tokens() -> None:
    g = torch.Generator().manual_seed(0)
    grid = (torch.rand(3000, 3, generator=g) ** 3 * 500).long()
    batch = torch.randint(0, 3, (3000,), generator=g).sort().values
    key = ((batch << 48) | morton(grid)).sort().values
    for patch in (4, 16, 64):
        for depth in range(8):
            cube = key >> (3 * (8 - depth))
            _, inverse, counts = torch.unique_consecutive(cube, return_inverse=True, return_counts=True)
            leaf = leaf_depths(key, patch, 8)
            # Shallower than its leaf: the cube holds too many; at its leaf depth: it fits.
            assert (counts[inverse][leaf > depth] > patch).all()
            assert (counts[inverse][leaf == depth] <= patch).all()


def test_local_patches_cover_every_token_once_and_stay_inside_one_sample_and_root_cube(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ptv3, "LOCAL_SLOT_STEP", 4)  # patches of 4, 8, 12 and 16 slots
    first, second = street(60), street(60, seed=1)
    coord = torch.cat([first, second])
    batch = torch.cat([torch.zeros(len(first)), torch.ones(len(second))]).long()
    grid = coord.long()
    for transpose in (False, True):
        patches = make_local_patches(grid, batch, 16, transpose=transpose, root_bits=4)
        assert [size for size, _ in patches.buckets] == [4, 8, 12, 16]
        assert sorted(patches.index[patches.valid].tolist()) == list(range(len(coord)))
        shift = ptv3.LOCAL_SHIFT & 15 if transpose else 0
        for size, run in patches.runs():
            tokens = patches.index[run].view(-1, size)
            owner = batch[tokens]
            root = (grid[tokens] + shift) >> 4
            assert (owner == owner[:, :1]).all() and (root == root[:, :1]).all()


def test_the_two_local_layouts_cut_along_different_cube_borders() -> None:
    coord = street(96)
    grid, batch, ids = coord.long(), torch.zeros(len(coord), dtype=torch.long), torch.arange(len(coord))
    plain = members(make_local_patches(grid, batch, 16, transpose=False, root_bits=10), ids)
    shifted = members(make_local_patches(grid, batch, 16, transpose=True, root_bits=10), ids)
    assert sum(a != b for a, b in zip(plain, shifted, strict=True)) / len(plain) > 0.8


def test_local_patches_pad_little() -> None:
    coord = street(128)
    level = Level(coord=coord, batch=torch.zeros(len(coord), dtype=torch.long))
    cfg = PTv3Config(patch_layout="local")
    for stage in range(3):
        if stage:
            level = grid_pool(level)
        for transpose in (False, True):
            patches = layout_patches(cfg, level, stage, transpose=transpose)
            assert patches.valid.float().mean() > 0.75


def model_and_cloud(layout: str) -> tuple[PTv3, PointBatch]:
    torch.manual_seed(0)
    model = PTv3(PTv3Config(proj="moe", patch_layout=layout, **TINY)).eval()
    coord = street(48)
    return model, PointBatch(coord, torch.rand(len(coord), 5), torch.zeros(len(coord), dtype=torch.long))


def test_padding_slots_change_no_output_of_a_local_layout_model(monkeypatch: pytest.MonkeyPatch) -> None:
    model, points = model_and_cloud("local")
    with torch.no_grad():
        monkeypatch.setattr(ptv3, "LOCAL_SLOT_STEP", 4)  # patches of 4, 8, 12 or 16 slots
        fused = model(points)
        with ptv3.reference_inference():
            reference = model(points)
        monkeypatch.setattr(ptv3, "LOCAL_SLOT_STEP", 16)  # every patch padded to the full 16 slots
        padded = model(points)
    assert torch.allclose(fused, reference, atol=1e-4)
    assert torch.allclose(padded, fused, atol=1e-4)


@pytest.mark.parametrize("layout", ["local", "rank"])
def test_a_local_layout_model_labels_points_far_from_a_windows_edge_as_it_does_uncut(layout: str) -> None:
    model, points = model_and_cloud(layout)
    inside = points.coord[:, 0] < 30.5
    far = points.coord[inside, 0] < 30.5 - 12
    window = PointBatch(
        points.coord[inside] + torch.tensor([float(ROOT), 0.0, 0.0]), points.feat[inside], points.batch[inside]
    )
    with torch.no_grad():
        whole = model(points)[inside][far]
        cut = model(window)[far]
    if layout == "local":
        assert torch.allclose(whole, cut, atol=1e-3)
    else:
        assert not torch.allclose(whole, cut, atol=1e-3)


def test_a_config_saved_before_patch_layout_existed_loads_with_the_rank_layout_and_the_same_numbers(
    tmp_path: Path,
) -> None:
    model, points = model_and_cloud("rank")
    save_segmenter(model, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    del config["model"]["patch_layout"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    loaded, _ = load_segmenter(tmp_path)
    assert loaded.cfg.patch_layout == "rank"
    with torch.no_grad():
        rank_cut = PTv3(model.cfg).eval()  # the rank layout: PTv3's patches, as before the field
        local = PTv3(PTv3Config(proj="moe", patch_layout="local", **TINY)).eval()
        for twin in (rank_cut, local):
            twin.load_state_dict(loaded.state_dict())
        assert torch.equal(loaded(points), rank_cut(points))
        assert not torch.allclose(loaded(points), local(points), atol=1e-3)


def test_an_unknown_patch_layout_is_refused() -> None:
    with pytest.raises(ValueError, match="patch_layout"):
        PTv3Config(patch_layout="hilbert")
