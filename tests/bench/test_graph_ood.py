import json

import pytest

from bench import BENCHMARKS, graph_ood
from bench.cache import Store


def record(method, seed, ood_test, nonzero=None, *, ood_val=None, id_val=None, point=None, predicted=None):
    split = {"accuracy": ood_test, "ceiling": 0.9, "mask_auc": 0.7, "gate_nonzero": nonzero, "usage": None}
    if nonzero is not None:
        split["usage"] = [[0.5, 0.5, 0.0, 0.0, 0.0, 0.0]] * 4
    splits = {name: dict(split) for name in ("train", "id_val", "ood_val", "ood_test")}
    splits["ood_val"]["accuracy"] = ood_val if ood_val is not None else ood_test
    splits["id_val"]["accuracy"] = id_val if id_val is not None else ood_test
    splits["ood_test"]["predicted"] = predicted
    return {
        "setting": "heterogeneous",
        "method": method,
        "seed": seed,
        "seconds": 1.0,
        "motifs": ["house", "cycle", "crane", "grid", "k4", "bowtie"],
        "splits": splits,
        **({"point": graph_ood.asdict(point)} if point is not None else {}),
    }


def put(tier, run, point=None):
    graph_ood.CACHE.put(graph_ood._cache_key(tier, run["setting"], run["method"], run["seed"], point), run)


def test_the_graph_benchmark_is_registered():
    assert BENCHMARKS["graph"] == "bench.graph_ood"


def test_the_section_reports_cached_runs_with_a_verdict_and_lists_missing_ones(tmp_path, monkeypatch):
    monkeypatch.setattr(graph_ood, "CACHE", Store(tmp_path / "routing.jsonl"))
    runs = [record("erm", 0, 0.40), record("gsat", 0, 0.60), record("disco", 0, 0.50, nonzero=1.5)]
    for run in runs:
        graph_ood.CACHE.put(graph_ood._cache_key("quick", "heterogeneous", run["method"], 0), run)
    markdown, data = graph_ood.section("quick", run_missing=False)
    assert "| disco | 1 | 0.500 |" in markdown
    assert "OOD test / ID val, 0.500 / 0.500 (erm 0.400 / 0.400, gsat 0.600 / 0.600; the verdict" in markdown
    assert "its gate keeps 1.50 of the experts per graph." in markdown
    # One seed of the quick tier: no interval, and not the card's scale.
    verdict_row = next(line for line in markdown.splitlines() if line.startswith("| heterogeneous: the full method"))
    assert "disco vs gsat" in verdict_row and "**inconclusive at this scale**" in verdict_row
    assert "spread of gate weight across motifs: 0.50 (experts specialise" in markdown
    assert "| 0 | 0.50 | 0.50 | 0.00 |" in markdown  # the usage matrix
    assert data["table"]["heterogeneous"]["gsat"]["ood_test"] == [0.6]
    # Without ERM's grid there is no tuned ERM, and its four points are named as not run.
    assert "erm-tuned" not in data["table"]["heterogeneous"]
    assert [m[3] is not None for m in data["missing"]] == [True] * 4


def test_a_missing_run_is_named_rather_than_silently_dropped(tmp_path, monkeypatch):
    monkeypatch.setattr(graph_ood, "CACHE", Store(tmp_path / "routing.jsonl"))
    markdown, data = graph_ood.section("quick", run_missing=False)
    # Three methods and ERM's four grid points, each named.
    assert len(data["missing"]) == 7 and "heterogeneous/disco/seed 0" in markdown
    assert "heterogeneous/erm (lr 0.001, 16 epochs, width 64, dropout 0.5)/seed 0" in markdown


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


def test_erm_gets_as_many_configurations_as_the_mixture_and_each_point_its_own_cache_row():
    for tier in graph_ood.TIERS.values():
        grid = graph_ood.erm_grid(tier)
        assert len(set(grid)) == len(graph_ood.MIXTURES) == 4
        # The setting every method shares is one of the points.
        assert graph_ood.ErmPoint(tier.lr, tier.epochs, tier.hidden, 0.0) in grid
    grid = graph_ood.erm_grid(graph_ood.TIERS["card"])
    keys = {graph_ood._cache_key("card", "basis", "erm", 0, p) for p in grid}
    assert len(keys) == 4 and graph_ood._cache_key("card", "basis", "erm", 0) not in keys


def test_the_grid_point_is_chosen_on_ood_validation_among_points_run_at_every_seed():
    def row(ood_val, seeds=2):
        return {"seeds": seeds, "ood_val": [ood_val] * seeds, "id_val": [1 - ood_val] * seeds}

    assert graph_ood.select_point([row(0.5), row(0.7), row(0.6)]) == 1
    assert graph_ood.select_point([row(0.5), row(0.7), row(0.6)], "id_val") == 0
    # A point with fewer finished seeds is not compared; a tie goes to the earlier point; nothing run: None.
    assert graph_ood.select_point([row(0.5), row(0.9, seeds=1), None, row(0.5)]) == 0
    assert graph_ood.select_point([None, None]) is None


