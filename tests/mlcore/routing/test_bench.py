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
