"""``make bench-el``: the Efficiency Leverage mini-study (Tian et al., ICLR 2026, scaled down).

Trains tiny byte-level transformer LMs on Shakespeare (train split; loss on the fixed 5% test
split) at several compute budgets: dense models of several widths, then MoE models (``mlcore.moe``
top-k softmax routers, Switch balance loss 0.01) over activation ratios A and granularities G at
matched active FLOPs (k = G experts of width 2d/G, E = k/A; G = 2·d_model/d_expert as in the
paper). Compute C = 6 · non-embedding active parameters · tokens.

Fairness (the comparison the law assumes): at each budget the MoEs train at the width of that
budget's best dense model, so an MoE is compared with the dense frontier at the active size the
frontier itself picked. The dense widths must bracket the best width (a narrower and a wider one
both lose to it): where the optimum sits at the edge of a budget's widths, the next width of
:data:`WIDTH_LADDER` beyond it is trained, until it is bracketed or the ladder ends; the report
checks per budget that it is.

Seeds: the grid is trained under seed 0. The frontier points — each budget's dense optimum (by the
mean loss over seeds), its narrower and wider neighbours, and the MoE that EL's verdict uses (the
budget's best MoE on seed 0) — are trained under every seed of the tier (3 in the full tier; the
seed sets the initialisation and the batch order). EL per seed is read off that seed's own dense
law, and the verdicts pair the seeds. The fits stay on the seed-0 grid, where every configuration
has one run.

Then: the dense loss–compute law, EL per MoE run, the law and its baselines fitted by Huber
regression, held-out budgets and configurations, G*, and a check of the sign convention (EL should
rise as A falls). The full tier's full-law fit is written to ``mlcore/analysis/el_constants.json``
— the planner's "bundled" constants, labelled toy-scale. Every finished run is a row of
``bench/cache/el.jsonl``, keyed by configuration, budget and evaluation size, so a study resumes and
runs shared between grids are trained once. ``MOELAB_BENCH_BUDGET_S`` stops new training once spent
(the grid first, then the verdicts' seeds budget by budget, then the neighbours' seeds); the report
says which verdicts rest on how many seeds, and a rerun resumes.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.cache import Store
from bench.common import write_results
from mlcore.train import warmup_cosine_scheduler

ROOT = Path(__file__).resolve().parents[1]
CACHE = Store.named("el")
CONSTANTS = ROOT / "mlcore" / "analysis" / "el_constants.json"
CONTEXT, BATCH, LAYERS, HEADS = 64, 16, 2, 4


@dataclass(frozen=True)
class Config:
    d: int
    activation: float  # A = k/E; 1 for dense
    granularity: int  # G; k = G experts of width 2d/G

    @property
    def dense(self) -> bool:
        return self.activation == 1

    @property
    def experts(self) -> int:
        return 1 if self.dense else round(self.granularity / self.activation)

    @property
    def top_k(self) -> int:
        return 1 if self.dense else self.granularity

    @property
    def d_expert(self) -> int:
        return 2 * self.d // (1 if self.dense else self.granularity)

    def params(self) -> tuple[int, int]:
        """(total, active) non-embedding parameters."""
        attention = 4 * self.d * self.d
        expert = 3 * self.d * self.d_expert
        router = self.d * self.experts if not self.dense else 0
        total = LAYERS * (attention + self.experts * expert + router)
        active = LAYERS * (attention + self.top_k * expert + router)
        return total, active

    @property
    def name(self) -> str:
        return (
            f"dense-d{self.d}" if self.dense else f"moe-d{self.d}-A1/{round(1 / self.activation)}-G{self.granularity}"
        )


#: MoE shapes (A, G): an activation sweep at G = 2 and a granularity sweep at A = 1/8, a cross through
#: (1/8, 2). It identifies every constant of the law (a, d from A and the budgets; β, γ from G) at
#: under half the cost of the 4 × 4 factorial, which the 2-core budget of the study cannot afford.
SHAPES: tuple[tuple[float, int], ...] = (
    *((a, 2) for a in (1 / 2, 1 / 4, 1 / 8, 1 / 16)),
    *((1 / 8, g) for g in (1, 4, 8)),
)

#: The widths a budget's dense grid grows along when its optimum sits at an edge (d divisible by the
#: 4 heads; d = 8 and 12 leave 2 and 3 dimensions per head, narrow but well defined).
WIDTH_LADDER: tuple[int, ...] = (8, 12, 16, 24, 32, 48, 64, 96)

TIERS: dict[str, dict[str, Any]] = {
    # The budgets are steps of the d = 64 dense model; every run of a budget gets its FLOPs.
    # The quick tier is a subset of the full grid with the same evaluation, so it reuses its cache;
    # it trains seed 0 only (three seeds of its frontier would cost about an hour uncached).
    "quick": {
        "budget_steps": (200, 400),
        "dense_widths": (16, 24, 32),
        "shapes": ((1 / 4, 2), (1 / 8, 2), (1 / 8, 4)),
        "eval_windows": 128,
        "seeds": (0,),
    },
    # At these budgets training is step-limited and the narrowest models win: d = 16 is best at 5e10
    # and 1e11 FLOPs (100 and 200 steps), d = 24 at 2e11, d = 32 at 4e11. 5e10 is left out; at 1e11 the
    # ladder adds d = 12 to bracket d = 16.
    "full": {
        "budget_steps": (200, 400, 800),
        "dense_widths": (16, 24, 32, 48, 64),
        "shapes": SHAPES,
        "eval_windows": 128,
        "seeds": (0, 1, 2),
    },
}


def _data() -> tuple[Any, Any]:
    import torch

    from mlcore.data.textset import source_splits

    def encode(split: str, limit: int) -> torch.Tensor:
        text = "\n".join(source_splits(("shakespeare",), split)["shakespeare"])[:limit]
        return torch.frombuffer(bytearray(text.encode("utf-8")), dtype=torch.uint8).long()

    return encode("train", 3_000_000), encode("test", 400_000)


def _model(cfg: Config, seed: int) -> Any:
    import torch
    from torch import nn

    from mlcore.moe import MoELayer

    torch.manual_seed(seed)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(cfg.d), nn.LayerNorm(cfg.d)
            self.qkv, self.out = nn.Linear(cfg.d, 3 * cfg.d, bias=False), nn.Linear(cfg.d, cfg.d, bias=False)
            self.ffn = MoELayer(cfg.d, cfg.d_expert, num_experts=cfg.experts, top_k=cfg.top_k)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            b, t, d = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
            attn = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.out(attn.transpose(1, 2).reshape(b, t, d))
            y, routing = self.ffn(self.norm2(x), return_routing=True)
            return x + y, routing

    class LM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(256, cfg.d)
            nn.init.normal_(self.embed.weight, std=0.02)  # tied with the output: unit-variance logits would blow up
            self.pos = nn.Parameter(torch.randn(CONTEXT, cfg.d) * 0.02)
            self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
            self.norm = nn.LayerNorm(cfg.d)

        def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            from mlcore.moe import switch_load_balance_loss

            x = self.embed(ids) + self.pos[: ids.shape[1]]
            balance = x.new_zeros(())
            for block in self.blocks:
                x, routing = block(x)
                if cfg.experts > 1:
                    balance = balance + switch_load_balance_loss(routing) / LAYERS
            return self.norm(x) @ self.embed.weight.T, balance

    return LM()


def train_one(cfg: Config, flops: float, train: Any, test: Any, eval_windows: int, seed: int = 0) -> dict[str, Any]:
    import torch

    total, active = cfg.params()
    tokens_per_step = BATCH * CONTEXT
    steps = max(10, round(flops / (6 * active * tokens_per_step)))
    model = _model(cfg, seed)
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01, betas=(0.9, 0.95))
    schedule = warmup_cosine_scheduler(optimiser, steps=steps, warmup_steps=max(1, steps // 10), floor=0.1)
    generator = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    model.train()
    for _ in range(steps):
        starts = torch.randint(0, len(train) - CONTEXT - 1, (BATCH,), generator=generator)
        window = torch.stack([train[s : s + CONTEXT + 1] for s in starts.tolist()])
        logits, balance = model(window[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), window[:, 1:].reshape(-1))
        optimiser.zero_grad(set_to_none=True)
        (loss + 0.01 * balance).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimiser.step()
        schedule.step()
    model.eval()
    with torch.no_grad():
        usable = (len(test) - 1) // CONTEXT
        picks = torch.linspace(0, usable - 1, min(eval_windows, usable)).long() * CONTEXT
        window = torch.stack([test[s : s + CONTEXT + 1] for s in picks.tolist()])
        logits, _ = model(window[:, :-1])
        heldout = float(torch.nn.functional.cross_entropy(logits.reshape(-1, 256), window[:, 1:].reshape(-1)))
    return {
        "config": asdict(cfg),
        "name": cfg.name,
        "total_params": total,
        "active_params": active,
        "steps": steps,
        "tokens": steps * tokens_per_step,
        "flops": 6.0 * active * steps * tokens_per_step,
        "loss": heldout,
        "seconds": time.perf_counter() - start,
        "seed": seed,
    }


def _runs(rows: list[dict[str, Any]]) -> list[Any]:
    from mlcore.analysis.runs import Run

    runs = []
    for row in rows:
        cfg = Config(**row["config"])
        runs.append(
            Run(
                name=row["name"],
                kind="dense" if cfg.dense else "moe",
                total_params=row["total_params"],
                active_params=row["active_params"],
                experts=cfg.experts,
                top_k=cfg.top_k,
                shared_experts=0,
                granularity=2 * cfg.d / cfg.d_expert,
                tokens=row["tokens"],
                flops=row["flops"],
                loss=row["loss"],
                budget=row["budget"],
            )
        )
    return runs


def analyse(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The laws on the seed-0 grid (one run per configuration), the dense frontier and EL over seeds
    at the frontier points."""
    from mlcore.analysis.el import fit_law
    from mlcore.analysis.el_holdout import arrays, holdout_scores
    from mlcore.analysis.runs import measured_leverage

    law, leverages = measured_leverage(_runs(grid_rows(rows)))
    A, G, C, EL = arrays(leverages)
    fits = {}
    for variant in ("activation-only", "no-granularity", "full"):
        try:
            fits[variant] = fit_law(A, G, C, EL, variant=variant, resamples=200, source="bench-el mini-study")
        except ValueError as exc:
            fits[variant] = None
            print(f"{variant}: {exc}")
    holdout, holdout_configurations = [], []
    try:  # a partial grid may hold MoE runs at a single budget or configuration only
        holdout = holdout_scores(leverages, by="budget")
        holdout_configurations = holdout_scores(leverages, by="configuration")
    except ValueError as exc:
        print(f"hold-out: {exc}")
    # Sign check: within each (budget, G), does EL rise as A falls?
    rises, pairs = 0, 0
    for budget in sorted({x.budget for x in leverages}):
        for g in np.unique(G):
            group = sorted(
                (x.run.activation(), x.el) for x in leverages if x.budget == budget and x.run.granularity == g
            )
            for (_, sparser), (_, denser) in itertools.pairwise(group):
                pairs += 1
                rises += int(sparser > denser)
    return {
        "dense_law": asdict(law),
        "frontier": frontier(rows),
        "leverage": [
            {
                "run": x.run.name,
                "budget": x.budget,
                "A": x.run.activation(),
                "G": x.run.granularity,
                "C": x.run.flops,
                "loss": x.run.loss,
                "EL": x.el,
            }
            for x in leverages
        ],
        "fits": {k: (v.to_json() if v else None) for k, v in fits.items()},
        "holdout": [asdict(s) for s in holdout],
        "holdout_configurations": [asdict(s) for s in holdout_configurations],
        "sign_check": {"pairs": pairs, "sparser_has_higher_el": rises},
        "seed_leverage": seed_leverage(rows),
    }


