import json
import pickle

import pytest

from mlcore.data.graphs import generate_motif_graphs, to_json, write_graphs
from mlcore.jobs import InMemoryContext, JobError, ValidationError
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import execute, prepare

FAST = {"graphs": 90, "epochs": 2, "hidden": 16, "batch_size": 32, "seed": 0}


def run(raw, files=None, cache=None):
    kind = get_kind("graph-ood")
    ctx = InMemoryContext()
    params, inputs = prepare(
        kind, {**FAST, **raw}, files or {}, resolver=LocalResolver(cache=cache), workdir=ctx.workdir
    )
    return execute(kind, params, inputs, ctx), ctx


def test_it_trains_the_mixture_and_erm_on_generated_graphs_and_reports_every_split():
    outcome, ctx = run({"methods": "erm,disco", "variant": "heterogeneous"})
    assert outcome.status == "succeeded", outcome.traceback
    scalars = ctx.metrics.scalars
    for split in ("train", "id_val", "ood_val", "ood_test"):
        assert 0 <= scalars[f"disco/{split}_accuracy"] <= 1 and f"erm/{split}_accuracy" in scalars
    assert 0 <= scalars["disco/ood_test_mask_auc"] <= 1 and "erm/ood_test_mask_auc" not in scalars
    assert 1 <= scalars["disco/gate_nonzero"] <= 4
    assert 0.5 < scalars["ood_test_ceiling"] <= 1
    assert len(ctx.metrics.series["disco/loss"]) == 2
    assert set(ctx.charts) == {"accuracy", "mask_auc", "usage", "training"}
    usage = ctx.charts["usage"]["data"]["values"]
    assert {row["motif"] for row in usage} == {"house", "cycle", "crane", "grid", "k4", "bowtie"}
    assert len(usage) == 4 * 6
    report = json.loads(ctx.artifacts["graph_ood.json"].path.read_text())
    assert set(report["results"]) == {"erm", "disco"}
    assert ctx.artifacts["accuracy.csv"].media_type == "text/csv"
    assert any(line.startswith("summary: OOD test accuracy") for line in ctx.lines)


def test_an_uploaded_graph_file_runs_and_usage_falls_back_to_labels(tmp_path):
    doc = to_json(generate_motif_graphs(shift="size", n_graphs=90, seed=2))
    for graph in doc["graphs"]:
        del graph["motif"]
    del doc["motifs"]
    upload = tmp_path / "mine.json"
    upload.write_text(json.dumps(doc))
    outcome, ctx = run({"methods": "gsat,moe-softmax"}, {"graphs_file": [upload]})
    assert outcome.status == "succeeded", outcome.traceback
    assert "gsat/ood_test_mask_auc" in ctx.metrics.scalars
    assert {row["motif"] for row in ctx.charts["usage"]["data"]["values"]} == {
        "class house",
        "class cycle",
        "class crane",
    }


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("builtin")


def test_a_built_in_graph_dataset_can_be_picked(cache):
    outcome, ctx = run(
        {"dataset": "zoo:motif-basis", "methods": "erm", "epochs": 1, "hidden": 8, "batch_size": 512}, cache=cache
    )
    assert outcome.status == "succeeded", outcome.traceback
    assert "2500 graphs" in ctx.lines[0]


def test_a_pickle_upload_is_refused_before_anything_runs(tmp_path):
    upload = tmp_path / "graphs.pkl"
    upload.write_bytes(pickle.dumps({"graphs": []}))
    with pytest.raises(JobError, match="expected json"):
        run({}, {"graphs_file": [upload]})


def test_a_malformed_graph_file_fails_naming_the_graph_and_the_field(tmp_path):
    doc = to_json(generate_motif_graphs(n_graphs=60, seed=0))
    doc["graphs"][3]["edges"][0] = [0, 0]
    upload = tmp_path / "bad.json"
    upload.write_text(json.dumps(doc))
    outcome, ctx = run({"methods": "erm"}, {"graphs_file": [upload]})
    assert outcome.status == "failed"
    assert "Graphs file: graph 3: edge 0 is a self-loop" in outcome.error
    assert not ctx.artifacts


def test_a_dataset_and_an_upload_together_are_refused(tmp_path, cache):
    upload = write_graphs(generate_motif_graphs(n_graphs=60), tmp_path / "g.json")
    outcome, _ = run({"dataset": "zoo:motif-basis", "methods": "erm"}, {"graphs_file": [upload]}, cache=cache)
    assert outcome.status == "failed" and "not both" in outcome.error


def test_bad_parameters_are_refused_by_name():
    with pytest.raises(ValidationError) as error:
        run({"methods": "mixup", "gate_alpha": 2.5})
    fields = {name for name, _ in error.value.errors}
    assert fields == {"methods", "gate_alpha"}


def test_the_sample_and_the_defaults_validate_and_the_guide_explains_the_charts():
    spec = get_kind("graph-ood").spec
    params = spec.clean(dict(spec.sample))
    assert params["graphs"] <= 400 and params["epochs"] <= 10
    assert spec.estimate(params).seconds < 300
    for words in ("Expert × motif usage", "ceiling", "AUC", "moelab-graphs"):
        assert words in spec.guide
