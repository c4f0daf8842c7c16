"""The fused inference path (BatchNorm and LayerNorm affine maps folded into linear layers,
activations fused into oneDNN matmuls) computes the same function as the readable training path it
replaces at inference."""

import numpy as np
import pytest
import torch

from mlcore.pointcloud.datasets import make_scan
from mlcore.pointcloud.ptv3 import DomainLayerNorm, PointBatch, PTv3, PTv3Config, fused_linear, reference_inference
from mlcore.pointcloud.segment import segment_cloud

TINY = {"channels": (16, 32), "depths": (1, 1), "dec_depths": (1,), "patch": 16, "embed_dim": 8}


def trained_looking(cfg: PTv3Config, seed: int = 0) -> PTv3:
    """An eval-mode model whose norms hold non-trivial statistics and affine parameters, so folding
    them is actually exercised (fresh ones are the identity)."""
    torch.manual_seed(seed)
    model = PTv3(cfg)
    g = torch.Generator().manual_seed(seed + 1)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm1d):
            n = m.num_features
            m.running_mean.copy_(torch.randn(n, generator=g) * 0.3)
            m.running_var.copy_(torch.rand(n, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(n, generator=g) * 0.5 + 0.5)
            m.bias.data.copy_(torch.randn(n, generator=g) * 0.1)
        if isinstance(m, torch.nn.LayerNorm | DomainLayerNorm):
            m.weight.data.copy_(torch.rand(m.weight.shape, generator=g) * 0.5 + 0.5)
            m.bias.data.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
    return model.eval()


def cloud(n: int, samples: int = 1, seed: int = 0) -> PointBatch:
    g = torch.Generator().manual_seed(seed)
    coord = torch.rand(n, 3, generator=g) * torch.tensor([30.0, 30.0, 8.0])
    batch = torch.arange(samples).repeat_interleave(n // samples)
    return PointBatch(coord, torch.rand(n, 5, generator=g), batch, domain=torch.arange(samples) % 2)


@pytest.mark.parametrize(
    "variant",
    [
        {"proj": "moe"},
        {"proj": "dense", "proj_ratio": 2.0},
        {"proj": "linear"},
        {"proj": "dense", "proj_ratio": 2.0, "ffn": "moe"},
        {"proj": "moe", "block_norm": "batch"},
        {"proj": "dense", "proj_ratio": 2.0, "block_norm": "batch"},
        {"proj": "dense", "proj_ratio": 2.0, "domains": ("A", "C")},
    ],
    ids=["moe-proj", "dense-proj", "linear-proj", "moe-ffn", "moe-proj-bn", "dense-proj-bn", "ppt"],
)
def test_fused_inference_gives_the_logits_and_routing_of_the_training_path(variant):
    model = trained_looking(PTv3Config(**variant, **TINY))
    points = cloud(600, samples=2)
    with torch.no_grad():
        fused = model(points)
        fused_routing = [r.clone() for r in model.point_routing()] if model.cfg.is_moe else []
        with reference_inference():
            reference = model(points)
            reference_routing = model.point_routing() if model.cfg.is_moe else []
    assert torch.isfinite(reference).all()
    torch.testing.assert_close(fused, reference, rtol=1e-4, atol=1e-4)
    assert (fused.argmax(-1) == reference.argmax(-1)).all()
    for a, b in zip(fused_routing, reference_routing, strict=True):
        assert (a == b).all()


def test_training_and_autograd_never_take_the_fused_path():
    model = trained_looking(PTv3Config(proj="moe", **TINY))
    points = cloud(300)
    logits = model(points)  # eval mode, autograd on: the training path, differentiable
    logits.sum().backward()
    assert model.encoder[0][0].qkv.weight.grad is not None and model.encoder[0][0].norm1.weight.grad is not None


def test_fused_linear_applies_the_activation_after_the_affine_map():
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(50, 12, generator=g), torch.randn(7, 12, generator=g), torch.randn(7, generator=g)
    with torch.no_grad():
        torch.testing.assert_close(fused_linear(x, w, b), x @ w.T + b)
        torch.testing.assert_close(fused_linear(x, w, b, "relu"), torch.relu(x @ w.T + b))
        torch.testing.assert_close(fused_linear(x, w, None, "gelu"), torch.nn.functional.gelu(x @ w.T))


def test_segmenting_a_seeded_street_gives_the_labels_of_the_training_path():
    street = make_scan("D", 1, "val")
    model = trained_looking(PTv3Config(proj="moe", **{**TINY, "patch": 32}))
    fused = segment_cloud(model, street.xyz, None, street.intensity, grid=0.1)
    with reference_inference():
        reference = segment_cloud(model, street.xyz, None, street.intensity, grid=0.1)
    assert (fused.labels == reference.labels).mean() > 0.999
    assert fused.usage is not None and reference.usage is not None
    assert np.abs(fused.usage - reference.usage).sum() <= 0.002 * reference.usage.sum()


def test_a_batchnorm_left_in_training_mode_keeps_its_batch_statistics():
    model = trained_looking(PTv3Config(proj="moe", **TINY))
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm1d):
            m.train()
            m.momentum = 0.0  # batch statistics, running ones untouched
    points = cloud(400)
    with torch.no_grad():
        fused = model(points)
        with reference_inference():
            reference = model(points)
    torch.testing.assert_close(fused, reference)
