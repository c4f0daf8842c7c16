import pytest

from bench import BENCHMARKS, routing
from bench.cache import Store


def _row(accuracy: float | list[float], zero: float = 0.0) -> dict:
    return {
        "accuracy": accuracy if isinstance(accuracy, list) else [accuracy] * 3,
        "cpu_seconds": 10.0,
        "zero_expert_rate": [zero] * 3,
        "at_most_two_rate": [1.0] * 3,
        "mean_active_experts": [1.5] * 3,
    }


def test_the_routing_benchmark_is_registered_and_its_quick_tier_covers_the_issue_baselines():
    assert BENCHMARKS["routing"] == "bench.routing"
    assert set(routing.TIERS["quick"]["routings"]) == {"lora", "top1", "top2", "relu", "ld-mole"}
    assert len(routing.SEEDS) == 3


def test_the_ld_mole_verdict_is_computed_from_paired_seeds_and_is_inconclusive_off_the_cards_task():
    losing = {
        "top1": _row(0.9),
        "top2": _row([0.92, 0.93, 0.91]),
        "ld-mole": _row([0.88, 0.885, 0.87]),
        "relu": _row(0.9, zero=0.3),
    }
    text = routing._lora_verdict(losing)
    assert "vs top2 0.920: paired difference -0.042" in text
    # The majority task is not the card's parity task: no "does not reproduce", whatever the interval says.
    assert "**inconclusive at this scale**" in text and "parity" in text and "not reproduce" not in text
    assert "30.0% of pairs with no expert" in text
    (verdict,) = routing.lora_claims(losing)
    assert verdict.baseline == "top2" and verdict.pairs.n == 3 and verdict.headroom == pytest.approx(0.08)


def test_the_roma_verdict_is_inconclusive_when_the_oracle_leaves_less_room_than_the_claimed_gain():
    split = {
        "base": {"accuracy": [0.75, 0.76, 0.74]},
        "ce_only": {"accuracy": [0.76, 0.77, 0.75]},
        "c3po_lite": {"accuracy": [0.74, 0.75, 0.73]},
        "roma": {"accuracy": [0.75, 0.76, 0.75]},
        "oracle": {"accuracy": [0.79, 0.80, 0.79]},
    }
    against_ce, against_base = routing.roma_claims({"tiny": {"iid": split}})
    assert against_ce.baseline == "ce_only" and against_ce.verdict == "inconclusive at this scale"
    assert any("headroom" in reason for reason in against_ce.reasons)
    # Against the base the headroom is the oracle gap itself (0.79 − 0.75), still below 5 points.
    assert against_base.baseline == "base" and against_base.headroom == pytest.approx(0.0433, abs=1e-3)
    assert against_base.verdict == "inconclusive at this scale"


def test_a_finished_configuration_is_read_back_from_the_cache_instead_of_recomputed(tmp_path, monkeypatch):
    monkeypatch.setattr(routing, "CACHE", Store(tmp_path / "routing.jsonl"))
    calls = []
    first = routing._cached("x", lambda: calls.append(1) or {"value": 1})
    again = routing._cached("x", lambda: calls.append(1) or {"value": 2})
    assert first["value"] == again["value"] == 1 and len(calls) == 1
    assert "cpu_seconds" in again


def test_the_graph_part_of_routing_md_is_read_from_the_graph_benchmarks_current_results(tmp_path):
    import json

    markdown, _ = routing.graph_summary(tmp_path)
    assert "run `python -m bench graph --tier full`" in markdown
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
    # A graph.json written before ID accuracy was recorded reads with a dash for it.
    assert "full method's mean accuracy, OOD test / ID val, 0.600 / — (erm 0.400 / —;" in markdown
    assert "1 (setting, method, seed) runs are still missing" in markdown
    assert data == {"tier": "full", "written_at": "2026-11-30T06:00:35+00:00"}
    # A complete card-scale tier is quoted instead; a partial one is not.
    card = {**graph, "tier": "card", "tier_config": {**graph["tier_config"], "graphs": 2500}, "missing": []}
    card["table"] = {"heterogeneous": {"erm": {**runs, "ood_test": [0.3, 0.3]}, "disco": runs}}
    (tmp_path / "graph.json").write_text(json.dumps({**graph, "card": {**card, "missing": [["basis", "erm", 0]]}}))
    assert routing.graph_summary(tmp_path)[1]["tier"] == "full"
    (tmp_path / "graph.json").write_text(json.dumps({**graph, "card": card}))
    markdown, data = routing.graph_summary(tmp_path)
    assert "(card tier, written 2026-11-30 06:00 UTC; 2500 graphs" in markdown
    assert "| heterogeneous | 0.300 (2) | 0.600 (2) |" in markdown and data["tier"] == "card"


