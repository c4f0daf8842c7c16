import dataclasses
import json

import pytest
import torch

from bench.analysis import ablation_findings
from bench.cache import Store
from bench.routing_ablations import CONTROL, run_variant, variants
from mlcore.hf import adapt
from mlcore.zoo.lm import build_model

MICRO = dataclasses.replace(
    CONTROL,
    hidden_size=32,
    num_layers=2,
    num_heads=2,
    num_experts=4,
    expert_ffn=16,
    context=32,
    vocab_size=300,
    steps=3,
    batch_size=2,
    warmup=1,
    checkpoint_every=3,
    sources=("stdlib-docs",),
)
EVALUATION = {"samples": 4, "seq_len": 32, "windows": "4,16", "multiples": "1,2,4", "resamples": 20, "seed": 0}


def test_each_variant_changes_exactly_one_factor_of_the_control():
    factors = {"balance_coef", "shared_expert_ffn", "dense_layers"}
    control = dataclasses.asdict(CONTROL)
    named = variants()
    assert list(named) == ["control", "balance-0", "balance-0.1", "shared-expert", "dense-first"]
    for name, recipe in list(named.items())[1:]:
        changed = {k for k, v in dataclasses.asdict(recipe).items() if control[k] != v} - {"name", "title"}
        assert len(changed) == 1 and changed <= factors, (name, changed)


def test_the_shared_expert_and_dense_first_layer_reach_the_built_model():
    named = variants(MICRO)
    control, shared, dense = (build_model(named[n]) for n in ("control", "shared-expert", "dense-first"))
    assert control.config.model_type == "qwen2_moe"
    assert [info.index for info in adapt(control).layers] == [0, 1]
    assert [info.index for info in adapt(dense).layers] == [1]

    def shared_weights(model: torch.nn.Module) -> int:
        return sum(p.numel() for p in model.model.layers[0].mlp.shared_expert.parameters())

    assert shared_weights(control) == 0 and shared_weights(shared) > 0


def test_a_variant_trains_evaluates_and_is_read_back_from_its_cache(tmp_path):
    cache = tmp_path / "variants"  # checkpoints here; the results are rows of variants.jsonl beside it
    first = run_variant(MICRO, cache, domains=("stdlib-docs",), evaluation=EVALUATION, log=lambda _: None)
    report = first["reports"]["stdlib-docs"]
    assert report["tokens"] == 4 * 32 and len(report["layers"]) == 2
    assert 0 < first["train_ce"] < 10
    state = cache / "control" / "work" / "state.pt"
    stamp = state.stat().st_mtime_ns
    again = run_variant(MICRO, cache, domains=("stdlib-docs",), evaluation=EVALUATION, log=lambda _: None)
    assert again == json.loads(json.dumps(first)) and state.stat().st_mtime_ns == stamp
    # A changed recipe is a different result: it trains on (here: resumes past the cached steps).
    longer = run_variant(
        dataclasses.replace(MICRO, steps=4),
        cache,
        domains=("stdlib-docs",),
        evaluation=EVALUATION,
        log=lambda _: None,
    )
    assert longer["key"]["recipe"]["steps"] == 4 and state.stat().st_mtime_ns != stamp
    assert torch.load(state, weights_only=False)["step"] == 4
    assert Store(tmp_path / "variants.jsonl").get("control/result")["key"]["recipe"]["steps"] == 4
    with pytest.raises(ValueError, match="different 'control' recipe; delete that folder"):
        run_variant(
            dataclasses.replace(MICRO, balance_coef=0.5), cache, domains=("stdlib-docs",), evaluation=EVALUATION
        )


def test_the_findings_compare_each_variant_with_the_control():
    def fake(srp16: float, lru: list[float], local: float) -> dict:
        srp = [
            {"window": window, "srp": value, "ci_low": value - 0.01, "ci_high": value + 0.01}
            for window, value in ((16, srp16), (64, srp16 - 0.1))
        ]
        rates = [
            {"policy": policy, "multiple": m, "window": 0, "rate": r, "ci_low": r - 0.01, "ci_high": r + 0.01}
            for policy in ("lru", "belady")
            for m, r in zip((1, 2, 4), lru)
        ]
        return {
            "srp": {"model": srp},
            "hit_rates": {"model": rates},
            "local_balance": {"layer 0": local},
            "local_balance_window": 16,
        }

    control = {"name": "control", "reports": {"text": fake(0.5, [0.3, 0.6, 0.7], 0.8)}}
    stronger = {"name": "balance-0.1", "reports": {"text": fake(0.45, [0.3, 0.4, 0.9], 0.9)}}
    lines = ablation_findings([control, stronger])
    assert lines[0].startswith("- balance-0.1 vs control on text: SRP(16) -0.050 (CIs separate)")
    assert lines[0].endswith("LRU hit rate at m=2 -0.200 (CIs separate) — expected lower SRP: as expected.")
    # LRU gains per unit m: 1→2 mean(0.3, 0.1) = 0.2; 2→4 mean(0.05, 0.25) = 0.15.
    assert lines[1].startswith("- Knee (LRU): mean hit-rate gain per unit m is 0.200 from m=1→2 and 0.150 from m=2→4")
    # Balance over 16-token windows against SRP over 64-token ones: windows that differ, so it can fail.
    assert lines[-1].startswith("- Local balance over 16-token windows vs SRP(64) across the 2 variant/text")
    assert "Pearson r = -1.00 (too few points for an interval)" in lines[-1]
    shared = {"name": "shared-expert", "reports": {"text": fake(0.55, [0.3, 0.6, 0.7], 0.7)}}
    dense = {"name": "dense-first", "reports": {"text": fake(0.505, [0.3, 0.6, 0.7], 0.75)}}
    lines = ablation_findings([control, shared, dense])
    assert lines[0].endswith("expected lower SRP: the opposite.")
    assert "SRP(16) +0.005 (CIs overlap)" in lines[1] and lines[1].endswith("states no direction for this factor).")


def test_the_balance_check_uses_srp_windows_other_than_the_balance_window_and_can_come_out_positive():
    from bench.analysis import _correlation_reading, cross_window, pearson_ci

    report = {"srp": {"model": [{"window": w} for w in (4, 16, 64)]}, "local_balance_window": 16}
    assert cross_window(report) == 64
    assert cross_window({**report, "local_balance_window": 64}) == 16
    balance = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    r, low, high = pearson_ci(balance, [0.2, 0.25, 0.33, 0.41, 0.48, 0.6])
    assert r > 0.9 and 0 < low < high
    assert "positive beyond chance" in _correlation_reading(r, low, high)
