"""No input is ignored silently: an upload replaces what it stands for (which is then neither built
nor recorded), a contradictory combination is refused with a sentence, an empty list stays empty,
and what ``moelab run`` writes points at files that still exist."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from mlcore.errors import JobError
from mlcore.jobs import InMemoryContext, ValidationError, cli
from mlcore.jobs.context import DirectoryContext
from mlcore.jobs.params import Dataset, Key, Model
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import execute, prepare
from tests.mlcore.analysis.trace_files import write_trace

PROSE = "The Zen of Python, by Tim Peters. Beautiful is better than ugly, explicit better than implicit.\n" * 60


class RecordingResolver(LocalResolver):
    """The CLI's resolver, remembering which references it was asked to fetch or build."""

    def __init__(self) -> None:
        super().__init__()
        self.resolved: list[str] = []

    def resolve(self, param: Model | Dataset | Key, reference: str) -> Path:
        self.resolved.append(param.name)
        return super().resolve(param, reference)


def prepared(kind: str, raw: dict[str, Any], files: dict[str, list[Path]], tmp_path: Path) -> tuple[dict, dict, list]:
    resolver = RecordingResolver()
    params, inputs = prepare(get_kind(kind), raw, files, resolver=resolver, workdir=tmp_path / "work")
    return params, inputs, resolver.resolved


def text_file(tmp_path: Path, name: str = "mine.txt", text: str = PROSE) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def zoo_checkpoint_archive(tmp_path: Path, name: str) -> Path:
    """The zoo's tiny MoE LM as a user would upload it: its checkpoint folder in a tar.gz."""
    from mlcore.catalog import materialize
    from mlcore.zoo.registry import MODELS

    folder = materialize(next(item for item in MODELS if item.name == "moe-lm-tiny"))
    archive = tmp_path / f"{name}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(folder.iterdir()):
            if path.is_file() and not path.name.startswith("."):
                tar.add(path, arcname=f"{name}/{path.name}")
    return archive


# -- an upload replaces a reference: not fetched, not built, not recorded ---------------------------


@pytest.mark.parametrize(
    ("kind", "reference", "upload", "raw"),
    [
        ("distill", "dataset", "text_file", {}),
        ("data-mixture", "target", "target_file", {}),
        ("routing-analysis", "dataset", "text_file", {"model": "zoo:moe-lm-tiny"}),
        ("compress-moe", "dataset", "calibration_file", {"model": "zoo:moe-lm-tiny"}),
    ],
)
def test_an_uploaded_text_replaces_the_built_in_text_which_is_never_built(
    tmp_path: Path, kind: str, reference: str, upload: str, raw: dict[str, Any]
) -> None:
    params, inputs, resolved = prepared(kind, raw, {upload: [text_file(tmp_path)]}, tmp_path)
    assert params[reference] is None and reference not in inputs and reference not in resolved
    assert inputs[upload] in (tmp_path / "mine.txt", [tmp_path / "mine.txt"])
    # Without the upload the same job reads (and builds) the built-in text.
    params, inputs, resolved = prepared(kind, raw, {}, tmp_path / "without")
    assert params[reference] and reference in inputs and reference in resolved


def test_an_uploaded_base_checkpoint_replaces_the_zoo_base(tmp_path: Path) -> None:
    archive = zoo_checkpoint_archive(tmp_path, "my-base")
    params, inputs, resolved = prepared("lora-moe-finetune", {}, {"checkpoint": [archive]}, tmp_path)
    assert params["model"] is None and "model" not in inputs and resolved == []


def test_a_routing_trace_needs_no_evaluation_text(tmp_path: Path) -> None:
    from mlcore.analysis.routing import synthetic

    routing = synthetic("sticky", tokens=400, num_experts=8, top_k=2, sequence_length=100, seed=0)
    trace = write_trace(tmp_path / "t.safetensors", [routing])
    params, _, resolved = prepared("routing-analysis", {}, {"trace": [trace]}, tmp_path)
    assert params["dataset"] is None and resolved == []


# -- contradictions are refused before anything runs -----------------------------------------------