def markdown(data: dict[str, Any]) -> str:
    law = data["analysis"]["dense_law"]
    lines = [
        "# Efficiency Leverage mini-study",
        "",
        f"Tier **{data['tier']}**: byte-level LMs, {LAYERS} layers, context {CONTEXT}, batch {BATCH}, Shakespeare "
        "(held-out loss on the fixed test split). Compute C = 6·active non-embedding params·tokens. "
        f"Wall-clock training time {data['training_seconds']:.0f} s summed over the {len(data['rows'])} runs "
        "(1 torch thread each, on 2 CPU cores shared with other work, so far above the CPU time); this invocation "
        f"took {data['seconds']:.0f} s ({data['cached_runs']} runs from bench/cache/el.jsonl, "
        f"{data.get('trained_runs', 0)} trained). " + _seeds_sentence(data.get("seeds", [0])),
        "",
        *_partial(data),
        "## Runs",
        "",
        "Seed 0 is the grid; seeds 1+ are the frontier points (see below).",
        "",
        "| run | budget (FLOPs) | seed | total params | active params | steps | tokens / active param | "
        "held-out loss (nats/byte) |",
        "|---|---|---|---|---|---|---|---|",
        *[
            f"| {r['name']} | {r['budget']} | {seed_of(r)} | {r['total_params']:,} | {r['active_params']:,} | "
            f"{r['steps']} | {r['tokens'] / r['active_params']:.0f} | {r['loss']:.4f} |"
            for r in data["rows"]
        ],
        "",
        *_frontier_table(data["analysis"]["frontier"]),
        "",
        f"Dense law over the best seed-0 dense run per budget: L(C) = {law['B']:.4g} · C^(−{law['b']:.4g}).",
        "",
        *_seed_leverage_table(data["analysis"]["seed_leverage"]),
        "",
        "## Efficiency leverage per MoE run on the seed-0 grid (EL = C_dense(loss) / C)",
        "",
        "| run | budget | A | G | EL |",
        "|---|---|---|---|---|",
        *[
            f"| {x['run']} | {x['budget']} | {x['A']:.4g} | {x['G']:g} | {x['EL']:.3f} |"
            for x in data["analysis"]["leverage"]
        ],
        "",
        *_pivot(data["analysis"]["leverage"]),
        "",
        "## Fitted laws (Huber on ln EL, input = sparsity 1/A; 95% basic-bootstrap CIs over runs)",
        "",
    ]
    for variant, fit in data["analysis"]["fits"].items():
        if fit is None:
            lines.append(f"- {variant}: too few runs to fit")
            continue
        c = fit["constants"]
        parts = [f"{k} = {c[k]:.4g} [{lo:.3g}, {hi:.3g}]" for k, (lo, hi) in fit["intervals"].items()]
        g_star = f"; G* = {c['best_granularity']:.3g}" if c["best_granularity"] else "; no interior G* (γ ≥ 0)"
        lines.append(f"- {variant}: " + ", ".join(parts) + (g_star if variant == "full" else ""))
    lines += [
        "",
        "## Held-out compute budgets (fit on the others, predict ln EL)",
        "",
        "| law | RMSE ln EL | mean abs. error of EL | best G picked |",
        "|---|---|---|---|",
        *[
            f"| {s['variant']} | {s['rmse_log_el']:.4f} | {s['mean_abs_pct_error']:.1%} | "
            f"{s['best_g_hits']}/{s['best_g_groups']} |"
            for s in data["analysis"]["holdout"]
        ],
        "",
        "## Held-out configurations (fit without one (A, G) at every budget, predict its ln EL)",
        "",
        "| law | RMSE ln EL | mean abs. error of EL | configurations held out |",
        "|---|---|---|---|",
        *[
            f"| {s['variant']} | {s['rmse_log_el']:.4f} | {s['mean_abs_pct_error']:.1%} | {s['held_out_groups']} |"
            for s in data["analysis"]["holdout_configurations"]
        ],
        "",
        "## Reading",
        "",
    ]
    sign = data["analysis"]["sign_check"]
    lines.append(
        f"- Sign convention: in {sign['sparser_has_higher_el']} of {sign['pairs']} neighbouring pairs at the same "
        "budget and granularity the sparser MoE has the higher EL (the law with x = 1/A and a > 0 expects all)."
    )
    only = data["analysis"]["fits"].get("activation-only")
    if only is not None:
        a, (low, high) = only["constants"]["a"], only["intervals"]["a"]
        direction = "rises" if low > 0 else "falls" if high < 0 else "neither rises nor falls resolvably"
        lines.append(
            f"- With x = 1/A the activation-only exponent is a = {a:.3g} (95% CI [{low:.3g}, {high:.3g}]): on these "
            f"runs EL {direction} as A falls"
            + ("" if low > 0 else ", against the paper's direction" if high < 0 else "")
            + ". The convention itself (input = sparsity, a > 0 ⇒ EL rises as A falls; input = activation flips "
            "the sign) is checked on synthetic runs in `tests/mlcore/analysis/test_el.py`."
        )
    lines.append(_granularity_reading(data["analysis"]))
    lines.append(data["verdict"])
    compute = [x["C"] for x in data["analysis"]["leverage"]]
    lines.append(
        f"- These constants come from toy models (10⁴–10⁵ parameters, {min(compute):.2g}–{max(compute):.2g} FLOPs): "
        "never extrapolate them to real model sizes. The paper's results (MoE-mini, 0.85B active parameters, "
        "matching a 6.1B dense model with over 7× less compute; G* ≈ 8–12) are not tested here."
    )
    return "\n".join(lines)


