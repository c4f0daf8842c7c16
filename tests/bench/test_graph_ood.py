import json

from bench import BENCHMARKS, graph_ood
from bench.cache import Store


def record(method, seed, ood_test, nonzero=None):
    split = {"accuracy": ood_test, "ceiling": 0.9, "mask_auc": 0.7, "gate_nonzero": nonzero, "usage": None}
    if nonzero is not None:
        split["usage"] = [[0.5, 0.5, 0.0, 0.0, 0.0, 0.0]] * 4
    return {
        "setting": "heterogeneous",
        "method": method,
        "seed": seed,
        "seconds": 1.0,
        "motifs": ["house", "cycle", "crane", "grid", "k4", "bowtie"],
        "splits": {name: dict(split) for name in ("train", "id_val", "ood_val", "ood_test")},
    }


def test_the_graph_benchmark_is_registered():
    assert BENCHMARKS["graph"] == "bench.graph_ood"


def test_the_section_reports_cached_runs_with_a_verdict_and_lists_missing_ones(tmp_path, monkeypatch):
    monkeypatch.setattr(graph_ood, "CACHE", Store(tmp_path / "routing.jsonl"))
    runs = [record("erm", 0, 0.40), record("gsat", 0, 0.60), record("disco", 0, 0.50, nonzero=1.5)]
    for run in runs:
        graph_ood.CACHE.put(graph_ood._cache_key("quick", "heterogeneous", run["method"], 0), run)
    markdown, data = graph_ood.section("quick", run_missing=False)
    assert "| disco | 1 | 0.500 |" in markdown
    assert "0.500 (erm 0.400, gsat 0.600; the verdict, from paired intervals, is in the verdict table)" in markdown
    assert "its gate keeps 1.50 of the experts per graph." in markdown
    # One seed of the quick tier: no interval, and not the card's scale.
    verdict_row = next(line for line in markdown.splitlines() if line.startswith("| heterogeneous: the full method"))
    assert "disco vs gsat" in verdict_row and "**inconclusive at this scale**" in verdict_row
    assert "spread of gate weight across motifs: 0.50 (experts specialise" in markdown
    assert "| 0 | 0.50 | 0.50 | 0.00 |" in markdown  # the usage matrix
    assert data["missing"] == [] and data["table"]["heterogeneous"]["gsat"]["ood_test"] == [0.6]


def test_a_missing_run_is_named_rather_than_silently_dropped(tmp_path, monkeypatch):
    monkeypatch.setattr(graph_ood, "CACHE", Store(tmp_path / "routing.jsonl"))
    markdown, data = graph_ood.section("quick", run_missing=False)
    assert len(data["missing"]) == 3 and "heterogeneous/disco/seed 0" in markdown


def test_changing_a_tier_changes_its_cache_names():
    before = graph_ood._cache_key("quick", "basis", "erm", 0)
    quick = graph_ood.TIERS["quick"]
    try:
        graph_ood.TIERS["quick"] = graph_ood.replace(quick, epochs=quick.epochs + 1)
        assert graph_ood._cache_key("quick", "basis", "erm", 0) != before
    finally:
        graph_ood.TIERS["quick"] = quick


def test_the_full_report_adds_the_card_scale_runs_finished_so_far_and_names_the_rest(tmp_path, monkeypatch):
    monkeypatch.setattr(graph_ood, "CACHE", Store(tmp_path / "routing.jsonl"))
    for method, accuracy in (("erm", 0.40), ("disco", 0.70)):
        key = graph_ood._cache_key("card", "heterogeneous", method, 0)
        graph_ood.CACHE.put(key, record(method, 0, accuracy, nonzero=1.5 if method == "disco" else None))
    (tmp_path / "results").mkdir()
    graph_ood.run("full", tmp_path / "results", run_missing=False)
    markdown = (tmp_path / "results" / "graph.md").read_text()
    card = markdown[markdown.index("## At the card's scale") :]
    assert "Tier **card**: 2500 generated" in card and "| disco | 1 | 0.700 |" in card
    assert "heterogeneous/gsat/seed 0" in card and "--tier card" in card
    assert json.loads((tmp_path / "results" / "graph.json").read_text())["card"]["table"]["heterogeneous"]
