import pytest
import torch

from mlcore.jobs import InMemoryContext, ValidationError
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import execute, prepare
from mlcore.pointcloud.augment import robust_attributes
from mlcore.pointcloud.pipeline import load_segmenter

FAST = {"steps": 12, "scenes": 2, "eval_every": 6, "eval_scenes": 1, "batch_size": 2, "points": 512, "seed": 0}


def run(raw, ctx=None):
    kind = get_kind("pointcloud-train")
    ctx = ctx or InMemoryContext()
    params, inputs = prepare(kind, {**FAST, **raw}, {}, resolver=LocalResolver(), workdir=ctx.workdir)
    return execute(kind, params, inputs, ctx), ctx


def test_it_trains_point_moe_jointly_and_registers_a_segmenter_that_loads():
    outcome, ctx = run({"architecture": "moe-proj", "datasets": "A,C", "balance": 0.01})
    assert outcome.status == "succeeded", outcome.traceback
    assert [s for s, _ in ctx.metrics.series["val_miou_A"]] == [6, 12]
    assert len(ctx.metrics.series["loss"]) == 12 and "balance_loss" in ctx.metrics.series
    scalars = ctx.metrics.scalars
    for name in ("miou_A", "miou_C", "miou_E", "miou_F", "seen_miou", "zero_shot_miou"):
        assert 0 <= scalars[name] <= 1
    assert scalars["active_parameters"] < scalars["parameters"]
    usage = ctx.charts["expert_usage"]["data"]["values"]
    assert {row["dataset"] for row in usage} == {"A", "C", "E", "F"}
    (registration,) = ctx.registrations
    assert registration.kind == "pointcloud-segmenter" and registration.card["architecture"] == "moe-proj"
    model, config = load_segmenter(registration.path)
    assert model.cfg.is_moe and config["card"]["datasets"] == ["A", "C"]
    # As the zoo's: a tiled scan labels like the whole one, and points under the floor do not lift it.
    assert (model.cfg.patch_layout, model.cfg.ground) == ("local", "robust")


def test_on_synmix_it_trains_as_the_zoo_does_robust_to_both_attributes_with_statistics_per_presence():
    outcome, ctx = run({"architecture": "dense", "datasets": "A,C", "steps": 3, "eval_every": 0})
    assert outcome.status == "succeeded", outcome.traceback
    assert any(
        line.startswith("attribute robustness batch-30:") and "per attribute presence" in line for line in ctx.lines
    )
    model, config = load_segmenter(ctx.registrations[0].path)
    assert config["card"]["attribute_augment"] == "batch-30" and config["card"]["height"] == "scan"
    # pointcloud-segment's attributes=auto may give it what a scan carries, and reads each with its own set.
    assert robust_attributes(config) == ("colour", "intensity")
    assert set(model.presence_stats) == {"none", "colour", "intensity", "colour+intensity"}


def test_training_with_attributes_as_the_scans_hold_them_keeps_no_presence_statistics():
    outcome, ctx = run(
        {"architecture": "dense", "datasets": "A", "steps": 2, "eval_every": 0, "attribute_augment": "off"}
    )
    assert outcome.status == "succeeded", outcome.traceback
    model, config = load_segmenter(ctx.registrations[0].path)
    assert "presence_stats" not in config and getattr(model, "presence_stats", None) is None
    assert robust_attributes(config) is None


def test_the_dense_twin_trains_with_single_dataset_batches_and_has_no_usage_chart():
    outcome, ctx = run({"architecture": "dense", "datasets": "B,D", "mixed": False, "steps": 4, "eval_every": 0})
    assert outcome.status == "succeeded", outcome.traceback
    assert "expert_usage" not in ctx.charts and "balance_loss" not in ctx.metrics.series
    assert ctx.metrics.scalars["active_parameters"] == ctx.metrics.scalars["parameters"]
    assert any("single-dataset batches" in line for line in ctx.lines)
    (registration,) = ctx.registrations
    block = load_segmenter(registration.path)[0].encoder[0][0]
    assert isinstance(block.norm1, torch.nn.LayerNorm)


def test_the_papers_batchnorm_blocks_can_be_chosen_and_load_back_as_such():
    outcome, ctx = run(
        {"architecture": "moe-proj", "block_norm": "batch", "datasets": "A", "steps": 2, "eval_every": 0}
    )
    assert outcome.status == "succeeded", outcome.traceback
    (registration,) = ctx.registrations
    block = load_segmenter(registration.path)[0].encoder[0][0]
    assert isinstance(block.norm1, torch.nn.BatchNorm1d) and isinstance(block.norm2, torch.nn.BatchNorm1d)


def test_top_k_above_the_expert_count_is_refused():
    with pytest.raises(ValidationError) as caught:
        run({"experts": 2, "top_k": 3})
    assert "top_k" in str(caught.value.errors)


def test_a_cancelled_training_stops_between_steps():
    ctx = InMemoryContext()
    ctx.cancel()
    outcome, _ = run({"steps": 5}, ctx=ctx)
    assert outcome.status == "cancelled"
