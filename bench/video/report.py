"""``video.md``: the tables, the reading of each part and the claims checked, from the study's data."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from bench.video.tiers import LONG_CONTEXT, PROMOE_CONFIGS

# ------------------------------------------------------------------------------------------ report


@dataclass
class Table:
    head: list[str]
    rows: list[list[str]]

    def markdown(self) -> str:
        lines = ["| " + " | ".join(self.head) + " |", "|" + "---|" * len(self.head)]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in self.rows])


def _mean_sd(values: list[float], fmt: str = ".4f") -> str:
    if len(values) == 1:
        return format(values[0], fmt)
    return f"{statistics.fmean(values):{fmt}} ± {statistics.stdev(values):{fmt}}"


def report(data: dict[str, Any]) -> str:
    tier = data["tier"]
    lines = [f"# Video: MoGA attention and ProMoE on bouncing digits ({tier} tier)", ""]
    att = data["attention"]
    trained = all(r["trained_router"] for r in att)
    router = "trained router" if trained else "UNTRAINED router: the zoo model was missing"
    lines += [
        "## 1. Attention cost: MoGA (twin: sort, SDPA per group) vs full SDPA, CPU, 1 thread",
        "",
        f"Activations of the zoo model's first block ({router}), "
        "bouncing digits on a larger canvas (16 frames), M = 4 groups, 4 heads × 16 dims. Mass recall: the share of a "
        "query's full-softmax mass inside its own group (256 sampled queries); a random partition gives ≈ 1/M.",
        "",
        Table(
            [
                "tokens",
                "group sizes",
                "full ms",
                "MoGA ms",
                "time ratio",
                "FLOP fraction Σnᵢ²/N²",
                "mass recall",
                "mass recall, random groups",
            ],
            [
                [
                    str(r["tokens"]),
                    "/".join(map(str, r["group_sizes"])),
                    f"{r['full_ms']:.0f}",
                    f"{r['moga_ms']:.0f}",
                    f"{r['time_ratio']:.2f}",
                    f"{r['flop_fraction']:.3f}",
                    f"{r['mass_recall']:.3f}",
                    f"{r['mass_recall_random_groups']:.3f}",
                ]
                for r in att
            ],
        ).markdown(),
        "",
    ]
    if data.get("attention_baselines"):
        lines += attention_baselines_report(data["attention_baselines"])
    if data["zoo"]:
        lines += [
            "## 2a. The zoo model (trained with the three patterns cycled) evaluated in each mode",
            "",
            Table(
                ["attention", "held-out RF loss", "judge: both right", "digit", "direction", "FCD (judge features)"],
                [
                    [
                        m,
                        f"{r['heldout_rf_loss']:.4f}",
                        f"{r['accuracy']:.3f}",
                        f"{r['digit_accuracy']:.3f}",
                        f"{r['direction_accuracy']:.3f}",
                        f"{r['fcd']:.2f}",
                    ]
                    for m, r in data["zoo"].items()
                ],
            ).markdown(),
            "",
        ]
    q = data["quality"]
    steps = next(iter(q.values()))[0]["steps"]
    lines += quality_section(f"2b. Quality, each pattern trained from scratch ({steps} steps", q)
    extended = data.get("quality_extended") or {}
    if extended:
        steps = next(iter(extended.values()))[0]["steps"]
        lines += quality_section(
            f"2c. Quality of a separate, shorter study ({steps} steps, fewer than §2b's; `python -m bench.video "
            "extend`, evaluated as the quick tier: 40 clips, 12 sampling steps — its judge scores and FCD are not "
            "comparable with §2b's",
            extended,
        )
    if data.get("long_context"):
        lines += long_context_section(data["long_context"])
    p = data["promoe"]
    first = next(iter(p.values()))[0]
    info = data.get("static_judge") or {}
    lines += promoe_section(f"3. ProMoE: one-frame class-conditional generation ({first['steps']} steps", p, info)
    extended = data.get("promoe_extended") or {}
    if extended:
        steps = next(iter(extended.values()))[0]["steps"]
        lines += promoe_section(
            f"3b. ProMoE in a separate, shorter study ({steps} steps, fewer than §3's; `python -m bench.video extend`, "
            "evaluated as the quick tier: 40 samples, 12 sampling steps, FCD in the features of the quick tier's "
            "static judge (300 training steps), so neither its FCD nor its judge accuracy is comparable with §3's",
            extended,
            {},
        )
    lines += ["## Claims", ""]
    lines += claims(data)
    return "\n".join(lines)


#: Score FLOPs vs full attention of each quality pattern at the quality grid (8, 4, 4): window (4, 2, 2)
#: = 16/128 and per-frame = 16/128 for the local branches; MoGA's group term depends on the routing
#: (Σnᵢ²/N² = 1/M = 0.25 when balanced).
QUALITY_FLOPS: dict[str, str] = {
    "full": "1",
    "moga": "0.25 + Σnᵢ²/N² (≥ 0.5)",
    "local": "0.25",
    "random": "0.5",
    "blocktopk": "0.5",
    "sta": "0.5",
}


def promoe_section(title: str, p: dict[str, list[dict[str, Any]]], info: dict[str, Any]) -> list[str]:
    seeds = sorted({len(rs) for rs in p.values()})
    missing = [label for label in PROMOE_CONFIGS if label not in p]
    return [
        f"## {title}, seeds per configuration: {'/'.join(map(str, seeds))})",
        "",
        "Equal activated FFN parameters per conditional token (dense 4d; DiT-MoE, EC-DiT and Race-DiT 2 experts × d "
        "(EC-DiT and Race-DiT: on average — capacity 2T/E per expert, resp. the 2T largest of the T × E sigmoid "
        "scores, so a token gets 0..E experts; neither has a balance loss) + shared 2d; ProMoE 1 expert × 2d + "
        "shared 2d). The activation rows gate ProMoE's top-1 expert with σ(cos) or softmax over the routed "
        "experts' cosines instead of the cosine itself (the same expert is chosen; only its gate changes). "
        + (
            f"Static judge held-out accuracy: {info['digit_accuracy']:.3f}."
            if "digit_accuracy" in info
            else "The static judge is the quick tier's (its accuracy is recorded with that tier's report)."
        ),
        "",
        Table(
            ["FFN", "activated FFN params", "total params", "held-out RF loss", "judge accuracy", "FCD"],
            [
                [
                    label,
                    str(rs[0]["activated_ffn_parameters"]),
                    str(rs[0]["parameters"]),
                    _mean_sd([r["heldout_rf_loss"] for r in rs]),
                    _mean_sd([r["accuracy"] for r in rs], ".3f"),
                    _mean_sd([r["fcd"] for r in rs], ".2f"),
                ]
                for label, rs in p.items()
            ],
        ).markdown(),
        "",
        *([f"Not run at this budget yet: {', '.join(missing)}.", ""] if missing else []),
    ]


def _quality_flops(mode: str, rows: list[dict[str, Any]]) -> str:
    """The pattern's score-FLOP fraction; MoGA's from its trained routing when the runs measured it."""
    measured = [r["moga_group_flop_fraction"] for r in rows if "moga_group_flop_fraction" in r]
    if mode == "moga" and measured:
        return f"{0.25 + statistics.fmean(measured):.2f} (measured)"
    return QUALITY_FLOPS.get(mode, "?")


def quality_section(title: str, q: dict[str, list[dict[str, Any]]]) -> list[str]:
    seeds = sorted({len(rs) for rs in q.values()})
    return [
        f"## {title}, batch 16, seeds per pattern: {'/'.join(map(str, seeds))})",
        "",
        "128 tokens (8 frames, 16×16 canvas, patch 4: the card's 4× token cut for CPU work, for every "
        "contender alike), mean ± sd over seeds. `random`: MoGA with a fixed random equal partition (M = 4) "
        "instead of the learned router, with the same local branches; `blocktopk` (MoBA style, 16 blocks "
        "of 8 tokens, top 8) and `sta` (tiles of 2³ tokens, a window of 2³ tiles: ±1 tile in time, the "
        "whole 4×4 frame in space at this size) alone, as published. Score FLOPs: the share of full "
        "attention's N² scores computed, branches summed; all sparse contenders sit near half.",
        "",
        Table(
            [
                "attention",
                "score FLOPs vs full",
                "held-out RF loss",
                "judge: both right",
                "digit",
                "direction",
                "FCD",
                "train CPU s",
            ],
            [
                [
                    m,
                    _quality_flops(m, rs),
                    _mean_sd([r["heldout_rf_loss"] for r in rs]),
                    _mean_sd([r["accuracy"] for r in rs], ".3f"),
                    _mean_sd([r["digit_accuracy"] for r in rs], ".3f"),
                    _mean_sd([r["direction_accuracy"] for r in rs], ".3f"),
                    _mean_sd([r["fcd"] for r in rs], ".2f"),
                    f"{statistics.fmean(r['train_cpu_seconds'] for r in rs):.0f}",
                ]
                for m, rs in q.items()
            ],
        ).markdown(),
        "",
    ]


#: Tokens per clip of §2b and §2c: 8 frames of a 16×16 canvas, patch (1, 4, 4).
QUALITY_TOKENS = 128


def _long_setup_in_words(rows: list[dict[str, Any]]) -> dict[str, str]:
    """The §2d setup as the report states it, read from :data:`LONG_CONTEXT` and the runs themselves."""
    setup, model, first = LONG_CONTEXT, LONG_CONTEXT["model"], rows[0]
    f, h, w = first["grid"]
    tiles = [g // t for g, t in zip(first["grid"], setup["sta_tile"])]
    return {
        "tokens": f"{first['tokens']:,}",
        "grid": f"{f}×{h}×{w}",
        "clip": f"{setup['frames']} frames of a {setup['size']}×{setup['size']} canvas, patch {setup['patch_size'][1]}",
        "model": f"width {model['dim']}, {model['depth']} blocks of {model['heads']} heads, FFN {model['ffn_width']}",
        "steps": f"{first['steps']:,} steps at batch {first['batch_size']}",
        "block": f"{setup['block_count']} blocks of {first['tokens'] // setup['block_count']} tokens, top "
        f"{setup['block_topk']}",
        "sta": f"tiles of {'×'.join(map(str, setup['sta_tile']))} tokens, a window of "
        f"{'×'.join(map(str, setup['sta_window']))} of the {'×'.join(map(str, tiles))} tiles",
    }


def long_context_section(lc: dict[str, list[dict[str, Any]]]) -> list[str]:
    """§2d: each pattern trained from scratch at 1,024 tokens per clip, scored by held-out RF loss."""
    rows = next(iter(lc.values()))
    words = _long_setup_in_words(rows)
    seeds = sorted({len(rs) for rs in lc.values()})
    runs = sum(len(rs) for rs in lc.values())
    cpu = sum(r["train_cpu_seconds"] + r.get("eval_cpu_seconds", 0.0) for rs in lc.values() for r in rs)
    wall = sum(r.get("train_wall_seconds", 0.0) for rs in lc.values() for r in rs)
    return [
        f"## 2d. Quality at {words['tokens']} tokens per clip, each pattern trained from scratch (a tiny model, "
        f"{words['steps']}, seeds per pattern: {'/'.join(map(str, seeds))})",
        "",
        f"{words['clip']}: a {words['grid']} token grid, {rows[0]['tokens'] // QUALITY_TOKENS}× §2b's "
        f"{QUALITY_TOKENS} tokens (the card's 32×32 canvas gives 512 at 8 frames). Every pattern trains the same tiny "
        f"DiT ({words['model']}; {rows[0]['parameters']:,} parameters) for {words['steps']}: far smaller and "
        "shorter than the card's offline recipe (width 96–128, 4–6 layers, thousands of steps); the full tier is "
        "sized so that three seeds of every pattern train in about an hour on a third of a CPU core. "
        f"Metric: held-out RF loss on {rows[0]['heldout_clips']} held-out clips at t ∈ {{0.1, 0.3, 0.5, 0.7, 0.9}} "
        "with shared noise, mean ± sd over seeds; no clips are sampled or judged (the zoo judge reads 8-frame 16² "
        f"clips). `random`: a fixed random equal partition (M = 4) with the same local branches; `blocktopk`: "
        f"{words['block']}; `sta`: {words['sta']}. Score FLOPs: the share of full attention's N² scores, "
        "branches summed (MoGA's group term measured on its trained routing).",
        "",
        Table(
            ["attention", "score FLOPs vs full", "held-out RF loss", "final train RF loss", "train CPU s per run"],
            [
                [
                    m,
                    f"{statistics.fmean(r['score_flop_fraction'] for r in rs):.2f}"
                    + (" (measured)" if m == "moga" else ""),
                    _mean_sd([r["heldout_rf_loss"] for r in rs]),
                    _mean_sd([r["final_rf_loss"] for r in rs]),
                    f"{statistics.fmean(r['train_cpu_seconds'] for r in rs):.0f}",
                ]
                for m, rs in lc.items()
            ],
        ).markdown(),
        "",
        f"Cost, measured: {runs} runs, {cpu / 60:.1f} CPU-minutes in all (training and held-out loss, one thread); "
        f"their training steps took {wall / 60:.0f} min of wall clock on the shared machine.",
        "",
    ]


def attention_baselines_report(rows: list[dict[str, Any]]) -> list[str]:
    table = []
    for r in rows:
        for name, p in r["patterns"].items():
            table.append(
                [
                    str(r["tokens"]),
                    name,
                    f"{p['flop_fraction']:.3f}",
                    f"{p['time_ratio']:.2f}" if "time_ratio" in p else "–",
                    f"{p['mass_recall']:.3f}",
                ]
            )
    first = rows[0]
    return [
        "## 1b. The card's baselines on the same activations",
        "",
        "Same queries and keys as §1. Single patterns at ≈ 25% of the scores: `random` (fixed random partition into "
        "4 equal groups, the group-attention twin), `blocktopk` (MoBA style: 16 contiguous blocks, mean-pooled keys, "
        f"each query's top {first['block_topk']} blocks by q·k̄; sparse twin: per block, the queries that chose it, "
        "merged by log-sum-exp), `sta` (tiles of 4³ tokens, a window of about a quarter of the tiles, shifted inward "
        "at borders; sparse twin: gathered key tiles, one batched SDPA). The union rows are the keys a query sees "
        "across the averaged branches (window (4, 2, 2) and its frame), untimed. Time ratio vs full SDPA in the same "
        "run (1 thread; one repeat above 4k tokens).",
        "",
        Table(["tokens", "pattern", "FLOP fraction", "time ratio", "mass recall"], table).markdown(),
        "",
        *_baseline_notes(rows),
    ]


def _baseline_notes(rows: list[dict[str, Any]]) -> list[str]:
    import math

    notes = [
        "Reading: the twins are CPU stand-ins. Only random groups reuses a fast path (sorted equal segments, "
        "one SDPA each); block top-k and STA pay gathers/loops that a fused kernel would not, so their time "
        "ratios bound the twins, not the patterns — compare patterns by FLOP fraction and mass recall. "
        "Block top-k picks blocks per query *and per head* from the exact q·k̄, MoGA one group per token "
        "for all heads from a router trained on 128-token clips.",
    ]
    for r in rows:
        tile = [math.gcd(t, g) for g, t in zip(r["grid"], r["sta_tile"])]
        if tile != r["sta_tile"]:
            notes.append(
                f"At {r['tokens']} tokens (grid {'×'.join(map(str, r['grid']))}) STA's tile shrinks to "
                f"{'×'.join(map(str, tile))} (the grid is not divisible by {r['sta_tile']}), so its twin runs "
                "one tiny SDPA per tile over gathered keys: that time ratio is the twin's overhead."
            )
    return [f"- {n}" for n in notes] + [""]


def _yes(holds: bool) -> str:
    return "**yes**" if holds else "**no**"


#: Card §4 expects orders (MoGA + local below local-only and random groups; ProMoE below dense) in held-out
#: RF loss and gives no size: 0.002 (about 1% of the loss at 1,500 steps) is the smallest effect of interest.
RF_LOSS_EFFECT = 0.002
RF_LOSS_SOURCE = "card §4 gives an order, no size; 0.002 taken as the smallest effect of interest"
MOGA_OFF_SCALE = (
    "128 tokens per clip, width 64; the card: 512 tokens, width 96–128, and the claim is about long context"
)
PROMOE_OFF_SCALE = "width 64 (the card: 96–128)"
#: FID changes the paper reports (card §1 and §2), applied as relative FCD changes to the baseline's FCD here.
PROMOE_FCD_CLAIMS: dict[str, tuple[float, str]] = {
    "dense": (1 - 6.39 / 9.02, "card §1: FID 9.02 → 6.39 (B, CFG 1.5), −29%"),
    "DiT-MoE (top-2 + shared, Switch balance)": (1 - 2.79 / 4.10, "card §1: FID 4.10 → 2.79 (L, CFG 1.5), −32%"),
    "EC-DiT (expert choice, capacity 2T/E + shared)": (1 - 2.79 / 3.65, "card §1: FID 3.65 → 2.79 (L, CFG 1.5), −24%"),
    "ProMoE − conditional routing": (1 - 6.39 / 6.75, "card §2 ablation: FID 6.75 → 6.39, −5%"),
    "ProMoE − contrastive loss": (1 - 6.75 / 7.92, "card §2 ablation: FID 7.92 → 6.75, −15%"),
    "ProMoE − identity → sigmoid": (1 - 6.39 / 6.63, "card §2: FID 6.63 → 6.39, −4%"),
    "ProMoE − identity → softmax": (1 - 6.39 / 6.92, "card §2: FID 6.92 → 6.39, −8%"),
}


def _by_seed(rows: list[dict[str, Any]], key: str) -> dict[int, float]:
    return {r.get("seed", i): r[key] for i, r in enumerate(rows)}


def _judge_pair(
    claim: Any, name: str, ours: list[dict[str, Any]], other: str, theirs: list[dict[str, Any]], key: str
) -> Any:
    from bench.verdicts import judge

    mine, yours = _by_seed(ours, key), _by_seed(theirs, key)
    seeds = sorted(set(mine) & set(yours))
    seconds = statistics.fmean(r.get("train_cpu_seconds", 0.0) for r in [*ours, *theirs])
    return judge(claim, (name, [mine[s] for s in seeds]), (other, [yours[s] for s in seeds]), seconds_per_run=seconds)


def quality_verdicts(
    q: dict[str, list[dict[str, Any]]], lead: str = "", *, off_scale: str | None = MOGA_OFF_SCALE
) -> list[Any]:
    """MoGA + local against each baseline pattern, paired by seed, in held-out RF loss."""
    from bench.verdicts import Claim

    out = []
    for other in ("local", "random", "blocktopk", "sta"):
        if "moga" in q and other in q:
            claim = Claim(
                f"{lead}MoGA + local beats {other}",
                "held-out RF loss",
                RF_LOSS_EFFECT,
                RF_LOSS_SOURCE,
                higher_is_better=False,
                ceiling=0.0,
                off_scale=off_scale,
            )
            out.append(_judge_pair(claim, "moga", q["moga"], other, q[other], "heldout_rf_loss"))
    return out


def promoe_verdicts(p: dict[str, list[dict[str, Any]]], lead: str = "", *, fcd: bool = True) -> list[Any]:
    """ProMoE against each baseline and ablation, paired by seed: held-out RF loss (card §4) and, where the
    paper gives an FID change, FCD with that relative change as the claimed effect."""
    from bench.verdicts import Claim

    if "ProMoE" not in p:
        return []
    out = []
    for other, rows in p.items():
        if other == "ProMoE":
            continue
        claim = Claim(
            f"{lead}ProMoE beats {other}",
            "held-out RF loss",
            RF_LOSS_EFFECT,
            RF_LOSS_SOURCE,
            higher_is_better=False,
            ceiling=0.0,
            off_scale=PROMOE_OFF_SCALE,
        )
        out.append(_judge_pair(claim, "ProMoE", p["ProMoE"], other, rows, "heldout_rf_loss"))
        if fcd and other in PROMOE_FCD_CLAIMS:
            relative, source = PROMOE_FCD_CLAIMS[other]
            base = statistics.fmean(r["fcd"] for r in rows)
            claim = Claim(
                f"{lead}ProMoE beats {other}",
                "FCD",
                relative * base,
                f"{source} of {other}'s FCD {base:.1f}",
                higher_is_better=False,
                ceiling=0.0,
                off_scale=PROMOE_OFF_SCALE,
            )
            out.append(_judge_pair(claim, "ProMoE", p["ProMoE"], other, rows, "fcd"))
    return out


#: MoGA + local ≈ full (card §4) holds when the paired interval of full − MoGA lies within ±5% of full's loss.
PARITY_MARGIN = 0.05


def _parity(q: dict[str, list[dict[str, Any]]]) -> tuple[Any, float] | None:
    """The paired differences full − MoGA (held-out RF loss; > 0: MoGA lower) and the parity margin."""
    from bench.verdicts import paired

    if "moga" not in q or "full" not in q:
        return None
    mine, full = _by_seed(q["moga"], "heldout_rf_loss"), _by_seed(q["full"], "heldout_rf_loss")
    seeds = sorted(set(mine) & set(full))
    if not seeds:
        return None
    pairs = paired([mine[s] for s in seeds], [full[s] for s in seeds], higher_is_better=False)
    return pairs, PARITY_MARGIN * statistics.fmean(full[s] for s in seeds)


def _interval_against_margin(pairs: Any, margin: float) -> str:
    low, high = pairs.interval()
    inside = -margin <= low and high <= margin
    return (
        f"{pairs.mean:+.4f} [{low:+.4f}, {high:+.4f}] over {pairs.n} seeds against a margin of ±{margin:.4f} "
        f"({PARITY_MARGIN:.0%} of full's loss): interval inside the margin: {_yes(inside)}"
    )


def _parity_line(q: dict[str, list[dict[str, Any]]], lc: dict[str, list[dict[str, Any]]] | None = None) -> list[str]:
    """MoGA + local ≈ full (card §4): the paired interval of full − MoGA against ±5% of full's loss, at §2b's
    128 tokens and, where §2d ran, at 1,024 tokens with the verdict :func:`long_context_verdicts` computes."""
    found = _parity(q)
    if found is None:
        return []
    line = (
        "- MoGA + local ≈ full (card §4; held-out RF loss, full − MoGA paired by seed): "
        f"at {QUALITY_TOKENS} tokens (§2b) " + _interval_against_margin(*found)
    )
    long = _parity(lc or {})
    if long is None or lc is None:
        return [line + "; not measured at ≥ 1,000 tokens in this tier (§2d, `python -m bench.video long`)."]
    parity = long_context_verdicts(lc)[0]
    rows = lc["moga"]
    return [
        f"{line}; at {rows[0]['tokens']:,} tokens (§2d, a tiny model, {rows[0]['steps']:,} steps) "
        f"{_interval_against_margin(*long)}, MDE {parity.mde:.4f}: **{parity.verdict}** (a powered tie would be "
        "the card's parity)."
    ]


def long_context_off_scale(rows: list[dict[str, Any]]) -> str:
    """What separates §2d from the card's offline recipe, in the runs' own figures."""
    model = LONG_CONTEXT["model"]
    return (
        f"{rows[0]['tokens']:,} tokens per clip, but a tiny model: width {model['dim']}, {model['depth']} blocks, "
        f"{rows[0]['steps']:,} steps at batch {rows[0]['batch_size']}; the card: width 96–128, 4–6 layers, thousands "
        "of steps"
    )


def long_context_verdicts(lc: dict[str, list[dict[str, Any]]]) -> list[Any]:
    """§2d's claims, paired by seed in held-out RF loss: MoGA + local ≈ full (the parity margin as the effect:
    "tie" is parity, "not reproduced" MoGA + local worse), then MoGA + local beats each baseline."""
    from bench.verdicts import Claim

    if "moga" not in lc:
        return []
    rows = lc["moga"]
    lead = f"{rows[0]['tokens']:,} tokens: "
    off_scale = long_context_off_scale(rows)
    out = []
    found = _parity(lc)
    if found is not None:
        margin = found[1]
        claim = Claim(
            f"{lead}MoGA + local ≈ full",
            "held-out RF loss",
            margin,
            f"card §4 expects parity; ±{PARITY_MARGIN:.0%} of full's loss taken as the margin",
            higher_is_better=False,
            ceiling=0.0,
            off_scale=off_scale,
        )
        out.append(_judge_pair(claim, "moga", rows, "full", lc["full"], "heldout_rf_loss"))
    return out + quality_verdicts(lc, lead, off_scale=off_scale)


def _activation_claim(p: dict[str, list[dict[str, Any]]], lead: str = "") -> list[str]:
    """The paper's activation ablation (identity < sigmoid < softmax in FID), on held-out RF loss."""
    labels = {"identity": "ProMoE", "sigmoid": "ProMoE − identity → sigmoid", "softmax": "ProMoE − identity → softmax"}
    if not all(label in p for label in labels.values()):
        return []
    loss = {a: statistics.fmean(r["heldout_rf_loss"] for r in p[label]) for a, label in labels.items()}
    order = " < ".join(sorted(loss, key=loss.__getitem__))
    line = (
        f"{lead}activation on ProMoE's cosine scores (held-out RF loss): identity {loss['identity']:.4f}, "
        f"sigmoid {loss['sigmoid']:.4f}, softmax {loss['softmax']:.4f} → {order}; identity lowest: "
        f"{_yes(loss['identity'] < min(loss['sigmoid'], loss['softmax']))} (the paper, FID at CFG 1.5: "
        "identity 6.39 < sigmoid 6.63 < softmax 6.92)."
    )
    return [f"- {line[:1].upper()}{line[1:]}"]


