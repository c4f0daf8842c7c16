"""lora-moe-finetune with an uploaded base checkpoint and uploaded task data."""

import json
import tarfile

from mlcore.jobs import InMemoryContext
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import execute, prepare
from mlcore.zoo.lora_base import CHECKPOINT

FAST = {"steps": 6, "batch_size": 16, "experts": 4, "rank": 2, "seed": 0}


def _run(raw, files):
    kind, ctx = get_kind("lora-moe-finetune"), InMemoryContext()
    params, inputs = prepare(kind, {**FAST, **raw}, files, resolver=LocalResolver(), workdir=ctx.workdir)
    return execute(kind, params, inputs, ctx), ctx


def _task(path, rows=60):
    # Is the first digit high? Levels (groups) 2 and 4; the last 12 rows are the test split.
    lines = []
    for i in range(rows):
        digits = f"{(i * 7) % 10}{(i * 3) % 10}{i % 10}{(i * 9) % 10}"[: 2 if i % 2 else 4]
        label = "high" if int(digits[0]) >= 5 else "low"
        split = "test" if i >= rows - 12 else "train"
        lines.append(json.dumps({"text": digits, "label": label, "group": len(digits), "split": split}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_it_fine_tunes_an_uploaded_encoder_archive_on_uploaded_task_data(tmp_path):
    archive = tmp_path / "encoder.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name in ("config.json", "model.safetensors"):
            tar.add(CHECKPOINT / name, arcname=f"encoder/{name}")
    outcome, ctx = _run({"routing": "ld-mole"}, {"checkpoint": [archive], "task_file": [_task(tmp_path / "t.jsonl")]})
    assert outcome.status == "succeeded", outcome.traceback
    scalars = ctx.metrics.scalars
    assert {"accuracy_d2", "accuracy_d4"} <= set(scalars) and "accuracy_d6" not in scalars
    assert scalars["zero_expert_rate"] == 0.0
    report = json.loads(ctx.artifacts["report.json"].path.read_text())
    assert report["classes"] == ["high", "low"] and report["task"] == "upload"
    assert "uploaded task (48 training, 12 test rows" in ctx.lines[0]


def test_bad_task_data_fails_before_training_with_the_line_and_leaves_nothing(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("text,label\n1234,a\n12ab,b\n" + "".join(f"{i},{'ab'[i % 2]}\n" for i in range(20)))
    outcome, ctx = _run({"model": str(CHECKPOINT)}, {"task_file": [bad]})
    assert outcome.status == "failed"
    assert outcome.error.startswith("Task file: row 2: the tiny encoder reads up to 8 digits")
    assert not ctx.artifacts and not ctx.metrics.scalars and "loss" not in ctx.metrics.series


def test_an_archive_without_a_checkpoint_is_refused_by_name(tmp_path):
    archive = tmp_path / "empty.tar"
    (tmp_path / "readme.txt").write_text("no model here")
    with tarfile.open(archive, "w") as tar:
        tar.add(tmp_path / "readme.txt", arcname="readme.txt")
    outcome, ctx = _run({}, {"checkpoint": [archive]})
    assert outcome.status == "failed" and "Checkpoint: the uploaded archive holds no config.json" in outcome.error
    assert not ctx.artifacts
