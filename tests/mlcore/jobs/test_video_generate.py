import pytest
import torch

from mlcore.jobs import InMemoryContext, JobError, ValidationError
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import execute, prepare
from mlcore.video.dit import VideoDiT
from mlcore.video.media import probe_mp4
from mlcore.zoo.video import CHECKPOINTS

FAST = {"clips": 2, "frames": 4, "resolution": 8, "steps": 3, "seed": 0}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    torch.manual_seed(0)
    model = VideoDiT(dim=16, depth=2, heads=2, ffn_width=32, num_groups=3, window=(2, 1, 1))
    for parameter in model.parameters():
        torch.nn.init.normal_(parameter, std=0.05)
    folder = tmp_path_factory.mktemp("video-dit")
    model.save_pretrained(folder)
    return folder


def run(raw, ctx=None, memory_limit=None):
    kind = get_kind("video-generate")
    ctx = ctx or InMemoryContext()
    params, inputs = prepare(
        kind, {**FAST, **raw}, {}, resolver=LocalResolver(), workdir=ctx.workdir, memory_limit=memory_limit
    )
    return execute(kind, params, inputs, ctx), ctx


def test_it_writes_a_browser_playable_mp4_a_gif_a_frame_strip_and_a_group_chart(tiny_model):
    outcome, ctx = run({"model": str(tiny_model), "attention": "moga"})
    assert outcome.status == "succeeded", outcome.traceback
    media = {name: a.media_type for name, a in ctx.artifacts.items()}
    assert (
        media["clips.mp4"] == "video/mp4" and media["preview.gif"] == "image/gif" and media["frames.png"] == "image/png"
    )
    assert probe_mp4(ctx.artifacts["clips.mp4"].path) == {"h264": "True", "yuv420p": "True", "faststart": "True"}
    rows = ctx.charts["tokens_per_group"]["data"]["values"]
    assert len(rows) == 2 * 3  # layers × groups, empty groups included
    # Per layer: 3 steps × 2 clips × 2 (conditional and null branch) × 16 tokens.
    assert sum(r["tokens"] for r in rows if r["layer"] == "layer 0") == 3 * 2 * 2 * 16
    scalars = ctx.metrics.scalars
    assert 0 < scalars["flop_fraction"] <= 1 and scalars["tokens_per_clip"] == 16 and scalars["seconds_total"] > 0
    assert any("MoGA computes" in line for line in ctx.lines)


@pytest.mark.parametrize("attention", ["full", "local"])
def test_full_and_local_attention_sample_without_a_group_chart(tiny_model, attention):
    outcome, ctx = run({"model": str(tiny_model), "attention": attention})
    assert outcome.status == "succeeded", outcome.traceback
    assert "tokens_per_group" not in ctx.charts and "flop_fraction" not in ctx.metrics.scalars


def test_a_clip_too_big_for_the_worker_is_refused_before_it_starts(tiny_model):
    with pytest.raises(JobError, match="GiB"):
        run({"model": str(tiny_model), "frames": 256, "resolution": 256, "attention": "full"}, memory_limit=8 * 2**30)


def test_a_resolution_that_is_not_a_multiple_of_the_patch_is_refused():
    with pytest.raises(ValidationError) as caught:
        run({"resolution": 18})
    assert "resolution" in str(caught.value.errors)


class CancelAtStep(InMemoryContext):
    def __init__(self, step):
        super().__init__()
        self.step = step

    def _on_progress(self):
        super()._on_progress()
        if self.stage == f"sampling step {self.step} of 20":
            self.cancel()


def test_a_cancel_stops_sampling_within_one_step(tiny_model):
    ctx = CancelAtStep(3)
    outcome, _ = run({"model": str(tiny_model), "steps": 20}, ctx=ctx)
    assert outcome.status == "cancelled"
    stages = [stage for _, stage in ctx.progress_history if stage.startswith("sampling")]
    assert stages[-1] == "sampling step 3 of 20"
    assert "clips.mp4" not in ctx.artifacts


def test_a_folder_that_is_not_a_video_dit_fails_with_a_clear_message(tmp_path):
    outcome, ctx = run({"model": str(tmp_path)})
    assert outcome.status == "failed" and "config.json" in outcome.error
    assert not ctx.artifacts


@pytest.mark.skipif(
    not (CHECKPOINTS / "video-dit-digits" / "manifest.json").is_file(), reason="the zoo video model is not committed"
)
def test_the_zoo_model_samples_the_default_job_and_the_judge_grades_it():
    outcome, ctx = run({"frames": 8, "resolution": 16, "steps": 8, "clips": 2, "digit": 1, "direction": "left"})
    assert outcome.status == "succeeded", outcome.traceback
    assert 0 <= ctx.metrics.scalars["recognised"] <= 1
