import json

import pytest

from mlcore.jobs import InMemoryContext, ValidationError, data_mixture
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import execute, prepare

FAST = {"steps": 40, "interval": 10, "confirm_steps": 30, "width": 32, "seed": 0}


def run(raw, files=None):
    kind = get_kind("data-mixture")
    ctx = InMemoryContext()
    params, inputs = prepare(kind, {**FAST, **raw}, files or {}, resolver=LocalResolver(), workdir=ctx.workdir)
    return execute(kind, params, inputs, ctx), ctx


def test_it_finds_a_mixture_that_drops_random_bytes_and_confirms_it():
    outcome, ctx = run({"sources": "stdlib-docs,stdlib-source", "lr_z": 0.5})
    assert outcome.status == "succeeded", outcome.traceback
    scalars = ctx.metrics.scalars
    assert scalars["final_w/random-bytes"] < 1 / 3
    assert {"confirm_bpb_found", "confirm_bpb_uniform", "confirm_bpb_gain"} <= set(scalars)
    assert len(ctx.metrics.series["w/random-bytes"]) == 4
    for chart in ("weights", "search_val", "mixture", "confirmation"):
        assert ctx.charts[chart]["title"] and ctx.charts[chart]["encoding"]["y"]["title"]
    report = json.loads(ctx.artifacts["mixture.json"].path.read_text())
    assert set(report["mixture"]) == {"stdlib-docs", "stdlib-source", "random-bytes"}


def test_an_uploaded_source_joins_the_mixture(tmp_path):
    upload = tmp_path / "poems.txt"
    upload.write_text("Shall I compare thee to a summer's day?\n" * 300)
    outcome, ctx = run(
        {"sources": "stdlib-docs", "noise_source": False, "confirm_steps": 0}, {"source_files": [upload]}
    )
    assert outcome.status == "succeeded", outcome.traceback
    assert set(json.loads(ctx.artifacts["mixture.json"].path.read_text())["mixture"]) == {"stdlib-docs", "poems"}


def test_a_single_source_is_refused():
    outcome, _ = run({"sources": "stdlib-docs", "noise_source": False})
    assert outcome.status == "failed" and "at least two sources" in outcome.error


def test_an_interval_longer_than_the_search_is_refused():
    with pytest.raises(ValidationError):
        run({"steps": 5, "interval": 10})


def test_the_stdlib_problem_reports_how_far_the_found_mixture_is_from_the_known_target():
    outcome, ctx = run(
        {"problem": "stdlib-subcorpora", "context": 16, "steps": 20, "interval": 5, "confirm_steps": 10, "lr_z": 0.3}
    )
    assert outcome.status == "succeeded", outcome.traceback
    scalars, series = ctx.metrics.scalars, ctx.metrics.series
    assert 0 <= scalars["distance_to_target"] <= 1 and len(series["distance_to_target"]) == 4
    assert series["distance_to_target"][-1][1] == pytest.approx(scalars["distance_to_target"])
    assert {"confirm_bpb_found", "confirm_bpb_uniform", "confirm_bpb_target"} <= set(scalars)
    report = json.loads(ctx.artifacts["mixture.json"].path.read_text())
    assert list(report["mixture"]) == ["code", "docstrings", "comments", "tests", "licence"]
    assert "from the target mix" in data_mixture.spec.summary_line(scalars)


def test_a_target_mix_that_does_not_name_every_sub_corpus_is_refused():
    with pytest.raises(ValidationError):
        run({"problem": "stdlib-subcorpora", "target_mix": "0.5,0.5"})


def test_the_job_spells_the_sub_corpora_and_target_as_the_library_does():
    from mlcore.datamix.stdlib_subcorpora import SUBCORPORA, TARGET_MIX

    assert data_mixture.SUBCORPORA == SUBCORPORA
    assert tuple(TARGET_MIX[name] for name in SUBCORPORA) == data_mixture.TARGET_MIX
