from mlcore.bench.video import PROMOE_CONFIGS, TIERS, claims


def test_the_full_tier_covers_4k_to_64k_tokens_three_seeds_and_both_promoe_ablations():
    full = TIERS["full"]
    assert full["tokens"][0] == 4096 and full["tokens"][-1] == 65536
    assert max(TIERS["quick"]["tokens"]) == 16384
    assert len(full["quality_seeds"]) == 3 and len(full["promoe_seeds"]) == 3
    assert {c.get("ffn") for c in PROMOE_CONFIGS.values()} == {"dense", "moe", "promoe"}
    assert {"promoe_conditional": False, "ffn": "promoe"} in PROMOE_CONFIGS.values()
    assert {"contrastive_weight": 0.0, "ffn": "promoe"} in PROMOE_CONFIGS.values()


def _data(moga_loss, promoe_loss, time_ratio):
    attention = [{"tokens": 16384, "time_ratio": time_ratio, "flop_fraction": 0.3, "mass_recall": 0.6,
                  "mass_recall_random_groups": 0.25}]  # fmt: skip
    quality = {m: [{"heldout_rf_loss": v}] for m, v in (("full", 0.20), ("moga", moga_loss), ("local", 0.25))}
    promoe = {label: [{"heldout_rf_loss": 0.3}] for label in PROMOE_CONFIGS}
    promoe["ProMoE"] = [{"heldout_rf_loss": promoe_loss}]
    return {"tier": "full", "attention": attention, "quality": quality, "promoe": promoe}


def test_the_claim_lines_say_yes_only_when_the_numbers_support_them():
    good = claims(_data(moga_loss=0.205, promoe_loss=0.25, time_ratio=0.5))
    bad = claims(_data(moga_loss=0.26, promoe_loss=0.35, time_ratio=1.3))
    assert "**yes**" in good[0] and "**no**" in bad[0]
    assert good[2].count("**yes**") == 2 and bad[2].count("**no**") == 2
    assert "**yes**" in good[3] and "**no**" in bad[3]
