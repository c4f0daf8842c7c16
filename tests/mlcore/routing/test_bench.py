from mlcore.bench import BENCHMARKS, routing


def _row(accuracy: float, zero: float = 0.0) -> dict:
    return {
        "accuracy": [accuracy] * 3,
        "zero_expert_rate": [zero] * 3,
        "at_most_two_rate": [1.0] * 3,
        "mean_active_experts": [1.5] * 3,
    }


def test_the_routing_benchmark_is_registered_and_its_quick_tier_covers_the_issue_baselines():
    assert BENCHMARKS["routing"] == "mlcore.bench.routing"
    assert set(routing.TIERS["quick"]["routings"]) == {"lora", "top1", "top2", "relu", "ld-mole"}
    assert len(routing.SEEDS) == 3


def test_the_ld_mole_verdict_says_when_the_claim_does_not_reproduce():
    losing = {"top1": _row(0.9), "top2": _row(0.92), "ld-mole": _row(0.88), "relu": _row(0.9, zero=0.3)}
    assert "does **not** reproduce" in routing._lora_verdict(losing)
    assert "30.0% of pairs with no expert" in routing._lora_verdict(losing)
    assert "claim (LD-MoLE ≥ top-k at matched parameters) reproduces" in routing._lora_verdict(
        losing | {"ld-mole": _row(0.95)}
    )


def test_a_finished_configuration_is_read_back_from_the_cache_instead_of_recomputed(tmp_path, monkeypatch):
    monkeypatch.setattr(routing, "CACHE", tmp_path)
    calls = []
    first = routing._cached("x", lambda: calls.append(1) or {"value": 1})
    again = routing._cached("x", lambda: calls.append(1) or {"value": 2})
    assert first["value"] == again["value"] == 1 and len(calls) == 1
    assert "cpu_seconds" in again


def test_the_graph_part_of_routing_md_is_read_from_the_graph_benchmarks_current_results(tmp_path):
    import json

    markdown, _ = routing.graph_summary(tmp_path)
    assert "run `python -m mlcore.bench graph --tier full`" in markdown
    runs = {"seeds": 2, "ood_test": [0.5, 0.7], "ceiling": [0.9, 0.9], "gate_nonzero": [2.0, 1.0], "usage": []}
    graph = {
        "tier": "full",
        "written_at": "2026-11-30T06:00:35+00:00",
        "tier_config": {"methods": ["erm", "disco"], "graphs": 800, "epochs": 20, "seeds": 3},
        "table": {"heterogeneous": {"erm": {**runs, "ood_test": [0.4, 0.4]}, "disco": runs}},
        "missing": [["heterogeneous", "disco", 2]],
    }
    (tmp_path / "graph.json").write_text(json.dumps(graph))
    markdown, data = routing.graph_summary(tmp_path)
    assert "| heterogeneous | 0.400 (2) | 0.600 (2) | 0.900 | 1.50 |" in markdown
    assert "full method's mean OOD-test accuracy 0.600 beats erm" in markdown
    assert "1 (setting, method, seed) runs are still missing" in markdown
    assert data == {"tier": "full", "written_at": "2026-11-30T06:00:35+00:00"}


def _study(roma: list[float], ce: list[float]) -> dict:
    split = {
        "base": {"accuracy": [0.70] * 3},
        "ce_only": {"accuracy": ce},
        "roma": {"accuracy": roma},
        "oracle": {"accuracy": [0.80] * 3},
    }
    return {"iid": split, "shifted": split}


def test_the_roma_verdict_needs_roma_ahead_of_ce_only_in_every_seed():
    ahead = routing._roma_verdict({"hidden-mean": _study([0.74, 0.75, 0.73], [0.72, 0.72, 0.71])})
    assert "RoMA ahead of CE-only in every seed on i.i.d. data) reproduces" in ahead
    assert "paired RoMA − CE-only per seed: iid +0.023 ± 0.006" in ahead
    # A higher mean carried by one seed is not a reproduction.
    noisy = routing._roma_verdict({"hidden-mean": _study([0.80, 0.70, 0.70], [0.72, 0.71, 0.71])})
    assert "does **not** reproduce" in noisy
