import pytest

from mlcore.jobs import InMemoryContext, ValidationError
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import execute, prepare
from mlcore.video.dit import VideoDiT

FAST = {
    "dim": 16,
    "depth": 1,
    "heads": 2,
    "experts": 3,
    "groups": 2,
    "frames": 4,
    "resolution": 8,
    "steps": 6,
    "batch_size": 4,
    "sample_every": 3,
    "seed": 0,
}


def run(raw, ctx=None, kind="video-train"):
    defaults = FAST if kind == "video-train" else {}
    kind = get_kind(kind)
    ctx = ctx or InMemoryContext()
    params, inputs = prepare(kind, {**defaults, **raw}, {}, resolver=LocalResolver(), workdir=ctx.workdir)
    return execute(kind, params, inputs, ctx), ctx


def test_it_trains_promoe_with_moga_and_registers_a_model_the_generate_job_can_sample():
    outcome, ctx = run({"ffn": "promoe", "attention": "moga"})
    assert outcome.status == "succeeded", outcome.traceback
    assert len(ctx.metrics.series["rf_loss"]) == 6
    assert [s for s, _ in ctx.metrics.series["heldout_rf_loss"]] == [3, 6]
    assert {"loss", "heldout_rf_loss", "group_sizes", "expert_usage"} <= set(ctx.charts)
    usage = ctx.charts["expert_usage"]["data"]["values"]
    assert {row["index"] for row in usage} == {0, 1, 2, 3}  # 3 prototype experts + the unconditional one
    assert {"samples at step 3.png", "sample at step 3.gif", "samples at step 6.png"} <= set(ctx.artifacts)
    (registration,) = ctx.registrations
    assert registration.kind == "video-dit" and registration.card["ffn"] == "promoe"
    model = VideoDiT.from_pretrained(registration.path)
    assert model.config.attention == "moga" and model.config.num_experts == 3

    generated, _ = run(
        {"model": str(registration.path), "clips": 1, "frames": 4, "resolution": 8, "steps": 2, "seed": 0},
        kind="video-generate",
    )
    assert generated.status == "succeeded", generated.traceback


def test_it_fine_tunes_a_given_model_with_another_attention_pattern(tmp_path):
    VideoDiT(dim=16, depth=1, heads=2, ffn_width=32, attention="full").save_pretrained(tmp_path)
    outcome, ctx = run({"init": str(tmp_path), "attention": "local", "steps": 2, "sample_every": 0})
    assert outcome.status == "succeeded", outcome.traceback
    assert VideoDiT.from_pretrained(ctx.registrations[0].path).config.attention == "local"
    assert any("fine-tuning" in line for line in ctx.lines)


def test_heads_that_do_not_divide_the_width_are_refused():
    with pytest.raises(ValidationError) as caught:
        run({"dim": 24, "heads": 5})
    assert "heads" in str(caught.value.errors)


def test_a_cancelled_training_stops_between_steps_and_registers_nothing():
    ctx = InMemoryContext()
    ctx.cancel()
    outcome, _ = run({"steps": 50}, ctx=ctx)
    assert outcome.status == "cancelled" and not ctx.registrations


@pytest.mark.parametrize("ffn", ["ec", "race"])
def test_it_trains_the_routers_promoe_is_compared_with(ffn):
    outcome, ctx = run({"ffn": ffn, "attention": "full", "steps": 2, "sample_every": 0})
    assert outcome.status == "succeeded", outcome.traceback
    assert "expert_usage" in ctx.charts
    assert VideoDiT.from_pretrained(ctx.registrations[0].path).config.ffn == ffn


def test_the_promoe_activation_ablation_reaches_the_trained_model():
    outcome, ctx = run({"ffn": "promoe", "promoe_activation": "sigmoid", "steps": 2, "sample_every": 0})
    assert outcome.status == "succeeded", outcome.traceback
    assert VideoDiT.from_pretrained(ctx.registrations[0].path).config.promoe_activation == "sigmoid"


def test_the_spec_offers_every_ffn_and_activation_the_model_accepts():
    from mlcore.jobs import video_train
    from mlcore.video import dit

    assert set(video_train.FFN) == set(dit.FFN_KINDS)
    assert video_train.PROMOE_ACTIVATIONS == dit.PROMOE_ACTIVATIONS
