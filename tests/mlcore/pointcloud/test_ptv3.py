import pytest
import torch

from mlcore.pointcloud.pipeline import domain_index
from mlcore.pointcloud.ptv3 import (
    DomainLayerNorm,
    Level,
    PointBatch,
    PTv3,
    PTv3Config,
    grid_pool,
    make_patches,
    morton,
    parameter_counts,
)

TINY = {"channels": (16, 32), "depths": (1, 1), "dec_depths": (1,), "patch": 16, "embed_dim": 8}


def cloud(n: int, seed: int = 0, samples: int = 1) -> PointBatch:
    g = torch.Generator().manual_seed(seed)
    coord = torch.rand(n, 3, generator=g) * torch.tensor([40.0, 40.0, 10.0])
    return PointBatch(coord, torch.rand(n, 5, generator=g), torch.arange(samples).repeat_interleave(n // samples))


def test_the_z_order_code_interleaves_the_bits_of_x_y_and_z():
    grid = torch.tensor([[1, 0, 0], [0, 1, 0], [0, 0, 1], [3, 0, 0], [1, 1, 1], [2, 0, 0]])
    assert morton(grid).tolist() == [1, 2, 4, 9, 7, 8]
    assert morton(grid, transpose=True).tolist() == [2, 1, 4, 18, 7, 16]


def test_patches_cover_every_token_once_and_never_mix_samples():
    points = cloud(100, samples=2)
    patches = make_patches(points.grid, points.batch, 16, transpose=False)
    assert len(patches.index) % 16 == 0
    assert sorted(patches.index[patches.valid].tolist()) == list(range(100))
    owner = points.batch[patches.index].view(-1, 16)
    assert (owner == owner[:, :1]).all()


def test_grid_pooling_keeps_one_token_per_coarse_voxel_of_each_sample():
    points = cloud(400, samples=2)
    level = Level(coord=points.coord, batch=points.batch)
    coarse = grid_pool(level)
    keys = {(int(b), *(c // 2).tolist()) for b, c in zip(points.batch, points.grid, strict=True)}
    assert len(coarse.coord) == len(keys)
    assert (coarse.batch[coarse.inverse] == points.batch).all()


def test_predictions_do_not_depend_on_point_order_or_on_the_other_samples_in_the_batch():
    torch.manual_seed(0)
    model = PTv3(PTv3Config(proj="moe", **TINY)).eval()
    points = cloud(300)
    with torch.no_grad():
        alone = model(points)
        perm = torch.randperm(300)
        shuffled = model(PointBatch(points.coord[perm], points.feat[perm], points.batch))
        other = cloud(200, seed=1)
        both = model(
            PointBatch(
                torch.cat([points.coord, other.coord]),
                torch.cat([points.feat, other.feat]),
                torch.cat([points.batch, other.batch + 1]),
            )
        )
    assert torch.allclose(shuffled, alone[perm], atol=1e-4)
    assert torch.allclose(both[:300], alone, atol=1e-4)


def test_point_moe_routes_every_point_to_top_k_of_its_experts_in_every_block():
    torch.manual_seed(0)
    model = PTv3(PTv3Config(proj="moe", experts=4, top_k=2, **TINY))
    out = model(cloud(256))
    assert out.shape == (256, 14)
    layers = model.routed()
    assert len(layers) == 3  # every block: two encoder stages and one decoder stage
    for _, layer in layers:
        assert layer.routing is not None and layer.routing.expert_ids.shape[1] == 2
    assert all(r.shape == (256,) and r.max() < 4 for r in model.point_routing())
    balance = model.balance_loss()
    assert balance.requires_grad and 0.9 < float(balance.detach()) < 4.0


def test_the_dense_twin_at_equal_active_compute_matches_point_moes_active_parameters():
    moe = parameter_counts(PTv3(PTv3Config(proj="moe", proj_ratio=1.0, experts=4, top_k=2)))
    dense = parameter_counts(PTv3(PTv3Config(proj="dense", proj_ratio=2.0)))
    wide = parameter_counts(PTv3(PTv3Config(proj="dense", proj_ratio=4.0)))
    assert moe["active"] < moe["total"]
    assert abs(dense["active"] - moe["active"]) / moe["active"] < 0.01  # only the router differs
    assert abs(wide["total"] - moe["total"]) / moe["total"] < 0.01
    ffn = parameter_counts(PTv3(PTv3Config(proj="dense", proj_ratio=2.0, ffn="moe", experts=4, top_k=2)))
    assert abs(ffn["active"] - dense["active"]) / dense["active"] < 0.01


def test_a_few_steps_of_training_lower_the_loss():
    torch.manual_seed(0)
    model = PTv3(PTv3Config(proj="moe", **TINY))
    points = cloud(256)
    labels = (points.coord[:, 2] > 5).long()  # a height rule the model can learn
    opt = torch.optim.AdamW(model.parameters(), lr=5e-3)
    losses = []
    for _ in range(12):
        loss = torch.nn.functional.cross_entropy(model(points), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_layernorm_blocks_keep_logits_finite_where_batchnorm_blocks_overflow():
    # Tokens far outside the statistics an eval-mode BatchNorm was trained on are squared by every
    # gated-ReLU MLP until they overflow; a LayerNorm bounds each token before each MLP.
    g = torch.Generator().manual_seed(0)
    coord = torch.rand(400, 3, generator=g) * 20
    points = PointBatch(coord, torch.rand(400, 5, generator=g) * 1e4, torch.zeros(400, dtype=torch.long))
    logits = {}
    for norm in ("batch", "layer"):
        torch.manual_seed(0)
        model = PTv3(PTv3Config(proj="moe", block_norm=norm, **TINY)).eval()
        with torch.no_grad():
            logits[norm] = model(points)
    assert not torch.isfinite(logits["batch"]).all()
    assert torch.isfinite(logits["layer"]).all()


def test_a_ppt_model_refuses_points_without_their_dataset():
    model = PTv3(PTv3Config(proj="dense", domains=("A", "C"), **TINY)).eval()
    coord = torch.rand(100, 3) * 10
    with pytest.raises(ValueError, match="dataset id"):
        model(PointBatch(coord, torch.rand(100, 5), torch.zeros(100, dtype=torch.long)))


def test_a_ppt_model_normalises_each_sample_with_its_own_datasets_parameters():
    torch.manual_seed(0)
    model = PTv3(PTv3Config(proj="dense", domains=("A", "C"), **TINY)).eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, DomainLayerNorm):
                m.bias[1].normal_()
    coord = torch.rand(200, 3) * 10
    feat = torch.rand(200, 5)
    batch = torch.zeros(200, dtype=torch.long)
    with torch.no_grad():
        as_a = model(PointBatch(coord, feat, batch, domain=torch.tensor([0])))
        as_c = model(PointBatch(coord, feat, batch, domain=torch.tensor([1])))
        both = model(
            PointBatch(
                torch.cat([coord, coord]), torch.cat([feat, feat]), torch.cat([batch, batch + 1]), torch.tensor([0, 1])
            )
        )
    assert not torch.allclose(as_a, as_c)
    torch.testing.assert_close(both[:200], as_a, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(both[200:], as_c, rtol=1e-4, atol=1e-4)


def test_zero_shot_datasets_borrow_the_norm_of_the_first_seen_dataset_of_their_kind():
    domains = ("A", "B", "C", "D")
    assert [domain_index(n, domains) for n in "ABCDEF"] == [0, 1, 2, 3, 2, 0]
    with pytest.raises(ValueError, match="no outdoor dataset"):
        domain_index("E", ("A", "B"))


def test_configurations_saved_before_block_norms_were_chosen_load_as_batchnorm_blocks():
    old = PTv3Config(proj="moe").to_dict()
    del old["block_norm"], old["domains"]
    assert PTv3Config.from_dict(old).block_norm == "batch"
    assert PTv3Config.from_dict(PTv3Config(proj="moe").to_dict()).block_norm == "layer"