def _study(roma: list[float], ce: list[float]) -> dict:
    split = {
        "base": {"accuracy": [0.70] * 3},
        "ce_only": {"accuracy": ce},
        "roma": {"accuracy": roma},
        "oracle": {"accuracy": [0.80] * 3},
    }
    return {"iid": split, "shifted": split}


def _row_of(text: str, start: str, baseline: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(start) and f"roma vs {baseline}" in line)


def test_the_roma_verdicts_pair_roma_with_ce_only_and_with_the_base_by_seed():
    text = routing._roma_verdict({"hidden-mean": _study([0.74, 0.75, 0.73], [0.72, 0.72, 0.71])})
    # The oracle leaves 0.08 above CE-only, more than the 0.05 claimed; three steady seeds resolve it.
    row = _row_of(text, "| `hidden-mean`, iid: RoMA beats router tuning without", "ce_only")
    assert "| 3 | +0.023" in row and "**reproduced**" in row
    row = _row_of(text, "| `hidden-mean`, iid: RoMA beats the base routers", "base")
    assert "| 3 | +0.040" in row and "| 0.100 |" in row  # headroom against the base = the oracle gap
    assert "follow the routers being tuned" in text
    noisy = routing._roma_verdict({"hidden-mean": _study([0.80, 0.70, 0.70], [0.72, 0.71, 0.71])})
    row = _row_of(noisy, "| `hidden-mean`, iid: RoMA beats router tuning without", "ce_only")
    assert "**inconclusive at this scale**" in row  # a higher mean carried by one seed: the MDE is too wide
    assert "anchors the routers" in routing._roma_verdict({"x": _study([0.7] * 3, [0.7] * 3)}, targets="fixed")


def _record(base: float, ce: float, roma: float, fixed: float, oracle: float) -> dict:
    accuracy = {"base": base, "ce_only": ce, "roma": roma, "roma_fixed": fixed, "c3po_lite": base, "oracle": oracle}
    split = {
        "accuracy": accuracy,
        "gap_closed": {m: (accuracy[m] - base) / (oracle - base) for m in ("ce_only", "roma", "roma_fixed")},
        "knn_overlap": {"base": 0.2, "ce_only": 0.2, "roma": 0.3, "roma_fixed": 0.25},
        "examples": 800,
    }
    return {"iid": split, "shifted": split, "regulariser_first_last": [0.7, 0.1]}


def test_the_roma_tables_report_the_oracle_gap_the_test_size_and_the_fixed_target_ablation():
    results = [_record(0.80, 0.86, 0.89, 0.88, 0.96), _record(0.78, 0.85, 0.90, 0.87, 0.95)]
    markdown, data = routing._roma_tables("intro", {"tfidf-svd-thesaurus, last 4 layers": results}, heading="`{key}`")
    assert "800 test items per seed; oracle gap (oracle − base) **0.165** (per seed 0.160–0.170)" in markdown
    assert "| roma (live targets) | 0.895 ± 0.007 |" in markdown
    assert "| roma, fixed targets (ablation) | 0.875 ± 0.007 |" in markdown
    assert "Fixed targets − live targets, paired by seed: -0.020 [" in markdown
    assert data["tfidf-svd-thesaurus, last 4 layers"]["iid"]["oracle_gap"] == pytest.approx([0.16, 0.17])
    # Earlier rows that ran with fixed targets say so in the RoMA row and the verdict text.
    old = {
        "iid": {
            **results[0]["iid"],
            "accuracy": {k: v for k, v in results[0]["iid"]["accuracy"].items() if k != "roma_fixed"},
        }
    }
    old |= {"shifted": old["iid"], "regulariser_first_last": [0.7, 0.1]}
    markdown, _ = routing._roma_tables("intro", {"tiny": [old, old]}, targets="fixed")
    assert "| roma (fixed targets) |" in markdown and "roma, fixed targets (ablation)" not in markdown
    assert "anchors the routers" in markdown


