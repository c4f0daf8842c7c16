import pytest

from bench.video import PROMOE_CONFIGS, TIERS, claims


def test_the_full_tier_covers_4k_to_64k_tokens_three_seeds_and_both_promoe_ablations():
    full = TIERS["full"]
    assert full["tokens"][0] == 4096 and full["tokens"][-1] == 65536
    assert max(TIERS["quick"]["tokens"]) == 16384
    assert len(full["quality_seeds"]) == 3 and len(full["promoe_seeds"]) == 3
    assert {c.get("ffn") for c in PROMOE_CONFIGS.values()} == {"dense", "moe", "promoe", "ec", "race"}
    assert {"promoe_conditional": False, "ffn": "promoe"} in PROMOE_CONFIGS.values()
    assert {"contrastive_weight": 0.0, "ffn": "promoe"} in PROMOE_CONFIGS.values()


def _seeds(*values, fcd=20.0):
    return [
        {"heldout_rf_loss": v, "fcd": fcd, "seed": seed, "train_cpu_seconds": 10.0} for seed, v in enumerate(values)
    ]


def _data(moga_loss, promoe_loss, time_ratio):
    attention = [{"tokens": 16384, "time_ratio": time_ratio, "flop_fraction": 0.3, "mass_recall": 0.6,
                  "mass_recall_random_groups": 0.25}]  # fmt: skip
    quality = {m: _seeds(v, v + 0.001, v - 0.001) for m, v in (("full", 0.20), ("moga", moga_loss), ("local", 0.25))}
    promoe = {label: _seeds(0.3, 0.301, 0.299) for label in PROMOE_CONFIGS}
    promoe["ProMoE"] = _seeds(promoe_loss, promoe_loss + 0.001, promoe_loss - 0.001)
    return {"tier": "full", "attention": attention, "quality": quality, "promoe": promoe}


def test_the_claim_lines_say_yes_only_when_the_numbers_support_them():
    good = claims(_data(moga_loss=0.2005, promoe_loss=0.25, time_ratio=0.5))
    bad = claims(_data(moga_loss=0.26, promoe_loss=0.35, time_ratio=1.3))
    assert "**yes**" in good[0] and "**no**" in bad[0]
    parity = next(line for line in good if line.startswith("- MoGA + local ≈ full"))
    assert "inside the margin: **yes**" in parity
    parity = next(line for line in bad if line.startswith("- MoGA + local ≈ full"))
    assert "inside the margin: **no**" in parity


def _verdict_row(lines, start):
    return next(line for line in lines if line.startswith(f"| {start}"))


def test_the_verdicts_are_computed_from_paired_intervals_and_off_the_cards_scale_are_inconclusive():
    from bench.video import QUALITY_MODES, attention_baselines_report

    data = _data(moga_loss=0.205, promoe_loss=0.25, time_ratio=0.5)
    data["quality"] = {m: _seeds(v, v, v) for m, v in zip(QUALITY_MODES, (0.2, 0.205, 0.25, 0.3, 0.2, 0.1))}
    data["quality"]["random"] = _seeds(0.30, 0.31, 0.29)
    data["quality"]["moga"] = _seeds(0.20, 0.21, 0.205)
    patterns = {
        name: {"mass_recall": recall, "flop_fraction": 0.25, "time_ratio": 1.0}
        for name, recall in (("random", 0.25), ("blocktopk", 0.8), ("sta", 0.5))
    }
    data["attention_baselines"] = [
        {"tokens": 8464, "grid": [16, 23, 23], "sta_tile": [4, 4, 4], "block_topk": 4, "patterns": patterns}
    ]
    lines = claims(data)
    random = _verdict_row(lines, "1,500 steps: MoGA + local beats random")
    assert "| 3 | +0.095" in random and "**inconclusive at this scale**" in random
    note = next(line for line in lines if line.startswith("- 1,500 steps: MoGA + local beats random"))
    assert "128 tokens" in note and "in favour of moga" in note
    recall = next(line for line in lines if line.startswith("- Mass recall"))
    assert recall.endswith("**no**.")  # block top-k keeps more mass than MoGA's 0.6
    table = "\n".join(attention_baselines_report(data["attention_baselines"]))
    assert "| 8464 | blocktopk | 0.250 | 1.00 | 0.800 |" in table
    assert "tile shrinks to 4×1×1" in table


def test_the_quick_tier_runs_three_seeds_of_every_quality_pattern_and_the_ec_dit_baseline():
    from bench.video import QUALITY_MODES

    assert set(QUALITY_MODES) == {"full", "moga", "local", "random", "blocktopk", "sta"}
    assert len(TIERS["quick"]["quality_seeds"]) == 3 and len(TIERS["quick"]["promoe_seeds"]) == 3
    assert {"ffn": "ec"} in PROMOE_CONFIGS.values()


