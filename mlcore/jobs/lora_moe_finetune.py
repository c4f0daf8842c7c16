"""``lora-moe-finetune``: fine-tune a frozen base model with a mixture of LoRA experts (LD-MoLE).

The base is a tiny encoder: the zoo's ``lora-base-tiny``, a library copy or an uploaded checkpoint
archive. The task data are the built-in digit tasks of graded difficulty (:mod:`mlcore.lora_moe.tasks`)
or an uploaded labelled JSONL/CSV file (:mod:`mlcore.lora_moe.labelled`; digits as text, optional
level groups), validated before training. Routing is LoRA (one
adapter of rank E·r), top-1 / top-2 softmax, ReLU, fixed sparsemax or LD-MoLE with or without its
sparsity loss. Reports accuracy overall and per difficulty, active experts per token × projection
(heatmap), their histogram and the zero-expert rate.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlcore.charts import bar_chart, heatmap, step_lines
from mlcore.jobs import (
    Choice,
    Comparison,
    Estimate,
    File,
    Float,
    Int,
    JobContext,
    JobError,
    JobSpec,
    Metric,
    Model,
    Multi,
    Numbers,
    Seed,
)
from mlcore.jobs.binding import bind
from mlcore.jobs.spec import InputCheck

if TYPE_CHECKING:
    from mlcore.lora_moe.mixture import MixtureConfig
    from mlcore.lora_moe.pipeline import FinetuneConfig

ROUTINGS = ("lora", "top1", "top2", "relu", "sparsemax", "ld-mole", "ld-mole-nosparsity", "hydra", "mola")
PROJECTIONS = ("q", "k", "v", "o", "up", "down")
#: The parameters of the LoRA mixture and of the fine-tuning run; ``model`` is the job's own.
MIXTURE_PARAMS = (
    "routing",
    "experts",
    "rank",
    "alpha",
    "projections",
    "sparsity_k",
    "sparsity_weight",
    "balance_weight",
    "l1_weight",
)
FINETUNE_PARAMS = ("task", "levels", "steps", "batch_size", "lr", "train_examples", "eval_examples", "seed")


def _validate(p: dict[str, Any]) -> list[tuple[str, str]]:
    errors = []
    if p["routing"] == "top2" and p["experts"] < 2:
        errors.append(("experts", "Top-2 routing needs at least 2 experts."))
    if p["routing"] == "mola" and p["experts"] < 2:
        errors.append(("experts", "MoLA routes each token to its top 2 experts, so it needs at least 2 per layer."))
    if p["routing"] == "ld-mole" and p["sparsity_k"] >= p["experts"]:
        errors.append(("sparsity_k", f"Must be below the number of experts ({p['experts']})."))
    if not p["projections"]:
        errors.append(("projections", "Pick at least one projection to adapt."))
    if any(not 1 <= d <= 8 for d in p["levels"]):
        errors.append(("levels", "Difficulty levels are numbers of digits, between 1 and 8."))
    return errors


BUILTIN_TASK = {"task": "majority", "levels": [2, 3, 4, 5, 6]}


def _check_inputs(p: dict[str, Any], uploaded: frozenset[str]) -> InputCheck:
    """An uploaded task file replaces the built-in task and its levels: refuse a changed task or levels
    beside it, which the job would otherwise ignore without a word."""
    if "task_file" not in uploaded:
        return InputCheck()
    errors = [
        (
            name,
            f"An uploaded task file replaces the built-in task and its levels; leave {name} at its default "
            "or remove the file.",
        )
        for name, default in BUILTIN_TASK.items()
        if p[name] != default
    ]
    return InputCheck(errors=errors)


def _estimate(p: dict[str, Any]) -> Estimate:
    # Tiny model: memory is dominated by the [tokens, experts, rank] activations of each projection.
    per_step = p["batch_size"] * 9 * p["experts"] * p["rank"] * 4 * 12 * 4
    return Estimate(memory_bytes=512 * 2**20 + per_step, seconds=0.05 * p["steps"] * max(1, p["experts"] // 4))


GUIDE = """\
### How to read this