@pytest.mark.parametrize(
    ("kind", "raw", "uploads", "field", "words"),
    [
        ("data-mixture", {"problem": "stdlib-subcorpora"}, ["source_files"], "source_files", "pick problem=texts"),
        ("data-mixture", {"problem": "stdlib-subcorpora"}, ["target_file"], "target_file", "pick problem=texts"),
        ("routing-analysis", {"model": "zoo:moe-lm-tiny"}, ["trace"], "model", "not both"),
        ("routing-analysis", {}, ["trace", "text_file"], "text_file", "text is read only to record a model"),
        ("router-align", {"model": "zoo:moe-lm-tiny"}, ["checkpoint"], "model", "not both"),
        ("router-align", {}, ["task_file"], "task_file", "needs a language model"),
        ("compress-moe", {"model": "zoo:moe-lm-tiny"}, ["checkpoint"], "model", "not both"),
        ("lora-moe-finetune", {"task": "parity"}, ["task_file"], "task", "replaces the built-in task"),
        ("lora-moe-finetune", {"levels": "2,8"}, ["task_file"], "levels", "replaces the built-in task"),
    ],
)
def test_an_input_the_job_would_ignore_is_refused_naming_the_field(
    kind: str, raw: dict[str, Any], uploads: list[str], field: str, words: str
) -> None:
    spec = get_kind(kind).spec
    with pytest.raises(ValidationError) as refused:
        spec.apply_uploads(spec.clean(raw), uploads)
    [(name, message)] = refused.value.errors
    assert name == field and words in message


def test_the_stdlib_problem_does_not_build_a_target_it_never_reads(tmp_path: Path) -> None:
    params, _, resolved = prepared("data-mixture", {"problem": "stdlib-subcorpora"}, {}, tmp_path)
    assert params["target"] is None and resolved == []


# -- empty means empty --------------------------------------------------------------------------------


def test_an_empty_multiple_choice_stays_empty_from_the_command_line_the_api_and_the_form() -> None:
    spec = get_kind("data-mixture").spec
    assert spec.clean({"sources": ""})["sources"] == []  # --set sources=
    assert spec.clean({"sources": []})["sources"] == []  # the API's [] and the form's unticked boxes
    assert spec.clean({})["sources"] == ["shakespeare", "stdlib-docs", "stdlib-source"]  # not given: the default
    with pytest.raises(ValidationError, match=r"methods: Choose at least 1\."):
        get_kind("compress-moe").spec.clean({"methods": ""})


def test_moelab_run_mixes_only_the_users_files_and_records_only_them(tmp_path: Path, monkeypatch) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("MOELAB_CACHE", str(cache))
    code = text_file(tmp_path, "code.txt", "def f(x):\n    return x * 2  # doubles, then returns\n" * 80)
    prose = text_file(tmp_path, "prose.jsonl", "".join(json.dumps({"text": PROSE[:400]}) + "\n" for _ in range(8)))
    target = text_file(tmp_path, "target.csv", "text,source\n" + '"def g(y):  return y, y",code\n' * 80)
    out = tmp_path / "out"
    args = ["run", "data-mixture", "--out", str(out), "--device", "cpu", "--set", "sources="]
    for setting in ("noise_source=false", "steps=6", "interval=3", "confirm_steps=0", "width=16", "seed=0"):
        args += ["--set", setting]
    args += ["--input", f"source_files={code}", "--input", f"source_files={prose}", "--input", f"target_file={target}"]
    assert cli.main(args) == 0, (out / "outcome.json").read_text()
    mixture = json.loads((out / "artifacts" / "mixture.json").read_text())["mixture"]
    assert set(mixture) == {"code", "prose"}
    job = json.loads((out / "job.json").read_text())
    assert job["params"]["sources"] == [] and job["params"]["target"] is None
    assert set(job["provenance"]["input_sha256"]) == {"source_files", "target_file"}
    assert not (cache / "text").exists()  # no built-in corpus was built for nothing


# -- a built-in corpus missing from a fresh cache ------------------------------------------------------