def test_the_ld_mole_cache_key_names_the_mixture_sizes_so_a_resized_contender_is_recomputed():
    from mlcore.lora_moe.mixture import MixtureConfig
    from mlcore.lora_moe.pipeline import FinetuneConfig

    config = FinetuneConfig(steps=120, batch_size=32, train_examples=2000, seed=1)
    keys = {
        routing._lora_key("lora", MixtureConfig(routing="ld-mole", experts=e, rank=4, lambda_hidden=h), config)
        for e, h in ((8, 32), (7, 32), (7, 41))
    }
    assert len(keys) == 3
    lora = routing._lora_key("lora", MixtureConfig(routing="lora", experts=1, rank=36), config)
    assert lora == "lora-lora-1x36-s120-b32-n2000-seed1"


def test_a_page_with_sections_at_another_tier_says_which_tier_each_section_ran(tmp_path, monkeypatch):
    import json

    for name in ("lora_section", "lora_lm_section", "roma_specialist_section", "roma_section", "roma_lm_section"):
        monkeypatch.setattr(routing, name, lambda tier, name=name: (f"## {name}\n\nbody", {"ran": tier}))
    routing.run("quick", tmp_path, section_tiers={"roma": "full", "roma_lm": "full", "ld_mole": ("quick", "full")})
    page = (tmp_path / "routing.md").read_text()
    assert "## roma_section (full tier)" in page and "## lora_section (quick tier)" in page
    assert "## lora_section (full tier)" in page and "## roma_section (quick tier)" not in page
    data = json.loads((tmp_path / "routing.json").read_text())
    assert data["roma"] == {"ran": "full"} and data["ld_mole"] == {"ran": "quick"}
    assert data["ld_mole_full"] == {"ran": "full"}
    with pytest.raises(ValueError, match="unknown sections"):
        routing.run("quick", tmp_path, section_tiers={"graph": "full"})


def test_the_ld_mole_verdict_reports_the_variant_without_its_sparsity_loss_when_it_ran():
    rows = {"top2": _row(0.9), "ld-mole": _row(0.88)}
    assert "Without its sparsity loss" not in routing._lora_verdict(rows)
    assert "Without its sparsity loss LD-MoLE reaches 0.950 with 1.50 experts" in routing._lora_verdict(
        rows | {"ld-mole-nosparsity": _row(0.95)}
    )


def test_a_cached_only_section_reads_the_finished_configurations_and_names_the_missing_ones(tmp_path, monkeypatch):

    from mlcore.lora_moe import pipeline
    from mlcore.lora_moe.base import EncoderConfig, TinyEncoder
    from mlcore.lora_moe.budget import matched_mixtures
    from mlcore.lora_moe.mixture import MixtureConfig

    monkeypatch.setattr(routing, "CACHE", Store(tmp_path / "routing.jsonl"))
    monkeypatch.setattr(pipeline, "finetune", lambda *a, **k: pytest.fail("a cached-only section must not train"))
    base = TinyEncoder(EncoderConfig())
    mixture = matched_mixtures(base, ["ld-mole"], MixtureConfig(experts=8, rank=4))["ld-mole"]
    config = pipeline.FinetuneConfig(**routing.TIERS["quick"]["lora"], seed=1)
    finished = {"metrics": {"accuracy": 0.5}, "cpu_seconds": 1.0}
    routing.CACHE.put(routing._lora_key("lora", mixture, config), finished)
    runs, missing = routing._lora_runs("quick", base, "lora", cached_only=True)
    assert list(runs) == ["ld-mole"] and runs["ld-mole"][0]["metrics"]["accuracy"] == 0.5
    assert len(missing) == len(routing.TIERS["quick"]["routings"]) * len(routing.SEEDS) - 1
    assert "ld-mole seed 0" in missing and "ld-mole seed 1" not in missing
    assert "**Partial:**" in routing._missing_note(missing) and routing._missing_note([]) == ""


def test_the_ld_mole_verdict_gives_none_without_a_finished_top_k_run_and_flags_unequal_seeds():
    assert "no verdict on the accuracy claim yet" in routing._lora_verdict({"ld-mole": _row(0.9)})
    two_seeds = _row(0.95) | {"accuracy": [0.95, 0.95]}
    assert "different numbers of seeds; paired over the 2" in routing._lora_verdict(
        {"ld-mole": two_seeds, "top2": _row(0.9)}
    )
