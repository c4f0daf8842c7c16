"""The LD-MoLE parity study: its sweep, its cache keys, its verdicts and its quick tier."""

import json

import pytest

from bench import ld_mole
from bench.cache import Store
from bench.verdicts import INCONCLUSIVE, NOT_REPRODUCED, TIE


@pytest.fixture
def store(tmp_path, monkeypatch) -> Store:
    """A cache of its own, so a test never reads or writes the committed rows."""
    cache = Store(tmp_path / "ld-mole.jsonl")
    monkeypatch.setattr(ld_mole, "CACHE", cache)
    return cache


def test_the_sweep_runs_w0_once_and_every_other_weight_at_both_targets():
    names = [c.name for c in ld_mole.contenders()]
    assert names[:4] == ["lora", "top2", "hydra", "mola"]
    sweep = [c for c in ld_mole.contenders() if c.routing == "ld-mole"]
    assert sweep[0].name == ld_mole.CARD_DEFAULT
    assert {(c.sparsity_weight, c.sparsity_k) for c in sweep} == {(0.0, 2)} | {
        (w, k) for w in (0.01, 0.1, 1.0) for k in (2, 3)
    }
    assert len(names) == len(set(names)) == 11


def test_every_configuration_has_its_own_cache_key_and_seeds_come_first(store):
    jobs = list(ld_mole._jobs(ld_mole._base()))
    keys = [key for *_, key in jobs]
    assert len(keys) == len(set(keys)) == 11 * len(ld_mole.SEEDS)
    assert [config.seed for _, _, config, _ in jobs[:11]] == [0] * 11  # a partial sweep covers every contender
    assert all(config.task == "parity" and config.levels == (2, 3, 4, 5, 6) for _, _, config, _ in jobs)
    by_name = {c.name: key for c, _, config, key in jobs if config.seed == 0}
    assert by_name["ld-mole w=0.1 k=2"] != by_name["ld-mole w=0.1 k=3"] != by_name["ld-mole w=1 k=3"]
    assert "-w0.01-k3-" in by_name["ld-mole w=0.01 k=3"] and "sharedA" in by_name["hydra"]


def _row(routing: str, accuracy: list[float], active: float = 2.0) -> dict:
    return {
        "routing": routing,
        "shape": "8×4",
        "seeds": list(range(len(accuracy))),
        "cpu_seconds": [15.0] * len(accuracy),
        "accuracy": accuracy,
        "mean_active_experts": [active] * len(accuracy),
        "at_most_two_rate": [1.0] * len(accuracy),
        "zero_expert_rate": [0.0] * len(accuracy),
        **{f"accuracy_d{d}": accuracy for d in (2, 3, 4, 5, 6)},
        "trainable_parameters": 64_000,
        "planned_parameters": 64_000,
        "head_parameters": 130,
    }


def _data() -> dict:
    return {
        "lora": _row("lora", [0.68, 0.69, 0.67, 0.70, 0.68], 1.0),
        "top2": _row("top2", [0.655, 0.660, 0.650, 0.665, 0.658]),
        "hydra": _row("hydra", [0.600, 0.610, 0.605, 0.600, 0.612], 8.0),
        "mola": _row("mola", [0.650, 0.655, 0.640, 0.660, 0.650]),
        "ld-mole w=0.1 k=2": _row("ld-mole", [0.500, 0.501, 0.499, 0.502, 0.500], 1.04),
        "ld-mole w=0": _row("ld-mole", [0.656, 0.661, 0.650, 0.667, 0.657], 3.75),
    }


def test_each_ld_mole_setting_is_judged_against_top2_and_the_best_against_the_mixture_baselines():
    verdicts = ld_mole.claims(_data())
    vs_top = {v.method: v for v in verdicts if v.claim.statement.startswith("LD-MoLE ≥ fixed top-k")}
    assert set(vs_top) == {"ld-mole w=0.1 k=2", "ld-mole w=0"} and {v.baseline for v in vs_top.values()} == {"top2"}
    # A collapse to ~1 expert far below top-2, measured tightly: powered, and the interval is below 0.
    assert vs_top["ld-mole w=0.1 k=2"].verdict == NOT_REPRODUCED
    # Within a fraction of a point of top-2 with a tight spread: a tie, not a win.
    assert vs_top["ld-mole w=0"].verdict == TIE
    vs_mix = [v for v in verdicts if "mixture-of-LoRA" in v.claim.statement]
    assert {v.method for v in vs_mix} == {"ld-mole w=0.1 k=2", "ld-mole w=0"}
    assert {v.baseline for v in vs_mix} == {"top2"}  # the best of top-2, HydraLoRA and MoLA here
    assert "**not reproduced**" in ld_mole.headline(verdicts)


def test_a_wide_spread_makes_the_verdict_inconclusive_and_pairs_only_shared_seeds():
    data = _data()
    data["ld-mole w=0.1 k=2"] = _row("ld-mole", [0.70, 0.55, 0.66], 1.5)  # three seeds, noisy
    verdict = next(v for v in ld_mole.claims(data) if v.method == "ld-mole w=0.1 k=2")
    assert verdict.pairs.n == 3 and verdict.verdict == INCONCLUSIVE
    assert any("MDE" in reason for reason in verdict.reasons)


def test_the_report_lists_missing_configurations_and_shows_mde_and_headroom():
    markdown, out = ld_mole.report(_data(), ["mola seed 4"])
    assert "**Partial:** 1 of 30 configurations" in markdown and "130-parameter classification head" in markdown
    assert "| MDE | headroom |" in markdown and "| ld-mole w=0 | 8×4 | 64,000 | 5 |" in markdown
    assert out["missing"] == ["mola seed 4"] and out["verdicts"][0]["method"] == ld_mole.CARD_DEFAULT
    json.dumps(out)  # the results file is plain JSON


def test_the_quick_tier_trains_the_five_families_and_leaves_the_full_report_alone(store, tmp_path, monkeypatch):
    monkeypatch.setattr(ld_mole, "QUICK", {"steps": 2, "batch_size": 8, "train_examples": 40, "eval_examples": 30})
    ld_mole.run("quick", tmp_path)
    assert not (tmp_path / "ld-mole.md").exists()
    written = json.loads((tmp_path / "ld-mole-quick.json").read_text())
    assert set(written["contenders"]) == {"lora", "top2", "hydra", "mola", ld_mole.CARD_DEFAULT}
    assert written["verdicts"] == [] and not written["missing"]
    assert len(store.keys("parity-*")) == 5  # cached: a second quick run trains nothing
