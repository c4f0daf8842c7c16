"""``python -m mlcore.bench routing``: how inputs are routed to experts (issue 11).

1. **LD-MoLE** (method card ``ld-mole.md``, section 4): the zoo's frozen ``lora-base-tiny``
   fine-tuned on the majority-of-high-digits task at levels d = 2…6 with LoRA (one adapter of
   rank E·r) against top-1 / top-2 MoLE, ReLU routing and LD-MoLE at matched adapter parameters
   (E = 8 experts of rank 4); the full tier adds fixed sparsemax (λ = 0) and LD-MoLE without its
   sparsity loss. Accuracy per level, active experts per token, zero-expert rate.
2. **RoMA** (card ``roma.md``, section 4): a tiny MoE classifier (4 MoE layers, 8 experts, top-2)
   pre-trained on a multi-task set whose task is implicit; base, CE-only router tuning, RoMA,
   C3PO-lite and the per-sample oracle on an i.i.d. and a shifted split; fraction of the oracle
   gap closed; k-NN overlap of embedding and routing spaces.
3. **Graph OOD** (issue 11's third method): the section :mod:`mlcore.bench.graph_ood` provides,
   appended when that module is present.

Three seeds. Every finished configuration is cached as JSON under ``bench/cache/routing/`` so an
interrupted run resumes. CPU seconds (process time) are reported beside wall time because the
benchmark machine is shared.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from mlcore.bench.common import write_results

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "bench" / "cache" / "routing"
SEEDS = (0, 1, 2)
TIERS: dict[str, dict[str, Any]] = {
    "quick": {
        "routings": ("lora", "top1", "top2", "relu", "ld-mole"),
        "lora": {"steps": 120, "batch_size": 32, "train_examples": 2000, "eval_examples": 1000},
        "pretrain_steps": 250,
        "roma": {"train_examples": 800, "test_examples": 400, "oracle_steps": 20},
        "embeddings": ("hidden-mean",),
    },
    "full": {
        "routings": ("lora", "top1", "top2", "relu", "sparsemax", "ld-mole", "ld-mole-nosparsity"),
        "lora": {"steps": 400, "batch_size": 64, "train_examples": 4000, "eval_examples": 2000},
        "pretrain_steps": 250,
        "roma": {"train_examples": 1500, "test_examples": 600, "oracle_steps": 30},
        "embeddings": ("hidden-mean", "tfidf-svd"),
    },
}


def _cached(key: str, compute: Any) -> dict[str, Any]:
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"{key}.json"
    if path.exists():
        return json.loads(path.read_text())
    started, cpu = time.perf_counter(), time.process_time()
    value = compute()
    value["wall_seconds"], value["cpu_seconds"] = time.perf_counter() - started, time.process_time() - cpu
    path.write_text(json.dumps(value, indent=1))
    return value


def _mean_sd(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.3f}" if values else "–"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


# -- LD-MoLE -----------------------------------------------------------------------------------
def lora_section(tier: str) -> tuple[str, dict[str, Any]]:
    import torch

    from mlcore.lora.base import TinyEncoder
    from mlcore.lora.mixture import MixtureConfig
    from mlcore.lora.pipeline import FinetuneConfig, finetune
    from mlcore.lora.zoo import CHECKPOINT

    settings = TIERS[tier]
    torch.set_num_threads(1)
    base = TinyEncoder.load(CHECKPOINT)
    runs: dict[str, list[dict[str, Any]]] = {}
    for routing in settings["routings"]:
        for seed in SEEDS:
            config = FinetuneConfig(**settings["lora"], seed=seed)
            key = f"lora-{routing}-s{config.steps}-b{config.batch_size}-n{config.train_examples}-seed{seed}"

            def compute(routing: str = routing, config: FinetuneConfig = config) -> dict[str, Any]:
                result = finetune(base, MixtureConfig(routing=routing, experts=8, rank=4), config)
                return {"metrics": result.metrics(), "histogram": result.active_histogram}

            runs.setdefault(routing, []).append(_cached(key, compute))
            print(f"lora {routing} seed {seed}: {runs[routing][-1]['metrics']['accuracy']:.3f}", flush=True)
    levels = [2, 3, 4, 5, 6]
    lines = [
        "## LD-MoLE: mixtures of LoRA experts on a frozen base",
        "",
        f"Frozen `lora-base-tiny`; majority task at levels d = 2…6; {settings['lora']['steps']} steps of batch "
        f"{settings['lora']['batch_size']}; 8 experts of rank 4 (LoRA: one adapter of rank 32); seeds {list(SEEDS)}; "
        "mean ± sd over seeds.",
        "",
        "| routing | trainable params | accuracy | "
        + " | ".join(f"d={d}" for d in levels)
        + " | active experts / token | ≤ 2 active | zero-expert rate | CPU s / run |",
        "|---|---|---|" + "---|" * len(levels) + "---|---|---|---|",
    ]
    data: dict[str, Any] = {}
    for routing, results in runs.items():
        m = [r["metrics"] for r in results]
        row = {
            key: [x[key] for x in m]
            for key in ("accuracy", "mean_active_experts", "zero_expert_rate", "at_most_two_rate")
        }
        row.update({f"accuracy_d{d}": [x[f"accuracy_d{d}"] for x in m] for d in levels})
        row["trainable_parameters"] = int(m[0]["trainable_parameters"])
        row["cpu_seconds"] = statistics.mean(r["cpu_seconds"] for r in results)
        data[routing] = row
        lines.append(
            f"| {routing} | {row['trainable_parameters']:,} | {_mean_sd(row['accuracy'])} | "
            + " | ".join(f"{statistics.mean(row[f'accuracy_d{d}']):.3f}" for d in levels)
            + f" | {statistics.mean(row['mean_active_experts']):.2f} | {statistics.mean(row['at_most_two_rate']):.3f}"
            f" | {statistics.mean(row['zero_expert_rate']):.3f} | {row['cpu_seconds']:.0f} |"
        )
    lines += ["", _lora_verdict(data)]
    return "\n".join(lines), data


def _lora_verdict(data: dict[str, Any]) -> str:
    if "ld-mole" not in data:
        return ""
    ld = statistics.mean(data["ld-mole"]["accuracy"])
    tops = {r: statistics.mean(data[r]["accuracy"]) for r in ("top1", "top2") if r in data}
    best_top = max(tops.values()) if tops else float("nan")
    claim = "reproduces" if ld >= best_top else "does **not** reproduce"
    parts = [
        f"LD-MoLE {ld:.3f} vs best fixed top-k {best_top:.3f}: the accuracy claim (LD-MoLE ≥ top-k at matched "
        f"parameters) {claim} here.",
        f"LD-MoLE's zero-expert rate is {statistics.mean(data['ld-mole']['zero_expert_rate']):.3f} and "
        f"{statistics.mean(data['ld-mole']['at_most_two_rate']):.1%} of (token, projection) pairs use ≤ 2 experts, "
        f"{statistics.mean(data['ld-mole']['mean_active_experts']):.2f} on average.",
    ]
    if "relu" in data:
        parts.append(
            f"ReLU routing leaves {statistics.mean(data['relu']['zero_expert_rate']):.1%} of pairs with no expert."
        )
    return " ".join(parts)


# -- RoMA --------------------------------------------------------------------------------------
def roma_section(tier: str) -> tuple[str, dict[str, Any]]:
    import torch

    from mlcore.routing.model import MoEClassifierConfig
    from mlcore.routing.roma import AlignConfig, StudyConfig, pretrain_moe, run_study

    settings = TIERS[tier]
    torch.set_num_threads(1)
    studies: dict[str, list[dict[str, Any]]] = {}
    bases: dict[int, Any] = {}
    for embedding in settings["embeddings"]:
        for seed in SEEDS:
            config = StudyConfig(**settings["roma"], embedding=embedding, align=AlignConfig(seed=seed), seed=seed)
            key = f"roma-{embedding}-p{settings['pretrain_steps']}-n{config.train_examples}-seed{seed}"

            def compute(config: StudyConfig = config, seed: int = seed) -> dict[str, Any]:
                if seed not in bases:
                    bases[seed] = pretrain_moe(MoEClassifierConfig(), steps=settings["pretrain_steps"], seed=seed)
                out = run_study(bases[seed], config)
                out.pop("models")
                out["regulariser_first_last"] = [out["regulariser"][0], out["regulariser"][-1]]
                out.pop("regulariser")
                return out

            studies.setdefault(embedding, []).append(_cached(key, compute))
            print(f"roma {embedding} seed {seed}: {studies[embedding][-1]['iid']['accuracy']}", flush=True)
    methods = ("base", "ce_only", "roma", "c3po_lite", "oracle")
    lines = [
        "## RoMA: router alignment on a multi-task MoE",
        "",
        "Tiny MoE classifier (4 MoE layers, 8 experts, top-2) pre-trained "
        f"{settings['pretrain_steps']} steps on first / last / max / (first+last) mod 10 with the task given only "
        "by a marker synonym at a random position; routers of the last 2 layers tuned (k = 5, σ = 0.4, λ = 0.8, "
        "3 epochs); oracle = per-sample routing optimised on the sample's own label. Mean ± sd over seeds.",
        "",
    ]
    data: dict[str, Any] = {}
    for embedding, results in studies.items():
        for split in ("iid", "shifted"):
            lines += [
                f"**{split}** split, `{embedding}` embedding:",
                "",
                "| method | accuracy | oracle gap closed | k-NN overlap (emb. vs routing) |",
                "|---|---|---|---|",
            ]
            for method in methods:
                acc = [r[split]["accuracy"][method] for r in results]
                gap = (
                    [r[split]["gap_closed"][method] for r in results]
                    if method in results[0][split]["gap_closed"]
                    else []
                )
                overlap = (
                    [r[split]["knn_overlap"][method] for r in results]
                    if method in results[0][split]["knn_overlap"]
                    else []
                )
                data.setdefault(embedding, {}).setdefault(split, {})[method] = {
                    "accuracy": acc,
                    "gap_closed": gap,
                    "knn_overlap": overlap,
                }
                lines.append(
                    f"| {method} | {_mean_sd(acc)} | {_mean_sd(gap) if gap else '–'} | "
                    f"{_mean_sd(overlap) if overlap else '–'} |"
                )
            lines.append("")
        first = results[0]["regulariser_first_last"]
        lines.append(
            f"Regulariser (live routers), seed 0: {first[0]:.4f} at the first step → {first[1]:.4f} at the last."
        )
        lines.append("")
    lines.append(_roma_verdict(data))
    return "\n".join(lines), data


def _roma_verdict(data: dict[str, Any]) -> str:
    parts = []
    for embedding, splits in data.items():
        d = splits["iid"]
        base, roma, ce, oracle = (statistics.mean(d[m]["accuracy"]) for m in ("base", "roma", "ce_only", "oracle"))
        claim = "reproduces" if roma > ce >= base - 1e-9 and roma > base else "does **not** reproduce"
        parts.append(
            f"`{embedding}`, i.i.d.: oracle gap {100 * (oracle - base):.1f} points (paper: 10–20); RoMA {roma:.3f} vs "
            f"CE-only {ce:.3f} vs base {base:.3f}: the claim (RoMA > CE-only ≥ base) {claim}."
        )
    return " ".join(parts)


# -- the benchmark -----------------------------------------------------------------------------
def run(tier: str, results: Path) -> None:
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {tuple(TIERS)}, got {tier!r}")
    started = time.perf_counter()
    sections, data = [f"# Routing methods (issue 11), {tier} tier", ""], {"tier": tier, "seeds": list(SEEDS)}
    for name, build in (("ld_mole", lora_section), ("roma", roma_section)):
        markdown, section_data = build(tier)
        sections += [markdown, ""]
        data[name] = section_data
    try:
        from mlcore.bench.graph_ood import section  # R2's section; optional
    except ImportError:
        sections += ["## Graph OOD", "", "_mlcore.bench.graph_ood is not available in this checkout._", ""]
    else:
        markdown, section_data = section(tier)
        sections += [markdown, ""]
        data["graph_ood"] = section_data
    data["wall_seconds"] = time.perf_counter() - started
    sections.append(f"Wall time {data['wall_seconds']:.0f} s (cached configurations are not re-run).")
    write_results(results, "routing", "\n".join(sections), data)