def test_the_longer_study_reports_only_seeds_that_every_contender_finished():
    from bench.video import _complete_seeds

    found = {0: {"a": {"seed": 0}, "b": {"seed": 0}}, 1: {"a": {"seed": 1}}, 2: {"a": {"seed": 2}, "b": {"seed": 2}}}
    kept = _complete_seeds(found, ("a", "b"))
    assert [r["seed"] for r in kept["a"]] == [0, 2] and [r["seed"] for r in kept["b"]] == [0, 2]
    assert _complete_seeds({1: {"a": {}}}, ("a", "b")) == {}


def test_the_race_dit_and_activation_ablations_are_configured_without_renaming_cached_runs():
    from bench.video import _promoe_slug

    assert PROMOE_CONFIGS["Race-DiT (global top-k + shared)"] == {"ffn": "race"}
    assert PROMOE_CONFIGS["ProMoE − identity → sigmoid"] == {"ffn": "promoe", "promoe_activation": "sigmoid"}
    assert PROMOE_CONFIGS["ProMoE − identity → softmax"] == {"ffn": "promoe", "promoe_activation": "softmax"}
    slugs = [_promoe_slug(label) for label in PROMOE_CONFIGS]
    assert len(set(slugs)) == len(slugs)
    # the names the cached results were written under before these rows existed
    assert slugs[:6] == ["dense", "dit-moe", "ec-dit", "promoe", "promoe-nocond", "promoe-norcl"]
    assert slugs[6:] == ["race-dit", "promoe-sigmoid", "promoe-softmax"]


def test_the_claims_compare_promoe_with_race_dit_and_check_the_papers_activation_order():
    good = _data(moga_loss=0.205, promoe_loss=0.25, time_ratio=0.5)
    good["promoe"]["ProMoE − identity → sigmoid"] = _seeds(0.26, 0.26, 0.26)
    good["promoe"]["ProMoE − identity → softmax"] = _seeds(0.27, 0.27, 0.27)
    lines = claims(good)
    race = _verdict_row(lines, "1,500 steps: ProMoE beats Race-DiT")
    assert "held-out RF loss" in race and "| 3 |" in race
    fcd = [line for line in lines if line.startswith("| 1,500 steps: ProMoE beats dense") and "| FCD" in line]
    assert fcd and "−29%" in fcd[0]  # the paper's FID change, as the claimed FCD effect
    activation = next(line for line in lines if line.startswith("- Activation"))
    assert "identity < sigmoid < softmax" in activation and activation.count("**yes**") == 1
    bad = _data(moga_loss=0.205, promoe_loss=0.25, time_ratio=0.5)
    bad["promoe"]["ProMoE − identity → softmax"] = _seeds(0.2, 0.2, 0.2)
    activation = next(line for line in claims(bad) if line.startswith("- Activation"))
    assert "softmax < identity" in activation and "**no**" in activation


def _row(label, seed, steps, loss=0.3):
    return {"heldout_rf_loss": loss, "accuracy": 0.1, "fcd": 20.0, "seed": seed, "steps": steps,
            "activated_ffn_parameters": 1, "parameters": 2, "label": label}  # fmt: skip


def test_the_cache_only_report_leaves_out_configurations_never_run_without_training_them(tmp_path, monkeypatch):
    from bench import video

    monkeypatch.setattr(video.cache, "CACHE", tmp_path / "video")
    monkeypatch.setattr(video.study, "train_and_evaluate", lambda *a, **k: pytest.fail("the report-only path trained"))
    old = list(PROMOE_CONFIGS)[:6]
    for label in old:
        for seed in (0, 1, 2):
            for steps in (150, video.EXTENDED_STEPS):
                video.store().put(f"promoe-{video._promoe_slug(label)}-s{seed}-{steps}", _row(label, seed, steps))
    race = "Race-DiT (global top-k + shared)"
    video.store().put(f"promoe-race-dit-s0-{video.EXTENDED_STEPS}", _row(race, 0, 600))

    short, info = video.promoe_study(video.TIERS["quick"], compute=False)
    assert list(short) == old and all(len(rows) == 3 for rows in short.values()) and info is None
    section = "\n".join(video.promoe_section("3. ProMoE (150 steps", short, {}))
    assert "Not run at this budget yet: Race-DiT (global top-k + shared), ProMoE − identity → sigmoid" in section
    # Race-DiT ran seed 0 only: seeds 1 and 2 drop for everyone; the activation rows never ran and are left out
    longer = video.extended_promoe(video.TIERS["quick"], compute=False)
    assert list(longer) == [*old, race] and all([r["seed"] for r in rows] == [0] for rows in longer.values())


def _long(values_by_mode, tokens=1024, steps=360):
    shared = {"train_cpu_seconds": 60.0, "tokens": tokens, "steps": steps, "batch_size": 8, "grid": [16, 8, 8],
              "parameters": 43888, "heldout_clips": 64, "score_flop_fraction": 0.35}  # fmt: skip
    return {
        mode: [{**shared, "heldout_rf_loss": v, "final_rf_loss": v + 0.1, "seed": seed} for seed, v in enumerate(vs)]
        for mode, vs in values_by_mode.items()
    }