**What ran.** The frozen base model got a mixture of LoRA experts on every chosen projection
(q, k, v, o, up, down; a language model's fused MoE experts are not linear maps, so there only its
attention projections and dense MLPs): y = W·x + Σᵢ pᵢ(x)·(α/r)·BᵢAᵢx. Only the experts, the routers
(and LD-MoLE's shared λ network) and a classification head trained. The built-in task asks about the
first *d* digits of 8 (the first token says which *d*); larger *d* is harder. An uploaded task file
replaces it (its groups replace the levels).

**What you can bring.** A base model: a library tiny-encoder or hf-moe-lm, or an uploaded zip or
tar(.gz) of its checkpoint folder (a tiny encoder's config.json + model.safetensors, or a Hugging
Face MoE LM's config, safetensors weights and tokenizer), which replaces the model picked above
(only the upload is read and recorded). A task file, UTF-8: JSONL `{"text": ..., "label": ...}` or
CSV/TSV with a `text,label` header, optionally with `split` (train/test), `group` and `id` columns; a
byte-order mark and Windows line ends are fine. Without a split column, rows go to train or test (4 : 1)
by a hash of their `id`, else of their text, so the same rows split identically as JSONL or CSV.

**Charts.**
- *Accuracy by difficulty*: held-out accuracy per level *d* (or uploaded group). Built-in chance is about 50 %.
- *Active experts per token × projection*: the mean number of experts each token position used
  in each adapted projection. Top-k routings are flat by construction; LD-MoLE's count should vary by
  token and layer. ReLU routing can show cells below 1: tokens that used no expert at all.
- *Active-expert histogram*: how many (token, projection) pairs used 0, 1, 2, … experts.
  The zero-expert rate is the bar at 0: LD-MoLE and sparsemax never have one; ReLU routing can.
- *Training loss*: cross-entropy plus the routing's auxiliary loss.

**The paper.** Zhuang et al., *LD-MoLE: Learnable Dynamic Routing for Mixture of LoRA Experts*
(ICLR 2026): p = sparsemax(u/(1−λ)), λ = 0.99 + log σ(f(x)) predicted per token by one shared MLP,
so each token in each layer gets its own expert count (never zero), and an analytical sparsity loss
(λ ≥ 1 − (U_k − k·u₍ₖ₊₁₎) ⇔ at most k experts) keeps the count small. It reports the best average
over mixture-of-LoRA baselines on Qwen3-1.7B and Llama-3.2-3B.

**What good looks like.** LD-MoLE at least as accurate as top-k at matched trainable parameters,
counts that vary across tokens and layers, most tokens at ≤ 2 experts with the sparsity loss, and
a zero-expert rate of 0. Our benchmark on the card's parity task (`bench/results/ld-mole.md`, 5 seeds,
with HydraLoRA and MoLA) finds the accuracy claim **not reproduced**: with its sparsity loss LD-MoLE settles at
about one expert per token at chance accuracy, below top-2 on every seed (card default −0.16
[−0.20, −0.12]), a collapse so total (chance even on 2 bits) that it more likely shows an
optimisation problem of this implementation than of the method; without the sparsity loss it is level with top-2;
HydraLoRA scores best. `bench/results/routing.md` holds an earlier majority task, at the ceiling.
"""


def _summarize(scalars: Mapping[str, Any]) -> str:
    """ "Held-out accuracy 91.2% (hardest level d=8: 72.0%) with 12,288 trainable parameters; …"."""
    levels = sorted(int(k.removeprefix("accuracy_d")) for k in scalars if k.removeprefix("accuracy_d").isdigit())
    hardest = f" (hardest level d={levels[-1]}: {scalars[f'accuracy_d{levels[-1]}']:.1%})" if levels else ""
    return (
        f"Held-out accuracy {scalars['accuracy']:.1%}{hardest} with {scalars['trainable_parameters']:,.0f} "
        f"trainable parameters; {scalars['mean_active_experts']:.2f} experts active per token and projection, "
        f"{scalars['zero_expert_rate']:.1%} with none."
    )


spec = JobSpec(
    name="lora-moe-finetune",
    metrics=(
        Metric(
            key="accuracy",
            label="Held-out accuracy",
            unit="%",
            better="higher",
            proportion=True,
            n="eval_examples",
            description="Share of held-out examples answered right.",
        ),
        Metric(
            key="mean_active_experts", label="Active experts", description="Experts active per token and projection."
        ),
        Metric(
            key="trainable_parameters",
            label="Trainable parameters",
            better="lower",
            description="Parameters the fine-tune trains (the adapters and their router).",
        ),
    ),
    comparison=Comparison.none("One fine-tune; the difficulty levels are compared in its charts."),
    title="Fine-tune with a mixture of LoRA experts (LD-MoLE)",
    summary="Adapt a frozen base model with LoRA experts routed by top-k, ReLU, sparsemax or LD-MoLE's dynamic router.",
    version=3,
    queue="gpu",
    soft_time_limit=2 * 3600,
    time_limit=2 * 3600 + 300,
    params=(
        Model(
            name="model",
            accepts=("tiny-encoder", "hf-moe-lm"),
            default="zoo:lora-base-tiny",
            replaced_by=("checkpoint",),
            help="The frozen base: a tiny encoder (the zoo's lora-base-tiny) or a Hugging Face MoE language model "
            "(e.g. zoo:moe-lm-tiny; LoRA experts on its linear projections), from the zoo or the library.",
        ),
        File(
            name="checkpoint",
            formats=("zip", "tar"),
            max_bytes=20 * 2**30,
            help="Or upload a base checkpoint as a zip or tar archive: a tiny encoder (config.json + "
            "model.safetensors) or a Hugging Face MoE LM (safetensors + config + tokenizer); it replaces the model.",
        ),
        File(
            name="task_file",
            formats=("jsonl", "json", "csv", "txt"),
            max_bytes=200 * 2**20,
            help='Or upload task data: JSONL {"text": ..., "label": ...} or CSV/TSV with a text,label header; optional '
            "split (train/test), group and id columns (without a split, rows split by a hash of id or text). "
            "A tiny encoder reads texts of up to 8 digits (group = level 1-8); "
            "a language model reads any text. Replaces the built-in task and levels.",
        ),
        Choice(
            name="task",
            default="majority",
            options=("majority", "parity"),
            help="Built-in task over the first d digits: are most of them ≥ 5 (majority), "
            "or is their count odd (parity)?",
        ),
        Numbers(
            name="levels",
            default=[2, 3, 4, 5, 6],
            integer=True,
            min=1,
            max=8,
            max_count=8,
            help="Difficulty levels d (digits looked at), mixed in the training and test data.",
        ),
        Choice(
            name="routing",
            default="ld-mole",
            options=ROUTINGS,
            help="lora: one adapter of rank experts×rank; top1/top2: softmax top-k; relu: ReLU + L1; "
            "sparsemax: λ = 0; ld-mole: learned λ with the sparsity loss; ld-mole-nosparsity: without it; "
            "hydra: HydraLoRA, one shared A and experts B heads mixed densely; mola: MoLA, top-2 with more "
            "experts in higher layers (the same total).",
        ),
        Int(name="experts", default=8, min=1, max=64, help="LoRA experts per projection."),
        Int(name="rank", default=4, min=1, max=64, help="Rank of each expert."),
        Float(
            name="alpha", label="LoRA α", default=16.0, min=0.1, max=1024.0, help="Each adapter is scaled by α/rank."
        ),
        Multi(name="projections", options=PROJECTIONS, default=list(PROJECTIONS), help="Projections to adapt."),
        Int(name="sparsity_k", default=2, min=1, max=63, help="LD-MoLE: keep at most this many experts per token."),
        Float(name="sparsity_weight", default=0.1, min=0.0, max=100.0, help="LD-MoLE: weight of the sparsity loss."),
        Float(
            name="balance_weight", default=0.01, min=0.0, max=10.0, help="Switch load-balance weight (routed kinds)."
        ),
        Float(name="l1_weight", default=1e-3, min=0.0, max=10.0, help="ReLU routing: L1 penalty on routing weights."),
        Int(name="steps", default=400, min=1, max=100_000, help="Optimiser steps."),
        Int(name="batch_size", default=64, min=1, max=4096, help="Examples per step."),
        Float(name="lr", default=3e-3, min=1e-6, max=1.0, help="AdamW peak learning rate (one-cycle)."),
        Int(name="train_examples", default=4000, min=16, max=1_000_000, help="Training examples (reused)."),
        Int(name="eval_examples", default=2000, min=16, max=100_000, help="Held-out examples."),
        Seed(name="seed"),
    ),
    validate=_validate,
    check_inputs=_check_inputs,
    estimate=_estimate,
    guide=GUIDE,
    sample={"steps": 120, "batch_size": 32, "train_examples": 1000, "eval_examples": 500, "seed": 0},
    summarize=_summarize,
)


def _heatmap(result: Any) -> dict[str, Any]:
    rows = [
        {"projection": name, "position": position, "active": round(value, 4)}
        for name, values in result.active_heatmap.items()
        for position, value in enumerate(values)
    ]
    return heatmap(
        "Mean active experts per token position × adapted projection",
        rows,
        x="position",
        y="projection",
        value="active",
        x_title="Token position (0 = level token)",
        y_title="Layer.projection",
        value_title="Active experts",
        scheme=None,
        value_format=".2f",
        y_order="rows",
    )


def _load_base(folder: Path, device: Any) -> tuple[Any, Any]:
    """(base, tokenizer or None): MoE Lab's tiny encoder, or a Hugging Face MoE LM wrapped as a LoRA base."""
    from mlcore.sniff import native_architecture

    if native_architecture(folder) is not None:
        from mlcore.lora_moe.base import TinyEncoder

        try:
            base = TinyEncoder.load(folder)
        except ValueError as exc:
            raise JobError(f"Model: {exc}.") from None
        if base.config.max_length < 9:
            raise JobError(f"Model: its context ({base.config.max_length} tokens) is too short for 8-digit tasks.")
        return base, None
    from mlcore.lora_moe.hf import HFLoRABase, load_hf_lm

    lm, tokenizer = load_hf_lm(folder, device)
    return HFLoRABase(lm), tokenizer


def _task_data(inputs: dict[str, Any], base: Any, tokenizer: Any) -> tuple[Any, tuple[str, ...], Any]:
    """((train, test) batches, class names, group names) from an uploaded task file, or
    (None, the built-in classes, None)."""
    if "task_file" not in inputs:
        return None, ("no", "yes"), None
    from mlcore.lora_moe.labelled import LabelledDataError, load_labelled
    from mlcore.lora_moe.tasks import digit_batches

    try:
        labelled = load_labelled(Path(inputs["task_file"]))
        if tokenizer is None:
            return digit_batches(labelled), labelled.classes, None
        from mlcore.lora_moe.hf import text_batches

        train, test, groups = text_batches(labelled, tokenizer, base.max_length)
        return (train, test), labelled.classes, groups
    except LabelledDataError as exc:
        raise JobError(f"Task file: {exc}.") from None


def _mixture_config(params: dict[str, Any]) -> MixtureConfig:
    from mlcore.lora_moe.mixture import MixtureConfig

    return bind(
        MixtureConfig,
        params,
        convert={"projections": lambda chosen: tuple(p for p in PROJECTIONS if p in chosen)},
        skip=(*FINETUNE_PARAMS, "model"),
    )


def _finetune_config(params: dict[str, Any]) -> FinetuneConfig:
    from mlcore.lora_moe.pipeline import FinetuneConfig

    return bind(
        FinetuneConfig,
        params,
        convert={"levels": lambda levels: tuple(sorted(set(levels)))},
        skip=(*MIXTURE_PARAMS, "model"),
    )


def run(params: dict[str, Any], inputs: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    import torch

    from mlcore.lora_moe.pipeline import finetune

    # Everything that can refuse the job happens before training, so bad input loses nothing.
    if "checkpoint" in inputs:
        from mlcore.sniff import unpacked_checkpoint

        base, tokenizer = _load_base(unpacked_checkpoint(Path(inputs["checkpoint"]), label="Checkpoint"), ctx.device)
    elif "model" in inputs:
        base, tokenizer = _load_base(Path(inputs["model"]), ctx.device)
    else:
        raise JobError("Model: pick a base encoder (e.g. zoo:lora-base-tiny).")
    data, classes, groups = _task_data(inputs, base, tokenizer)
    encode = None
    if tokenizer is not None:
        from mlcore.lora_moe.hf import as_text

        def encode(batch: Any) -> Any:
            return as_text(batch, tokenizer, base.max_length)

    mixture, config = _mixture_config(params), _finetune_config(params)
    try:
        sites = [name for name, _, _ in base.lora_sites(mixture.projections)]
    except ValueError as exc:
        raise JobError(f"Projections: {exc}.") from None
    torch.manual_seed(params["seed"])
    task = (
        f"task {params['task']} at levels {list(config.levels)}"
        if data is None
        else f"uploaded task ({len(data[0].targets)} training, {len(data[1].targets)} test rows; labels "
        f"{', '.join(classes)})"
    )
    ctx.log(
        f"{params['routing']} routing, {params['experts']} experts of rank {params['rank']} on "
        f"{len(sites)} projections ({', '.join(sites)}); {task}"
    )
    ctx.progress(0.02, "fine-tuning")

    def on_step(step: int, loss: float) -> None:
        ctx.raise_if_cancelled()
        if step % 10 == 0 or step == config.steps - 1:
            ctx.metric("loss", loss, step=step)
            ctx.progress(0.02 + 0.9 * step / config.steps, f"step {step} of {config.steps}")

    result = finetune(
        base, mixture, config, data=data, classes=len(classes), group_names=groups, encode=encode, on_step=on_step
    )
    metrics = result.metrics()
    for name, value in metrics.items():
        ctx.metric(name, value)
    levels = [{"level": f"d={d}", "accuracy": a} for d, a in result.accuracy_by_level.items()]
    ctx.chart(
        "accuracy_by_level",
        bar_chart(
            "Held-out accuracy by difficulty",
            levels,
            x="level",
            y="accuracy",
            x_title="Level",
            y_title="Accuracy",
            x_type="ordinal",
            keep_order=False,
        ),
    )
    ctx.chart("active_experts", _heatmap(result))
    histogram = [{"experts": i, "pairs": n} for i, n in enumerate(result.active_histogram)]
    ctx.chart(
        "active_histogram",
        bar_chart(
            "Active experts per (token, projection)",
            histogram,
            x="experts",
            y="pairs",
            x_title="Active experts",
            y_title="Count",
            x_type="ordinal",
            keep_order=False,
        ),
    )
    stride = max(1, len(result.losses) // 400)
    ctx.chart(
        "loss",
        step_lines(
            "Training loss (task + auxiliary)",
            [{"step": s, "loss": v} for s, v in result.losses[::stride]],
            "loss",
            "Loss",
        ),
    )
    report = ctx.workdir / "report.json"
    report.write_text(
        json.dumps(
            {
                "mixture": vars(mixture),
                "classes": list(classes),
                "task": "upload" if data is not None else params["task"],
                "finetune": vars(config),
                "metrics": metrics,
                "active_heatmap": result.active_heatmap,
                "active_histogram": result.active_histogram,
            },
            indent=1,
            default=str,
        )
    )
    ctx.artifact("report.json", report, "application/json")
    groups = ", ".join(f"d={d}: {a:.3f}" for d, a in result.accuracy_by_level.items())
    by_group = f" ({groups})" if groups else ""
    ctx.log(
        f"accuracy {result.accuracy:.3f}{by_group}; {result.mean_active:.2f} active experts per token, zero-expert "
        f"rate {result.zero_expert_rate:.3f}, {result.trainable_parameters:,} trainable parameters"
    )
    ctx.progress(1.0, "done")
    return metrics
