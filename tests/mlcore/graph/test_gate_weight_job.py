import json

from mlcore.jobs import InMemoryContext
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import execute, prepare


def test_the_graph_job_passes_the_gate_loss_weight_to_the_mixture():
    kind, ctx = get_kind("graph-ood"), InMemoryContext()
    raw = {"graphs": 90, "epochs": 2, "hidden": 16, "batch_size": 32, "seed": 0, "methods": "disco", "gate_weight": 0}
    params, inputs = prepare(kind, raw, {}, resolver=LocalResolver(), workdir=ctx.workdir)
    outcome = execute(kind, params, inputs, ctx)
    assert outcome.status == "succeeded", outcome.traceback
    report = json.loads(ctx.artifacts["graph_ood.json"].path.read_text())
    assert report["config"]["gate_weight"] == 0.0
    assert 1 <= ctx.metrics.scalars["disco/gate_nonzero"] <= 4