def test_the_tuned_erm_is_the_ood_validation_choice_even_where_another_point_tests_better(tmp_path, monkeypatch):
    monkeypatch.setattr(graph_ood, "CACHE", Store(tmp_path / "routing.jsonl"))
    grid = graph_ood.erm_grid(graph_ood.TIERS["quick"])
    for point, (val, test) in zip(grid, ((0.5, 0.30), (0.8, 0.45), (0.6, 0.70), (0.4, 0.40)), strict=True):
        put("quick", record("erm", 0, test, ood_val=val, id_val=0.85, point=point, predicted=[1, 8, 1]), point)
    for run in (record("erm", 0, 0.35), record("gsat", 0, 0.40), record("disco", 0, 0.60, nonzero=1.0)):
        put("quick", run)
    markdown, data = graph_ood.section("quick", run_missing=False)
    tuned = data["table"]["heterogeneous"]["erm-tuned"]
    assert tuned["ood_test"] == [0.45] and tuned["point"] == graph_ood.asdict(grid[1])
    assert [p["chosen"] for p in data["erm_grid"]["heterogeneous"]] == [False, True, False, False]
    assert "| lr 0.001, 16 epochs, width 32, dropout 0.5 | 1 | 0.450 | 0.850 | 0.800 |" in markdown
    # Every point gives 80% of the OOD-test graphs 'cycle'; the ID-validation choice (a tie: the first) is marked too.
    assert "| 0.80 (cycle) | 1 | **OOD val** |" in markdown and "| 0.80 (cycle) | 1 | ID val |" in markdown
    # The verdict compares the full method with the best baseline, now the tuned ERM.
    assert data["verdicts"][0]["baseline"] == "erm-tuned"
    assert data["verdicts"][0]["mean_diff"] == pytest.approx(0.6 - 0.45)
    assert "erm-tuned 0.450 / 0.850" in markdown


def tuned_row(setting, *, ood, id_val, predicted):
    return {
        "point": graph_ood.asdict(graph_ood.erm_grid(graph_ood.TIERS["card"])[1]),
        "ood_test": [ood],
        "id_val": [id_val],
        "ceiling": [0.9],
        "id_ceiling": [0.9],
        "predicted": predicted,
    }


def test_the_erm_diagnosis_tells_under_training_from_a_collapse_under_the_shift():
    classes = ["house", "cycle", "crane"]
    collapsed = tuned_row("basis", ood=0.34, id_val=0.87, predicted=[[0, 90, 10], [0, 80, 20]])
    text = graph_ood.erm_diagnosis("basis", collapsed, classes, [{**collapsed, "seeds": 2}])
    assert "of it) while OOD collapses: every point of the grid gives at least 85% of the OOD-test" in text
    assert "not under-training" in text
    # Short of the ceiling ID, yet a point that learnt more collapses as much: the shift holds ERM down.
    short = tuned_row("basis", ood=0.34, id_val=0.72, predicted=[[0, 95, 5]])
    better = tuned_row("basis", ood=0.34, id_val=0.79, predicted=[[0, 90, 10]])
    text = graph_ood.erm_diagnosis("basis", short, classes, [{**short, "seeds": 1}, {**better, "seeds": 1}])
    assert "(under-fitted at this scale), but OOD collapses" in text and "up to 0.790" in text
    # No collapse and ID short of the ceiling: under-training.
    under = tuned_row("size", ood=0.30, id_val=0.70, predicted=[[30, 40, 30]])
    text = graph_ood.erm_diagnosis("size", under, classes, [{**under, "seeds": 1}])
    assert "ERM under-fits the training distribution at this scale, which accounts" in text
    # GOOD's ERM 0.638 × the 0.9 ceiling ≈ 0.57: 0.55 is within the claimed effect.
    reached = graph_ood.erm_diagnosis("basis", tuned_row("basis", ood=0.55, id_val=0.88, predicted=[]), classes)
    assert reached.endswith("It reaches the leaderboard's ERM within the claimed effect.")
    spread = graph_ood.erm_diagnosis(
        "heterogeneous", tuned_row("heterogeneous", ood=0.40, id_val=0.88, predicted=[[30, 40, 30]]), classes
    )
    assert "the shift, not under-training" in spread and "the card's own, with no public number" in spread


def test_claims_pair_the_method_and_baseline_on_the_seeds_both_finished():
    rows = {
        "disco": {"seed_ids": [0, 1, 2], "ood_test": [0.6, 0.7, 0.8], "ceiling": [0.9] * 3, "seconds": [1.0] * 3},
        "erm": {"seed_ids": [0, 2], "ood_test": [0.4, 0.5], "ceiling": [0.9] * 2, "seconds": [1.0] * 2},
    }
    (found,) = graph_ood.claims({"heterogeneous": rows}, "card")
    assert found.pairs.diffs == pytest.approx((0.2, 0.3))