def test_a_missing_built_in_corpus_is_refused_with_what_to_run(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MOELAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MOELAB_CORPORA", str(tmp_path / "corpora"))
    with pytest.raises(JobError) as refused:
        prepared("distill", {"dataset": "zoo:shakespeare"}, {}, tmp_path)
    assert "make venv" in str(refused.value) and "scripts/fetch-corpora.sh" in str(refused.value)
    assert str(tmp_path) not in str(refused.value)
    # The same sentence from a kind that builds its sources while it runs.
    kind, ctx = get_kind("data-mixture"), InMemoryContext()
    params, inputs = prepare(
        kind,
        {"sources": "shakespeare,stdlib-docs", "steps": 2, "interval": 1},
        {},
        resolver=LocalResolver(),
        workdir=ctx.workdir,
    )
    outcome = execute(kind, params, inputs, ctx)
    assert outcome.status == "failed" and "make venv" in outcome.error and not outcome.reference


# -- what moelab run leaves behind -------------------------------------------------------------------


def test_registered_outputs_point_at_copies_that_outlive_the_work_folder(tmp_path: Path) -> None:
    ctx = DirectoryContext(tmp_path / "out")
    model = ctx.workdir / "student"
    model.mkdir()
    (model / "config.json").write_text("{}")
    ctx.artifact("student", model)
    ctx.register("hf-lm", model, {"name": "a student"})
    trace = ctx.workdir / "trace.safetensors"
    trace.write_bytes(b"trace")
    ctx.register("routing-trace", trace)
    ctx.close()
    assert not model.exists()  # the work folder is gone
    entries = json.loads((tmp_path / "out" / "registered.json").read_text())
    paths = [Path(entry["path"]) for entry in entries]
    assert paths[0] == (tmp_path / "out" / "artifacts" / "student").resolve()
    assert (paths[0] / "config.json").read_text() == "{}"
    assert paths[1].read_bytes() == b"trace" and paths[1].is_relative_to((tmp_path / "out").resolve())


# -- the user's own data, end to end -------------------------------------------------------------------


def test_distill_takes_an_uploaded_teacher_archive_and_text(tmp_path: Path) -> None:
    kind, ctx = get_kind("distill"), InMemoryContext()
    files = {"checkpoint": [zoo_checkpoint_archive(tmp_path, "my-teacher")], "text_file": [text_file(tmp_path)]}
    raw = {"steps": 2, "train_windows": 4, "eval_windows": 2, "eval_every": 0, "seq_len": 16, "seed": 0}
    params, inputs = prepare(kind, raw, files, resolver=RecordingResolver(), workdir=ctx.workdir)
    assert params["model"] is None and params["dataset"] is None
    outcome = execute(kind, params, inputs, ctx)
    assert outcome.status == "succeeded", outcome.traceback
    assert any("from mine.txt" in line for line in ctx.lines)
    (registered,) = ctx.registrations
    assert registered.card["name"] == "student of my-teacher (amid)"


def test_an_archive_without_a_checkpoint_is_refused_as_a_teacher(tmp_path: Path) -> None:
    archive = tmp_path / "empty.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(text_file(tmp_path), arcname="notes/mine.txt")
    kind, ctx = get_kind("distill"), InMemoryContext()
    params, inputs = prepare(kind, {}, {"checkpoint": [archive]}, resolver=LocalResolver(), workdir=ctx.workdir)
    outcome = execute(kind, params, inputs, ctx)
    assert outcome.status == "failed" and outcome.error.startswith("Teacher checkpoint: the uploaded archive holds no")


def test_routing_analysis_records_a_model_on_an_uploaded_text(tmp_path: Path) -> None:
    from mlcore.moe.traces import RoutingTrace

    kind, ctx = get_kind("routing-analysis"), InMemoryContext()
    upload = text_file(tmp_path, "my-notes.jsonl", "".join(json.dumps({"text": PROSE}) + "\n" for _ in range(4)))
    raw = {"model": "zoo:moe-lm-tiny", "samples": 4, "seq_len": 32, "windows": "4,16", "resamples": 0, "seed": 0}
    params, inputs = prepare(kind, raw, {"text_file": [upload]}, resolver=LocalResolver(), workdir=ctx.workdir)
    outcome = execute(kind, params, inputs, ctx)
    assert outcome.status == "succeeded", outcome.traceback
    trace = RoutingTrace.load(ctx.artifacts["routing_trace.safetensors"].path)
    assert trace.metadata.source == "my-notes.jsonl (test split)"