def _seeds_sentence(seeds: list[int]) -> str:
    if len(seeds) < 2:
        return "Every run is trained under seed 0 (this tier trains no other seeds)."
    return f"Seeds: the grid under seed 0; the frontier points under seeds {', '.join(map(str, seeds))}."


def _partial(data: dict[str, Any]) -> list[str]:
    missing = data.get("missing_runs") or []
    if not missing:
        return []
    grid = [m for m in missing if m.endswith(" seed 0")]
    text = f"**Partial results**: {len(missing)} runs of the tier were not trained yet ({', '.join(missing)})"
    text += (
        "; the planner's constants were left unchanged."
        if grid
        else "; the seed-0 grid is complete, so the fits and the planner's constants are not affected: only the "
        "seeds at the frontier are short. Rerun the tier to resume."
    )
    return [text, ""]


def _frontier_table(points: list[dict[str, Any]]) -> list[str]:
    """The dense frontier per budget, with the bracketing check computed from the runs."""

    def gap(point: dict[str, Any], side: str) -> str:
        if side not in point["neighbours"]:
            return "none trained"
        g = point["neighbours"][side]
        low, high = g["ci95"]
        interval = f" [{low:+.3f}, {high:+.3f}]" if math.isfinite(low) else ""
        return f"d {g['width']}: {g['mean']:+.3f}{interval} ({g['seeds']} seed{'s' if g['seeds'] > 1 else ''})"

    lines = [
        "## Dense frontier (the MoEs of a budget train at its seed-0 best width)",
        "",
        "Loss by width is the mean over the seeds that width was trained under (in brackets where more than "
        "one). The optimum is bracketed when a narrower and a wider width were trained and both lose to it on "
        "the mean; the gaps are neighbour minus optimum, paired over their common seeds (95% t interval).",
        "",
        "| budget | held-out loss by width d (seeds) | best d | MoE width | narrower neighbour's gap | "
        "wider neighbour's gap | bracketed | tokens / param of the best |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for f in points:
        losses = ", ".join(
            f"{d}: {loss:.3f}" + (f" ({len(f['seeds'][d])})" if len(f["seeds"][d]) > 1 else "")
            for d, loss in f["losses"].items()
        )
        lines.append(
            f"| {f['budget']} | {losses} | {f['best_width']} | {f['moe_width']} | {gap(f, 'narrower')} | "
            f"{gap(f, 'wider')} | {'yes' if f['bracketed'] else 'no'} | {f['tokens_per_param']:.0f} |"
        )
    lines += ["", *(f"- {_bracket_sentence(f)}" for f in points)]
    return lines


def _bracket_sentence(point: dict[str, Any]) -> str:
    """One computed sentence per budget: is the optimum bracketed, and is each side resolved over seeds."""
    budget, best = point["budget"], point["best_width"]
    if not point["bracketed"]:
        side = "narrowest" if "narrower" not in point["neighbours"] else "widest"
        return f"{budget} FLOPs: the optimum d = {best} is the {side} width trained, so it is not bracketed."
    sides = []
    for side in ("narrower", "wider"):
        g = point["neighbours"][side]
        low = g["ci95"][0]
        resolved = "resolved over seeds" if math.isfinite(low) and low > 0 else "not resolved over seeds"
        sides.append(f"d = {g['width']} ({side}, {resolved})")
    moved = (
        f" The seed-0 optimum the MoEs trained at, d = {point['moe_width']}, is not the mean optimum."
        if point["moe_width"] != best
        else ""
    )
    return f"{budget} FLOPs: the optimum d = {best} is bracketed by " + " and ".join(sides) + "." + moved


def _seed_leverage_table(points: list[dict[str, Any]]) -> list[str]:
    seeds = sorted({s for p in points for s in p["EL_by_seed"]}, key=int)
    lines = [
        "## EL over seeds at the frontier",
        "",
        "Each budget's frontier MoE (its best shape on seed 0) under every seed trained; each seed's EL is read "
        "off that seed's own dense law. Mean and 95% t interval on ln EL, shown as EL.",
        "",
        "| budget | frontier MoE | " + " | ".join(f"EL seed {s}" for s in seeds) + " | seeds | EL (geometric mean) "
        "[95% CI] |",
        "|---|---|" + "---|" * len(seeds) + "---|---|",
    ]
    for p in points:
        low, high = p["ci95"]
        interval = f" [{low:.3f}, {high:.3f}]" if math.isfinite(low) else " (one seed: no interval)"
        lines.append(
            f"| {p['budget']} | {p['run']} | "
            + " | ".join(f"{p['EL_by_seed'][s]:.3f}" if s in p["EL_by_seed"] else "–" for s in seeds)
            + f" | {p['seeds']} | {p['geometric_mean']:.3f}{interval} |"
        )
    return lines


def _granularity_reading(analysis: dict[str, Any]) -> str:
    """Which G wins, run by run and by the full law's G* = exp(−β/2γ)."""
    groups: dict[tuple[str, float], list[tuple[float, float]]] = {}
    for x in analysis["leverage"]:
        groups.setdefault((x["budget"], x["A"]), []).append((x["EL"], x["G"]))
    winners = [f"G = {max(runs)[1]:g} at {budget}" for (budget, _), runs in groups.items() if len(runs) > 1]
    text = "- Granularity: the best observed G (at the activation ratio swept over G) is " + "; ".join(winners)
    full = analysis["fits"].get("full")
    if full is not None:
        c, interval = full["constants"], full["best_granularity_interval"]
        if c["best_granularity"] is None:
            text += "; the full law finds no interior optimum (γ ≥ 0)"
        else:
            text += f"; the full law puts G* at {c['best_granularity']:.3g}" + (
                f" (95% bootstrap range {interval[0]:.3g}–{interval[1]:.3g})"
                if interval
                else " (unstable under resampling)"
            )
    return text + " (the paper finds G* ≈ 8–12 at scale)."


def _pivot(leverage: list[dict[str, Any]]) -> list[str]:
    """EL by (A, G) down the rows and budget across: how EL moves with A, G and C at a glance."""
    budgets = list(dict.fromkeys(x["budget"] for x in leverage))
    shapes = sorted({(x["A"], x["G"]) for x in leverage}, key=lambda s: (s[1], -s[0]))
    table = {(x["A"], x["G"], x["budget"]): x["EL"] for x in leverage}
    return [
        "| A | G | " + " | ".join(f"EL at {b}" for b in budgets) + " |",
        "|---|---|" + "---|" * len(budgets),
        *[
            f"| 1/{round(1 / a)} | {g:g} | "
            + " | ".join(f"{table[(a, g, b)]:.3f}" if (a, g, b) in table else "–" for b in budgets)
            + " |"
            for a, g in shapes
        ],
    ]


def verdict(analysis: dict[str, Any]) -> str:
    holdout = {s["variant"]: s for s in analysis["holdout"]}
    els = [x["EL"] for x in analysis["leverage"]]
    above = sum(el > 1 for el in els)
    parts = [f"- EL ranges {min(els):.2f}–{max(els):.2f} over the MoE runs; {above} of {len(els)} have EL > 1"]
    unbracketed = [f["budget"] for f in analysis["frontier"] if not f["bracketed"]]
    if unbracketed:
        parts.append(
            f"the dense frontier is not bracketed at {', '.join(unbracketed)} FLOPs (its best width is the "
            "narrowest or widest tried), so EL there is measured against a dense law read off the grid's edge"
        )
    if max(els) < 1:
        parts.append(
            "every MoE run loses to the best dense run of its budget, so the law's premise (EL ≥ 1, EL = 1 for a "
            "dense model) does not hold at this scale and its fitted constants describe a null result"
        )
    over_seeds = [p for p in analysis.get("seed_leverage", []) if p["seeds"] > 1]
    if over_seeds:
        parts.append(
            "over training seeds at the frontier the best MoE's EL is "
            + ", ".join(
                f"{p['geometric_mean']:.2f} [{p['ci95'][0]:.2f}, {p['ci95'][1]:.2f}] at {p['budget']} "
                f"({p['seeds']} seeds)"
                for p in over_seeds
            )
            + " (geometric mean, 95% CI)"
        )
    configurations = {s["variant"]: s for s in analysis["holdout_configurations"]}
    for scores, what in ((holdout, "budgets"), (configurations, "configurations")):
        if "full" in scores and "naive" in scores:
            law, naive = scores["full"]["rmse_log_el"], scores["naive"]["rmse_log_el"]
            best = min(scores.values(), key=lambda s: s["rmse_log_el"])
            parts.append(
                f"on held-out {what} the full law {'beats' if law < naive else 'does not beat'} the naive EL = 1/A "
                f"(RMSE ln EL {law:.3f} vs {naive:.3f}; the best is {best['variant']}, {best['rmse_log_el']:.3f})"
            )
    full = analysis["fits"].get("full")
    if full is not None:
        d_low, d_high = full["intervals"]["d"]
        parts.append(
            "EL's growth with compute (d > 0) is "
            + ("resolved" if d_low > 0 else "not resolved: the d interval includes 0 or is negative")
            + f" (d 95% CI [{d_low:.3g}, {d_high:.3g}])"
        )
    return "; ".join(parts) + ". The grid is small: treat every fitted constant as a toy-scale measurement."


def frontier_width(dense_rows: list[dict[str, Any]]) -> int:
    """The width of a budget's best dense run: its MoEs train there (an MoE off the dense frontier
    understates EL, which is how the first version of this study measured EL < 1 everywhere)."""
    return min(dense_rows, key=lambda r: r["loss"])["config"]["d"]


def seed_of(row: dict[str, Any]) -> int:
    """The training seed of a row (rows cached before seeds were recorded are seed 0)."""
    return int(row.get("seed", 0))


def grid_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The seed-0 grid: one run per configuration and budget, what the laws are fitted on."""
    return [r for r in rows if seed_of(r) == 0]


def _is_dense(row: dict[str, Any]) -> bool:
    return row["config"]["activation"] == 1


def next_width(mean_losses: dict[int, float], ladder: tuple[int, ...] = WIDTH_LADDER) -> int | None:
    """The width that would bracket the dense optimum: the next ladder width narrower than the best
    width when it is the narrowest tried, wider when it is the widest; None when the optimum is
    already bracketed or the ladder has no width beyond it."""
    best = min(mean_losses, key=mean_losses.__getitem__)
    widths = sorted(mean_losses)
    if best == widths[0] and (narrower := [w for w in ladder if w < best]):
        return max(narrower)
    if best == widths[-1] and (wider := [w for w in ladder if w > best]):
        return min(wider)
    return None


def _losses_by_seed(rows: list[dict[str, Any]], name: str, budget: str) -> dict[int, float]:
    return {seed_of(r): r["loss"] for r in rows if r["name"] == name and r["budget"] == budget}


def frontier(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per budget: the dense loss by width (mean over its seeds), the best width, its narrower and
    wider neighbours with their loss gap to it (paired over the seeds both have), whether the best
    width is bracketed (a narrower and a wider width were trained and both lose on the mean), and the
    width the MoEs trained at (the seed-0 optimum)."""
    from bench.verdicts import paired

    out = []
    for budget in dict.fromkeys(r["budget"] for r in rows):
        dense = [r for r in rows if r["budget"] == budget and _is_dense(r)]
        if not dense:
            continue
        by_width: dict[int, dict[int, float]] = {}
        for r in sorted(dense, key=_width):
            by_width.setdefault(_width(r), {})[seed_of(r)] = r["loss"]
        means = {w: statistics.fmean(v.values()) for w, v in by_width.items()}
        best = min(means, key=means.__getitem__)
        widths = sorted(means)
        at = widths.index(best)
        neighbours = {
            "narrower": widths[at - 1] if at > 0 else None,
            "wider": widths[at + 1] if at + 1 < len(widths) else None,
        }
        gaps = {}
        for side, width in neighbours.items():
            if width is None:
                continue
            common = sorted(set(by_width[width]) & set(by_width[best]))
            # d > 0: the neighbour's loss is higher, i.e. the optimum beats it.
            pair = paired(
                [by_width[width][s] for s in common], [by_width[best][s] for s in common], higher_is_better=True
            )
            low, high = pair.interval()
            gaps[side] = {"width": width, "seeds": pair.n, "mean": pair.mean, "ci95": [low, high]}
        winner = next(r for r in dense if _width(r) == best)
        moe = [r for r in rows if r["budget"] == budget and not _is_dense(r)]
        seed0 = [r for r in dense if seed_of(r) == 0]
        out.append(
            {
                "budget": budget,
                "losses": {str(w): means[w] for w in widths},
                "seeds": {str(w): sorted(by_width[w]) for w in widths},
                "best_width": best,
                "moe_width": _width(moe[0]) if moe else (frontier_width(seed0) if seed0 else None),
                "neighbours": gaps,
                "bracketed": all(w is not None for w in neighbours.values()),
                "tokens_per_param": winner["tokens"] / winner["active_params"],
            }
        )
    return out


def _width(row: dict[str, Any]) -> int:
    return row["config"]["d"]


def frontier_moe(rows: list[dict[str, Any]], budget: str) -> dict[str, Any] | None:
    """The MoE whose EL the budget's verdict uses: the best MoE shape on seed 0 (its other seeds then
    test it out of sample; seed 0, which chose it, flatters it a little)."""
    moe = [r for r in grid_rows(rows) if r["budget"] == budget and not _is_dense(r)]
    return min(moe, key=lambda r: r["loss"]) if moe else None


def _budget_flops(rows: list[dict[str, Any]]) -> dict[str, float]:
    """The compute of each budget: its first dense run's, as the dense law of the grid takes it."""
    flops: dict[str, float] = {}
    for r in rows:
        if _is_dense(r):
            flops.setdefault(r["budget"], r["flops"])
    return flops


def seed_leverage(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """EL of each budget's frontier MoE under each seed, each read off that seed's own dense law (the
    best dense run of the seed per budget): seed-to-seed variation the MoE and the dense frontier share
    cancels, as in the paired verdicts. Mean and 95% t interval on ln EL (EL is a ratio)."""
    from bench.verdicts import Paired
    from mlcore.analysis.el import fit_dense_law

    flops = _budget_flops(rows)
    laws = {}
    for seed in sorted({seed_of(r) for r in rows}):
        dense = [r for r in rows if _is_dense(r) and seed_of(r) == seed]
        try:
            laws[seed] = fit_dense_law([flops[r["budget"]] for r in dense], [r["loss"] for r in dense])
        except ValueError:
            continue  # this seed's dense runs cover fewer than two budgets so far
    out = []
    for budget in sorted({r["budget"] for r in rows}, key=float):
        moe = frontier_moe(rows, budget)
        if moe is None:
            continue
        els = {}
        for r in rows:
            if r["name"] == moe["name"] and r["budget"] == budget and seed_of(r) in laws:
                els[seed_of(r)] = float(laws[seed_of(r)].compute_for(r["loss"])) / r["flops"]
        logs = Paired(tuple(math.log(els[s]) for s in sorted(els)))
        low, high = logs.interval()
        out.append(
            {
                "budget": budget,
                "run": moe["name"],
                "EL_by_seed": {str(s): els[s] for s in sorted(els)},
                "seeds": logs.n,
                "geometric_mean": math.exp(logs.mean) if logs.n else math.nan,
                "ci95": [math.exp(low), math.exp(high)],
            }
        )
    return out


#: Card §4 expects EL > 1 (the MoE reaches a loss the dense frontier needs more compute for) and gives no
#: size at toy scale: 0.02 nats/byte of held-out loss at equal compute is the smallest effect of interest.
LOSS_EFFECT = 0.02
#: The floor of a cross-entropy: the headroom is the dense frontier's loss above it (the text's own
#: entropy rate, a tighter floor, is unknown).
LOSS_FLOOR = 0.0


def claims(rows: list[dict[str, Any]]) -> list[Any]:
    """Per budget: the frontier MoE against the best dense width (by its mean over seeds) at the same
    compute, in held-out loss, paired over the seeds both were trained under."""
    from bench.verdicts import Claim, judge

    out = []
    for point in frontier(rows):
        budget = point["budget"]
        moe = frontier_moe(rows, budget)
        if moe is None:
            continue
        dense_name = f"dense-d{point['best_width']}"
        method, baseline = _losses_by_seed(rows, moe["name"], budget), _losses_by_seed(rows, dense_name, budget)
        common = sorted(set(method) & set(baseline))
        claim = Claim(
            f"at {budget} FLOPs the best MoE beats the dense frontier (EL > 1)",
            "held-out loss (nats/byte)",
            LOSS_EFFECT,
            "card §4 expects EL > 1, no size at toy scale; 0.02 taken as the smallest effect of interest",
            higher_is_better=False,
            ceiling=LOSS_FLOOR,
            off_scale=None if point["bracketed"] else "the dense optimum sits at the edge of the width grid",
        )
        pair_rows = [r for r in rows if r["budget"] == budget and r["name"] in (moe["name"], dense_name)]
        out.append(
            judge(
                claim,
                (moe["name"], [method[s] for s in common]),
                (dense_name, [baseline[s] for s in common]),
                seconds_per_run=statistics.fmean(r["seconds"] for r in pair_rows),
            )
        )
    return out


Need = tuple[Config, str, int]  # (configuration, budget label, seed)


def needed_runs(rows: list[dict[str, Any]], spec: dict[str, Any], budgets: list[str]) -> list[Need]:
    """The runs the tier still lacks, in the order they are worth training: every budget's seed-0
    dense grid, a ladder width where its optimum sits at an edge, its MoE shapes at the seed-0 dense
    optimum, then per budget the other seeds of the verdict's pair (the frontier MoE and the dense
    optimum), then the other seeds of the optimum's neighbours. Planned again after every run: a new
    run can move the optimum and with it the frontier points."""
    have = {(r["name"], r["budget"], seed_of(r)) for r in rows}
    grid: list[Need] = []
    ladder: list[Need] = []
    shapes: list[Need] = []
    pairs: list[Need] = []
    neighbours: list[Need] = []
    extra_seeds = [s for s in spec["seeds"] if s != 0]
    for budget in budgets:
        mine = [r for r in rows if r["budget"] == budget]
        grid += [(Config(d, 1, 1), budget, 0) for d in spec["dense_widths"]]
        if any((f"dense-d{d}", budget, 0) not in have for d in spec["dense_widths"]):
            continue
        (point,) = frontier(mine)
        if (width := next_width({int(w): loss for w, loss in point["losses"].items()})) is not None:
            ladder.append((Config(width, 1, 1), budget, 0))
            continue  # the optimum is not bracketed yet: the MoE width may still move
        shapes += [(Config(point["moe_width"], a, g), budget, 0) for a, g in spec["shapes"]]
        if (moe := frontier_moe(mine, budget)) is None or len([r for r in mine if not _is_dense(r)]) < len(
            spec["shapes"]
        ):
            continue
        for seed in extra_seeds:
            pairs += [(Config(point["best_width"], 1, 1), budget, seed), (Config(**moe["config"]), budget, seed)]
        for side in point["neighbours"].values():
            neighbours += [(Config(side["width"], 1, 1), budget, seed) for seed in extra_seeds]
    out, seen = [], set()
    for need in grid + ladder + shapes + pairs + neighbours:
        key = (need[0].name, need[1], need[2])
        if key not in have and key not in seen:
            seen.add(key)
            out.append(need)
    return out


def ordered(rows: list[dict[str, Any]], shapes: tuple[tuple[float, int], ...]) -> list[dict[str, Any]]:
    """Rows in report order, whatever order the plan trained them in: by budget, then seed, the dense
    widths narrow to wide, then the MoE shapes in the tier's order."""

    def key(row: dict[str, Any]) -> tuple[float, int, int, float]:
        cfg = row["config"]
        shape = (cfg["activation"], cfg["granularity"])
        place = cfg["d"] if _is_dense(row) else (shapes.index(shape) if shape in shapes else len(shapes))
        return float(row["budget"]), seed_of(row), int(not _is_dense(row)), place

    return sorted(rows, key=key)


def cache_key(cfg: Config, budget: str, eval_windows: int, seed: int) -> str:
    """Seed 0 keeps the key the grid was cached under before seeds were added."""
    return f"{cfg.name.replace('/', '_')}_C{budget}_ev{eval_windows}" + (f"_s{seed}" if seed else "")


def report_from_cache(results: Path) -> None:
    """``python -m bench el --report``: ``el.md`` from the cached runs; nothing trains, and the planner's
    constants file is left as the last full run wrote it."""
    run("full", results, train_missing=False, write_constants=False)


def run(tier: str, results: Path, *, train_missing: bool = True, write_constants: bool = True) -> None:
    """Train (or load from the cache) the tier's runs in :func:`needed_runs` order, analyse them and
    write the results. With ``train_missing=False``, or once ``MOELAB_BENCH_BUDGET_S`` is spent, only
    cached runs are used and the report names the runs still missing."""
    import torch

    torch.set_num_threads(1)
    spec = TIERS[tier]
    train, test = _data()
    start = time.perf_counter()
    budget_s = float(os.environ.get("MOELAB_BENCH_BUDGET_S", "inf"))
    reference_active = Config(64, 1, 1).params()[1]
    flops_of = {f"{f:.3g}": f for f in (6.0 * reference_active * s * BATCH * CONTEXT for s in spec["budget_steps"])}
    budgets = list(flops_of)
    rows: list[dict[str, Any]] = []
    cached, trained, missing = 0, 0, []
    while needed := needed_runs(rows, spec, budgets):
        found = [
            (need, row) for need in needed if (row := CACHE.get(cache_key(*need[:2], spec["eval_windows"], need[2])))
        ]
        for (cfg, budget, seed), row in found:
            rows.append({**row, "budget": budget, "seed": seed})
            print(f"{cfg.name} at {budget} FLOPs, seed {seed}: loss {row['loss']:.4f} (cached)", flush=True)
        cached += len(found)
        if found:
            continue  # plan again: cached runs can move the frontier
        if not train_missing or time.perf_counter() - start > budget_s:
            missing = [f"{cfg.name} at {budget} seed {seed}" for cfg, budget, seed in needed]
            break
        cfg, budget, seed = needed[0]
        row = {**train_one(cfg, flops_of[budget], train, test, spec["eval_windows"], seed=seed), "budget": budget}
        CACHE.put(cache_key(cfg, budget, spec["eval_windows"], seed), row)
        rows.append(row)
        trained += 1
        print(f"{cfg.name} at {budget} FLOPs, seed {seed}: loss {row['loss']:.4f} ({row['seconds']:.1f} s)", flush=True)
    grid_missing = [m for m in missing if m.endswith(" seed 0")]
    rows = ordered(rows, spec["shapes"])
    analysis = analyse(rows)
    data = {
        "tier": tier,
        "seeds": list(spec["seeds"]),
        "rows": rows,
        "analysis": analysis,
        "seconds": time.perf_counter() - start,
        "training_seconds": sum(r["seconds"] for r in rows),
        "cached_runs": cached,
        "trained_runs": trained,
        "missing_runs": missing,
    }
    data["verdict"] = verdict(analysis)
    full = analysis["fits"].get("full")
    # Only the full grid ships as the planner's constants: the quick tier is a smoke run. The constants
    # come from the seed-0 grid, so seeds still missing at the frontier do not hold them back.
    if write_constants and tier == "full" and full is not None and not grid_missing:
        constants = {k: v for k, v in full["constants"].items() if k != "best_granularity"}
        widths = sorted({f["moe_width"] for f in analysis["frontier"]})
        constants["source"] = (
            f"bench-el mini-study ({tier} tier, toy byte-level LMs, MoEs at the dense frontier width "
            f"d={'/'.join(map(str, widths))}; {len(analysis['leverage'])} MoE runs): toy-scale, do not extrapolate"
        )
        compute = [x["C"] for x in analysis["leverage"]]
        bundle = {"constants": constants, "intervals": full["intervals"], "compute_range": [min(compute), max(compute)]}
        CONSTANTS.write_text(json.dumps(bundle, indent=1) + "\n")
    from bench import verdicts as rule

    found = claims(rows)
    data["verdicts"] = rule.as_json(found)
    section = rule.section("Verdicts (computed from paired intervals)", found)
    section += ["", *seed_notes(found, rows, spec["seeds"])]
    write_results(results, "el", markdown(data) + "\n" + "\n".join(section), data)


def seed_notes(found: list[Any], rows: list[dict[str, Any]], seeds: tuple[int, ...]) -> list[str]:
    """How many seeds each verdict rests on, and the difference on the seeds that did not choose the MoE."""
    counts = ", ".join(f"{v.pairs.n} at {v.claim.statement.split()[1]}" for v in found)
    target = len(seeds)
    short = [v for v in found if v.pairs.n < target]
    fresh = []
    for v in found:
        budget = v.claim.statement.split()[1]
        method, baseline = _losses_by_seed(rows, v.method, budget), _losses_by_seed(rows, v.baseline, budget)
        # Lower loss is better: d > 0 means the MoE is better, as in the verdict table.
        diffs = [baseline[s] - method[s] for s in sorted(set(method) & set(baseline)) if s != 0]
        if diffs:
            fresh.append(f"{statistics.fmean(diffs):+.3f} at {budget} ({len(diffs)} seeds)")
    return [
        f"- Seeds: paired seeds per verdict (budget in FLOPs): {counts}; the tier asks for {target}"
        + (
            f" and {len(short)} verdict(s) have fewer (rerun the tier to resume from bench/cache/el.jsonl)."
            if short
            else "."
        ),
        "- The frontier MoE of each budget is its best shape on seed 0, and seed 0 is one of the pairs, so the mean "
        "difference flatters the MoE a little (selection among the shapes)"
        + (
            "; on the other seeds alone, which test it out of sample, the mean difference is " + ", ".join(fresh)
            if fresh
            else ""
        )
        + ". The laws and their bootstrap intervals are fitted on the seed-0 grid: they are intervals over runs, "
        "not seeds.",
    ]
