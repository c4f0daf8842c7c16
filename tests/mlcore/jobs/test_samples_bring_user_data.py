"""Each kind's "Try with a sample" takes the path a user's own data takes: the sample names a built-in
item saved in the formats users bring, and its run reads that item as it would read theirs."""

import json
import re

from mlcore.jobs import InMemoryContext
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import execute, prepare


def run(name, raw):
    kind = get_kind(name)
    ctx = InMemoryContext()
    params, inputs = prepare(kind, raw, {}, resolver=LocalResolver(), workdir=ctx.workdir)
    return execute(kind, params, inputs, ctx), ctx


def read_from_both_files(lines):
    """The log line that counts the documents each file of zoo:sample-notes gave, both above zero."""
    line = next(line for line in lines if "help-topics.jsonl" in line)
    counts = re.search(r"(\d+) from help-topics\.jsonl and (\d+) from module-docs\.csv", line)
    return counts is not None and int(counts[1]) > 0 and int(counts[2]) > 0


def test_the_routing_analysis_sample_records_on_the_jsonl_and_csv_of_sample_notes():
    sample = get_kind("routing-analysis").spec.sample
    assert sample["dataset"] == "zoo:sample-notes"
    outcome, ctx = run("routing-analysis", {**sample, "resamples": 20})
    assert outcome.status == "succeeded", outcome.traceback
    assert read_from_both_files(ctx.lines)
    assert not any("fewer than asked" in line for line in ctx.lines)  # the test split fills every window
    report = json.loads(ctx.artifacts["report.json"].path.read_text())
    assert report["tokens"] == sample["samples"] * 128
    assert ctx.registrations[0].card["name"].endswith("on sample-notes (test split)")


def test_the_distill_sample_teaches_from_an_olmoe_checkpoint_on_sample_notes():
    sample = get_kind("distill").spec.sample
    assert sample["model"] == "zoo:moe-lm-olmoe" and sample["dataset"] == "zoo:sample-notes"
    outcome, ctx = run("distill", {**sample, "steps": 3, "eval_every": 0})
    assert outcome.status == "succeeded", outcome.traceback
    assert any(line.startswith("teacher OlmoeForCausalLM") for line in ctx.lines)
    assert read_from_both_files(ctx.lines)


def test_the_watermark_train_sample_trains_only_on_the_sample_photos():
    sample = get_kind("watermark-train").spec.sample
    assert sample["image_source"] == "mine" and sample["image_set"] == "zoo:sample-photos"
    outcome, ctx = run("watermark-train", {**sample, "steps": 2})
    assert outcome.status == "succeeded", outcome.traceback
    assert "Read 8 of your images for training (mine: only yours)." in ctx.lines
    assert any("of your 7 images and" in line and "of 1 held-out image." in line for line in ctx.lines)
    scalars = ctx.metrics.scalars
    assert scalars["builtin_train_crops"] == 0 and scalars["user_train_crops"] > 0
    names = {image["name"] for image in ctx.registrations[0].card["training_images"]["images"]}
    assert {"IMG_0042.jpg", "astronaut.png", "coffee.webp"} <= names


def test_the_video_train_kind_says_it_trains_on_your_clips_or_the_digits():
    spec = get_kind("video-train").spec
    assert spec.sample["clip_set"] == "zoo:moving-shapes"
    assert "your own clips" in spec.summary and "bouncing digits" in spec.summary
    assert "your clips" in spec.title and "zoo:moving-shapes" in spec.guide
