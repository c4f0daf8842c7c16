"""``make bench-distill``: AMiD against classic distillation losses (Shin et al., ICLR 2026, scaled down).

Teacher: the zoo's ``moe-lm-tiny`` (Qwen3-MoE, 6.8M parameters, trained on Shakespeare, Python docs
and source). Student: a dense Qwen3 of width 32, 2 layers (86k parameters, ~80× smaller), trained
from scratch on windows of the ``stdlib-docs`` train split; metrics on its test split. Only the loss
differs between configurations (same data order, initialisation per seed, lr and schedule):
FKL, RKL, skew KL (α = −1, λ = 0.1), TAID-like (α = 1, λ 0.4 → 1, q detached), ABKD, and AMiD
(D_AB(p‖r), (a, b) = (0.2, 0.7)) over α and λ, including the ends α = −1 and α = 1 so the
card's claim (an intermediate α beats both ends at fixed λ) can be checked. Each configuration
also runs under bf16 autocast. Every finished run is a row of ``bench/cache/distill.jsonl``
so an interrupted study resumes.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from bench.cache import Store
from bench.common import write_results

ROOT = Path(__file__).resolve().parents[1]
CACHE = Store.named("distill")
TEACHER, SOURCE, SEQ_LEN, LR = "moe-lm-tiny", "stdlib-docs", 64, 5e-3
REPORTED = ("forward_kl", "reverse_kl", "top1_agreement", "student_ppl", "sample_teacher_nll", "distinct_2")


@dataclass(frozen=True)
class Config:
    loss: str  # a preset of mlcore.distill.amid.PRESETS, or "amid-kl": AMiD's assistant with forward KL
    alpha: float | None = None  # AMiD only
    lam: float | None = None  # AMiD only
    bf16: bool = False
    seed: int = 0
    temperature: float = 1.0  # < 1: the teacher's logits are sharpened (a peaked teacher)

    @property
    def mixture(self) -> bool:
        return self.loss in ("amid", "amid-kl")

    @property
    def method(self) -> str:
        name = f"{self.loss} α={self.alpha:g} λ={self.lam:g}" if self.mixture else self.loss
        return name if self.temperature == 1.0 else f"{name}, peaked teacher τ={self.temperature:g}"

    @property
    def name(self) -> str:
        tail = f"-a{self.alpha:g}-l{self.lam:g}" if self.mixture else ""
        peaked = f"-t{self.temperature:g}" if self.temperature != 1.0 else ""
        return f"{self.loss}{tail}{peaked}-{'bf16' if self.bf16 else 'fp32'}-s{self.seed}"

    def loss_config(self) -> Any:
        from mlcore.distill.amid import PRESETS, amid_config

        if self.loss == "amid-kl":
            return amid_config(self.alpha, self.lam, divergence="kl")
        return amid_config(self.alpha, self.lam) if self.loss == "amid" else PRESETS[self.loss]


BASELINES = ("fkl", "rkl", "skew-kl", "taid", "abkd")
#: AMiD's assistant with forward KL instead of the α-β divergence: separates the two ingredients.
KL_ALPHAS = (-1.0, 0.5, 1.0)
#: The peaked-teacher study: logits sharpened by 1/τ, many near-zero probabilities (card §4, "stability").
PEAKED = tuple(Config(loss, temperature=0.25) for loss in ("fkl", "rkl", "skew-kl", "taid")) + tuple(
    Config("amid", a, 0.5, temperature=0.25) for a in (-0.5, 0.0, 0.5)
)


def _grid(
    alphas: tuple[float, ...], lams: tuple[float, ...], bf16_losses: tuple[str, ...] | None, seeds: int, *, peaked: bool
) -> tuple[Config, ...]:
    fp32 = [Config(loss) for loss in BASELINES] + [Config("amid", a, lam) for lam in lams for a in alphas]
    fp32 += [Config("amid-kl", a, 0.5) for a in KL_ALPHAS] + (list(PEAKED) if peaked else [])
    bf16 = [replace(c, bf16=True) for c in fp32 if bf16_losses is None or c.method in bf16_losses]
    # Every seed of the fp32 grid before any bf16 run: a study stopped by its budget still has seeds to compare.
    return tuple(replace(c, seed=s) for group in (fp32, bf16) for s in range(seeds) for c in group)


TIERS: dict[str, dict[str, Any]] = {
    # ~4 minutes on 2 shared cores: one seed, 200 steps, λ = 0.5 only, bf16 for four losses.
    "quick": {
        "configs": _grid(
            (-1.0, -0.5, 0.0, 0.5, 1.0), (0.5,), ("fkl", "skew-kl", "taid", "amid α=0.5 λ=0.5"), 1, peaked=False
        ),
        "steps": 200,
        "train_windows": 256,
        "eval_windows": 64,
    },
    # The grid (AMiD α ∈ {−0.5, 0, 0.5} × λ ∈ {0.1, 0.5, 0.9}, plus the α = ±1 ends) and the peaked-teacher
    # study, × 3 seeds × fp32/bf16.
    "full": {
        "configs": _grid((-1.0, -0.5, 0.0, 0.5, 1.0), (0.1, 0.5, 0.9), None, 3, peaked=True),
        "steps": 400,
        "train_windows": 512,
        "eval_windows": 128,
    },
}


def _setup(tier: dict[str, Any]) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from mlcore.data.textset import source_splits
    from mlcore.distill.pipeline import TeacherLogits, student_config
    from mlcore.eval.perplexity import heldout_windows
    from mlcore.hf import load_model
    from mlcore.zoo.committed import committed

    folder = committed(TEACHER)
    teacher = load_model(folder).requires_grad_(False)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)

    def windows(split: str, count: int) -> Any:
        return heldout_windows(tokenizer, source_splits((SOURCE,), split)[SOURCE], length=SEQ_LEN, max_windows=count)

    train = windows("train", tier["train_windows"])
    return {
        "teachers": {1.0: (teacher, TeacherLogits(teacher, train))},
        "train": train,
        "heldout": windows("test", tier["eval_windows"]),
        "student": student_config(teacher.config, hidden=32, layers=2, intermediate=64, heads=2),
    }


def _teacher(setup: dict[str, Any], temperature: float) -> tuple[Any, Any]:
    """The teacher at ``temperature`` and its logits of the training pool, built once per temperature."""
    from mlcore.distill.pipeline import SharpenedTeacher, TeacherLogits

    teachers = setup["teachers"]
    if temperature not in teachers:
        sharpened = SharpenedTeacher(teachers[1.0][0], temperature)
        teachers[temperature] = (sharpened, TeacherLogits(sharpened, setup["train"]))
    return teachers[temperature]


def run_config(cfg: Config, setup: dict[str, Any], steps: int) -> dict[str, Any]:
    from mlcore.distill.pipeline import TrainConfig, build_student, distill, parameter_count, sample_quality

    loss = cfg.loss_config()
    teacher, targets = _teacher(setup, cfg.temperature)
    student = build_student(setup["student"], seed=cfg.seed)
    start = time.perf_counter()
    result = distill(
        teacher,
        student,
        setup["train"],
        setup["heldout"],
        loss,
        TrainConfig(steps=steps, lr=LR, bf16=cfg.bf16, eval_every=0, seed=cfg.seed),
        targets=targets,
    )
    seconds = time.perf_counter() - start
    prompts = setup["heldout"][:32, :16]
    samples = sample_quality(teacher, student, prompts, new_tokens=32, seed=cfg.seed)
    return {
        "config": asdict(cfg),
        "loss": loss.describe(),
        "metrics": {**result.metrics, **samples},
        "seconds": seconds,
        "student_parameters": parameter_count(student),
        "teacher_parameters": parameter_count(teacher),
    }


def _summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, bool], list[dict[str, Any]]] = {}
    for row in rows:
        cfg = Config(**row["config"])
        groups.setdefault((cfg.method, cfg.bf16), []).append(row)
    out = []
    for (method, bf16), members in groups.items():
        entry: dict[str, Any] = {"method": method, "precision": "bf16" if bf16 else "fp32", "seeds": len(members)}
        for key in (*REPORTED, "grad_norm_std", "nonfinite_loss_steps", "nonfinite_grad_steps"):
            values = [m["metrics"][key] for m in members]
            entry[key] = statistics.fmean(values)
            entry[f"{key}_sd"] = statistics.pstdev(values) if len(values) > 1 else 0.0
        entry["seconds"] = statistics.fmean(m["seconds"] for m in members)
        out.append(entry)
    return out


#: Card §4 expects an intermediate α to beat both ends at fixed λ and gives no size (card §1: read the
#: paper's Table 1 before quoting): 0.05 nats of held-out FKL is taken as the smallest effect of interest.
ALPHA_EFFECT = 0.05
ALPHA_OFF_SCALE = (
    f"every loss at one learning rate ({LR:g}); the card's defaults are 1e-4–5e-4, and a comparison of losses "
    "needs the same small learning-rate grid for each"
)


def claims(rows: list[dict[str, Any]]) -> list[Any]:
    """Per family and λ (fp32): the best intermediate α against the better end (α = −1 or α = 1) on held-out
    FKL, paired by seed, judged by ``bench.verdicts``."""
    from bench.verdicts import Claim, judge

    curves: dict[tuple[str, float], dict[float, dict[int, dict[str, Any]]]] = {}
    for row in rows:
        cfg = Config(**row["config"])
        if cfg.mixture and not cfg.bf16 and cfg.temperature == 1.0:
            curves.setdefault((cfg.loss, cfg.lam), {}).setdefault(cfg.alpha, {})[cfg.seed] = row
    verdicts = []
    for (family, lam), at in sorted(curves.items()):
        inner = [a for a in at if -1.0 < a < 1.0]
        if -1.0 not in at or 1.0 not in at or not inner:
            continue
        seeds = sorted(set.intersection(*(set(v) for v in at.values())))

        def fkl(alpha: float, seeds: list[int] = seeds, at: dict[float, Any] = at) -> list[float]:
            return [at[alpha][s]["metrics"]["forward_kl"] for s in seeds]

        best = min(inner, key=lambda a: statistics.fmean(fkl(a)))
        end = min((-1.0, 1.0), key=lambda a: statistics.fmean(fkl(a)))
        claim = Claim(
            f"{family}, λ = {lam:g}: an intermediate α beats both ends",
            "held-out FKL (nats)",
            ALPHA_EFFECT,
            "card §4 gives an order, no size; 0.05 nats taken as the smallest effect of interest",
            higher_is_better=False,
            ceiling=0.0,
            off_scale=ALPHA_OFF_SCALE,
        )
        seconds = statistics.fmean(at[a][s]["seconds"] for a in (best, end) for s in seeds)
        verdicts.append(judge(claim, (f"α = {best:g}", fkl(best)), (f"α = {end:g}", fkl(end)), seconds_per_run=seconds))
    return verdicts


def _stability_note(rows: list[dict[str, Any]]) -> list[str]:
    peaked = [r for r in rows if r["config"].get("temperature", 1.0) != 1.0]
    if not peaked:
        return []
    seconds = statistics.fmean(r["seconds"] for r in peaked)
    fired = sum(r["metrics"]["nonfinite_loss_steps"] + r["metrics"]["nonfinite_grad_steps"] for r in rows)
    return [
        "",
        "- AMiD is more stable with a peaked teacher (card §4): **inconclusive at this scale**. The stability measure "
        f"here cannot fire: non-finite steps total {fired:g} over {len(rows)} runs, because the losses clamp log "
        "probabilities to a finite floor (card §2, step 1), so neither bf16 nor a peaked teacher can produce one. "
        "Would settle it: a measure that can fire (gradient-norm spikes above a fixed multiple of the run's median, "
        "divergence counts with the floor off, fp16 runs) on the same learning-rate grid for every loss; measured "
        f"cost about {seconds:.0f} s per peaked-teacher run, so 3 seeds × 7 losses × 3 learning rates ≈ "
        f"{3 * 7 * 3 * seconds / 60:.0f} min.",
    ]


def _markdown(tier: str, spec: dict[str, Any], summary: list[dict[str, Any]], rows: list[dict[str, Any]]) -> str:
    first = rows[0]
    seeds = max(s["seeds"] for s in summary)
    lines = [
        f"# Distillation: AMiD vs classic KD losses ({tier} tier)",
        "",
        f"Teacher zoo:{TEACHER} ({first['teacher_parameters']:,} parameters) → dense Qwen3 student "
        f"({first['student_parameters']:,}), trained from scratch for {spec['steps']} steps (batch 8, "
        f"{spec['train_windows']} windows of {SEQ_LEN} tokens of {SOURCE}, AdamW lr {LR:g} cosine, clip 1.0); "
        f"held-out metrics on {spec['eval_windows']} test windows; {seeds} seed(s), mean ± sd over seeds. "
        "FKL = KL(p‖q), RKL = KL(q‖p) per token (nats; lower is better); top-1 = argmax agreement; "
        "sample NLL = the teacher's NLL of 32 student-sampled tokens after 16-token prompts; "
        "‖g‖ sd = standard deviation of the pre-clip gradient norm; non-finite = skipped steps. "
        "amid-kl = AMiD's assistant with forward KL(p‖r) instead of the α-β divergence. Rows marked 'peaked "
        "teacher τ' distil from the teacher's logits / τ and measure KL to that sharpened teacher.",
        "",
    ]
    if tier == "quick":
        lines += [
            "**Quick tier: reduced grid (λ = 0.5 only, one seed, 200 steps, bf16 for four losses, no peaked "
            "teacher).** "
            "Differences smaller than the full tier's seed spread are not evidence either way.",
            "",
        ]
    lines += [
        "| method | precision | FKL | RKL | top-1 | student ppl | sample NLL | distinct-2 | ‖g‖ sd | non-finite | s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def cell(s: dict[str, Any], key: str, digits: int) -> str:
        sd = f" ± {s[key + '_sd']:.{digits}f}" if s["seeds"] > 1 else ""
        return f"{s[key]:.{digits}f}{sd}"

    for s in sorted(summary, key=lambda s: (s["precision"], "peaked" in s["method"], s["forward_kl"])):
        nonfinite = s["nonfinite_loss_steps"] + s["nonfinite_grad_steps"]
        lines.append(
            f"| {s['method']} | {s['precision']} | {cell(s, 'forward_kl', 4)} | {cell(s, 'reverse_kl', 4)} | "
            f"{cell(s, 'top1_agreement', 3)} | {cell(s, 'student_ppl', 1)} | {cell(s, 'sample_teacher_nll', 3)} | "
            f"{cell(s, 'distinct_2', 3)} | {cell(s, 'grad_norm_std', 3)} | {nonfinite:g} | {s['seconds']:.1f} |"
        )
    from bench import verdicts as rule

    found = claims(rows)
    lines += [""]
    if found:
        lines += rule.section("The card's claims (fp32, held-out FKL; computed from paired intervals)", found)
    else:
        lines += ["## The card's claims", "", "- not measurable in this tier (needs α = −1 and α = 1 at the same λ)."]
    lines += _stability_note(rows)
    return "\n".join(lines)


def report_from_cache(results: Path) -> None:
    """Rebuild ``distill.md`` from the cached full-tier runs; nothing is trained."""
    run("full", results, compute=False)


def run(tier: str, results: Path, *, compute: bool = True) -> None:
    import torch

    torch.set_num_threads(1)  # the machine's cores are shared with other engineers
    spec = TIERS[tier]
    setup: dict[str, Any] | None = None
    rows = []
    # MOELAB_BENCH_BUDGET_S stops new configurations (finished ones are cached) and reports what is done.
    deadline = time.perf_counter() + float(os.environ.get("MOELAB_BENCH_BUDGET_S", "inf"))
    for index, cfg in enumerate(spec["configs"]):
        key = f"{tier}/{cfg.name}"
        if (found := CACHE.get(key)) is not None:
            rows.append(found)
            continue
        if not compute or time.perf_counter() > deadline:
            continue
        setup = setup or _setup(spec)
        row = run_config(cfg, setup, spec["steps"])
        CACHE.put(key, row)
        rows.append(row)
        m = row["metrics"]
        print(
            f"[{index + 1}/{len(spec['configs'])}] {cfg.name}: FKL {m['forward_kl']:.4f} RKL {m['reverse_kl']:.4f} "
            f"top-1 {m['top1_agreement']:.3f} ({row['seconds']:.1f} s)",
            flush=True,
        )
    summary = _summary(rows)
    finite = all(math.isfinite(s["forward_kl"]) for s in summary)
    complete = len(rows) == len(spec["configs"])
    data = {
        "tier": tier,
        "steps": spec["steps"],
        "lr": LR,
        "summary": summary,
        "runs": rows,
        "all_finite": finite,
        "complete": complete,
        "verdicts": [],
    }
    body = _markdown(tier, spec, summary, rows)
    from bench.verdicts import as_json

    data["verdicts"] = as_json(claims(rows))
    if not complete:
        body += (
            f"\n**Partial study**: {len(rows)} of {len(spec['configs'])} configurations finished "
            "(MOELAB_BENCH_BUDGET_S stopped new ones); run `make bench-distill FULL=1` again to resume from "
            "bench/cache/distill.jsonl.\n"
        )
    write_results(results, "distill", body, data)