def test_the_long_context_study_trains_at_least_a_thousand_tokens_per_clip_over_three_seeds():
    from bench.video import TIERS, long_context_order
    from bench.video.tiers import LONG_CORE_MODES, QUALITY_MODES, long_context_tokens

    assert long_context_tokens() >= 1000
    for tier in TIERS.values():
        assert len(tier["long_seeds"]) >= 3 and set(LONG_CORE_MODES) <= set(tier["long_modes"])
    assert set(TIERS["full"]["long_modes"]) == set(QUALITY_MODES)
    order = long_context_order(("full", "moga", "local", "random", "sta"), (0, 1))
    # every seed of the card's main comparison before any other baseline, seed-major within each group
    assert order[:6] == [("full", 0), ("moga", 0), ("local", 0), ("full", 1), ("moga", 1), ("local", 1)]
    assert order[6:] == [("random", 0), ("sta", 0), ("random", 1), ("sta", 1)]


def test_the_score_flops_of_each_pattern_come_from_its_layout_at_the_long_context_grid():
    from bench.video.measure import score_flop_fraction
    from bench.video.tiers import LONG_CONTEXT
    from mlcore.video.attention import VideoAttention

    layer = VideoAttention(32, 2, window=(4, 2, 2), block_topk=LONG_CONTEXT["block_topk"],
                           sta_tile=LONG_CONTEXT["sta_tile"], sta_window=LONG_CONTEXT["sta_window"])  # fmt: skip
    grid = (16, 8, 8)
    local = (16 + 64) / 1024  # the (4, 2, 2) window and the 8×8 frame
    assert score_flop_fraction("local", grid, layer) == pytest.approx(local)
    assert score_flop_fraction("random", grid, layer) == pytest.approx(local + 0.25)
    assert score_flop_fraction("blocktopk", grid, layer) == pytest.approx(5 / 16)
    assert score_flop_fraction("sta", grid, layer) == pytest.approx(45 / 128)
    assert score_flop_fraction("full", grid, layer) == 1.0


def test_one_long_context_run_records_its_tokens_cost_and_measured_moga_flops():
    from bench.video.measure import train_long_context

    row = train_long_context("moga", steps=1, seed=0, heldout_clips=2)
    assert row["tokens"] == 1024 and row["grid"] == [16, 8, 8] and row["steps"] == 1
    assert row["train_cpu_seconds"] > 0 and row["heldout_rf_loss"] > 0
    assert row["score_flop_fraction"] == pytest.approx((16 + 64) / 1024 + row["moga_group_flop_fraction"])
    assert 0.25 <= row["moga_group_flop_fraction"] <= 1.0


def test_the_parity_claim_reports_the_long_context_interval_and_its_computed_verdict():
    data = _data(moga_loss=0.2005, promoe_loss=0.25, time_ratio=0.5)
    without = next(line for line in claims(data) if line.startswith("- MoGA + local ≈ full"))
    assert "not measured at ≥ 1,000 tokens" in without and "barely matters" not in without
    data["long_context"] = _long({"full": (0.30, 0.31, 0.32), "moga": (0.301, 0.309, 0.322),
                                  "local": (0.35, 0.36, 0.37)})  # fmt: skip
    lines = claims(data)
    parity = next(line for line in lines if line.startswith("- MoGA + local ≈ full"))
    assert "at 1,024 tokens (§2d, a tiny model, 360 steps)" in parity and "**inconclusive at this scale**" in parity
    assert "barely matters" not in parity
    row = _verdict_row(lines, "1,024 tokens: MoGA + local beats local")
    assert "| 3 | +0.049" in row and "**inconclusive at this scale**" in row  # off the card's width and steps
    note = next(line for line in lines if line.startswith("- 1,024 tokens: MoGA + local beats local"))
    assert "width 32, 2 blocks, 360 steps" in note and "in favour of moga" in note
    assert _verdict_row(lines, "1,024 tokens: MoGA + local ≈ full")


def test_the_long_context_section_reads_the_cache_only_and_leaves_out_patterns_never_run(tmp_path, monkeypatch):
    from bench import video

    monkeypatch.setattr(video.cache, "CACHE", tmp_path / "video")
    monkeypatch.setattr(video.study, "train_long_context", lambda *a, **k: pytest.fail("the report-only path trained"))
    settings = video.TIERS["full"]
    stamp, steps = video.tiers.long_context_stamp(), settings["long_steps"]
    for mode, rows in _long({"full": (0.30, 0.31, 0.32), "moga": (0.30, 0.31, 0.32)}, steps=steps).items():
        for row in rows:
            video.store().put(f"long-1024-{stamp}-{mode}-s{row['seed']}-{steps}", row)
    found = video.long_context_study(settings, compute=False)
    assert list(found) == ["full", "moga"] and [r["seed"] for r in found["moga"]] == [0, 1, 2]
    section = "\n".join(video.long_context_section(found))
    assert (
        "## 2d. Quality at 1,024 tokens per clip" in section and "| moga | 0.35 (measured) | 0.3100 ± 0.0100" in section
    )