def claims(data: dict[str, Any]) -> list[str]:
    from bench import verdicts as rule

    out = []
    att = data["attention"]
    biggest = att[-1]
    out.append(
        f"- MoGA cheaper than full attention at long context: at {biggest['tokens']} tokens the twin takes "
        f"{biggest['time_ratio']:.2f}× full SDPA's time for a FLOP fraction of {biggest['flop_fraction']:.2f} "
        f"({_yes(biggest['time_ratio'] < 1)}; the paper: 1.7× faster end to end, 71% sparsity)."
    )
    recall, random_recall = biggest["mass_recall"], biggest["mass_recall_random_groups"]
    out.append(
        f"- The learned router keeps more softmax mass in-group than a random partition: {recall:.3f} vs "
        f"{random_recall:.3f} ({_yes(recall > random_recall)})."
    )
    q = data["quality"]
    lc = data.get("long_context") or {}
    out += _parity_line(q, lc)
    baselines = data.get("attention_baselines") or []
    if baselines:
        big = baselines[-1]["patterns"]
        out.append(
            f"- Mass recall at {baselines[-1]['tokens']} tokens, ≈ equal budgets: MoGA {biggest['mass_recall']:.3f} "
            f"(FLOP fraction {biggest['flop_fraction']:.2f}), random groups {big['random']['mass_recall']:.3f}, "
            f"block top-k {big['blocktopk']['mass_recall']:.3f}, sliding tile {big['sta']['mass_recall']:.3f} → "
            "MoGA's router keeps the most mass: "
            f"{_yes(biggest['mass_recall'] > max(big[k]['mass_recall'] for k in ('random', 'blocktopk', 'sta')))}."
        )
    p = data["promoe"]
    out += _activation_claim(p)
    out.append(
        "- The 600-step rows (§2c, §3b) are a separate, shorter study with the quick tier's evaluation; their "
        "verdicts use held-out RF loss only (the same 64 clips and t-grid as §2b and §3), never their FCD."
    )
    found = quality_verdicts(q, "1,500 steps: ") + long_context_verdicts(lc) + promoe_verdicts(p, "1,500 steps: ")
    found += quality_verdicts(data.get("quality_extended") or {}, "600 steps: ")
    found += promoe_verdicts(data.get("promoe_extended") or {}, "600 steps: ", fcd=False)
    out += ["", *rule.section("Verdicts on the cards' claims (computed from paired intervals)", found)]
    if data["tier"] == "quick":
        out.append(
            "- Quick tier: a few hundred steps on a shared 2-core CPU; models this young are far from converged, so "
            "the 150-step quality and ProMoE rows are a smoke test, not evidence; the 600-step rows (§2c, §3b) are "
            "4× longer and still far from converged (judge accuracy near chance)"
            + (f"; the 1,024-token rows (§2d) train {next(iter(lc.values()))[0]['steps']} steps" if lc else "")
            + ". Run `--tier full` for the study."
        )
    return out
