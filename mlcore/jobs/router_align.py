"""``router-align``: RoMA post-training of an MoE model's routers, against its baselines.

The MoE model is a Hugging Face MoE language model (the zoo's ``moe-lm-tiny``, a library item or an
uploaded checkpoint archive), adapted through :mod:`mlcore.hf` and scored as multiple choice
(:mod:`mlcore.roma.hf`), or the tiny MoE classifier the benchmark uses (pre-trained in the job
when no model is given, or a library copy). The labelled task set is the built-in multi-task set
(task identity only implicit; an i.i.d. and a shifted split) or an uploaded JSONL/CSV file
(:mod:`mlcore.lora_moe.labelled`). Only the routers of the last few MoE layers train. Reports accuracy
before and after for RoMA, CE-only router tuning, C3PO-lite and the per-sample oracle; the fraction
of the oracle gap each closes; and the k-NN overlap between the task-embedding space and the
routing space before and after.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlcore.charts import bar_chart, small_multiples, step_lines
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
    Seed,
)
from mlcore.jobs.binding import bind
from mlcore.jobs.spec import InputCheck

if TYPE_CHECKING:
    from mlcore.roma.roma import StudyConfig

#: The parameters of RoMA's router tuning (AlignConfig) and of the study around it (StudyConfig);
#: ``model`` and ``pretrain_steps`` are the job's own.
ALIGN_PARAMS = ("layers", "k", "sigma", "lam", "epochs", "lr", "targets")
STUDY_PARAMS = ("train_examples", "test_examples", "embedding", "oracle_steps")

TASK_FORMAT = (
    'JSONL objects {"text": ..., "label": ...} or CSV/TSV with a text,label header; optional split '
    "(train/test), group and id columns (without a split, rows split 4 : 1 by a hash of id or text). "
    "The model scores each label's first token right after the text."
)

GUIDE = """\
### How to read this

**What ran.** An MoE model answers a labelled task: by default digit tasks whose identity is hidden
in the input (a marker, one of three synonyms per task, anywhere in the sequence); a language model
answers as multiple choice (the next-token logits of each label). Only the router weights of the
last *L* MoE layers were then trained, two ways:
**CE-only** (cross-entropy) and **RoMA** (cross-entropy + λ·Σⱼ Wᵢⱼ‖rᵢ − rⱼ‖², pulling each sample's
last-token routing rᵢ toward its *k* nearest *successful* neighbours in a task-embedding space,
Wᵢⱼ a Gaussian kernel on cosine distance). rᵢ is computed from the live routers, so the regulariser
has a gradient (the *Regulariser* curve must move; the public reference script's stays constant). The
neighbours' rⱼ follow the routers being tuned by default (*targets* = live); *fixed* keeps the base
model's, which holds the routers near where they started.

**Charts.**
- *Accuracy*: base, CE-only, RoMA, C3PO-lite (test-time mixing of the neighbours' routing, no
  training) and the oracle (each test sample's routing optimised on its own label: an upper bound,
  not a method), on the i.i.d. split and on longer inputs (shifted).
- *Fraction of the oracle gap closed*: (acc − base)/(oracle − base); 1 means oracle routing.
- *k-NN overlap*: the share of each sample's nearest neighbours in embedding space that are also its
  nearest in routing space. RoMA should raise it: similar tasks then share experts.

**The paper.** Li, Li and Zhou, *Routing Manifold Alignment* (ICLR 2026): pretrained routers sit
10–20 points below per-sample oracle routing; aligning the routing manifold to the task manifold
closes much of that gap at no inference cost, beyond CE-only router tuning.

**What you can bring.** The model: a library hf-moe-lm or moe-task-classifier, or an uploaded zip
or tar(.gz) of a Hugging Face MoE checkpoint folder (config, safetensors weights, tokenizer); one
of the two, not both. A labelled task file for a language model, UTF-8: JSONL
`{"text": ..., "label": ...}` or CSV/TSV with a `text,label` header, optionally `split`, `group`
and `id` columns (a byte-order mark and Windows line ends are fine); it replaces the built-in task
set, whose example counts then do not apply.

**What good looks like.** RoMA > CE-only ≥ base, a positive fraction of the gap closed and a
higher overlap after tuning. Our benchmark (`bench/results/routing.md`) reports what we measured
over 3 seeds, including where the claim did not reproduce.
"""


def _check_inputs(p: dict[str, Any], uploaded: frozenset[str]) -> InputCheck:
    """One model, from the library or uploaded; a task file needs a language model to read it."""
    errors = []
    if "checkpoint" in uploaded and p["model"]:
        errors.append(("model", "Give either a model or an uploaded checkpoint, not both."))
    if "task_file" in uploaded and not p["model"] and "checkpoint" not in uploaded:
        errors.append(
            (
                "task_file",
                "An uploaded task set needs a language model: pick one (e.g. zoo:moe-lm-tiny) or upload a checkpoint.",
            )
        )
    return InputCheck(errors=errors)


def _validate(p: dict[str, Any]) -> list[tuple[str, str]]:
    errors = []
    if p["k"] >= p["train_examples"]:
        errors.append(("k", "Must be smaller than the number of training examples."))
    return errors


def _estimate(p: dict[str, Any]) -> Estimate:
    seconds = (
        0.3 * p["pretrain_steps"]
        + 0.02 * p["epochs"] * p["train_examples"]
        + 0.01 * p["oracle_steps"] * p["test_examples"]
    )
    return Estimate(memory_bytes=1024 * 2**20 + p["test_examples"] * 200_000, seconds=seconds)


def _summarize(scalars: Mapping[str, Any]) -> str:
    """ "On shifted data RoMA reaches 78.0% accuracy (base 70.0%, oracle 88.0%), closing 44% of the gap …"."""
    split = next((s for s in ("shifted", "iid", "test") if f"{s}_accuracy_roma" in scalars), "iid")
    return (
        f"On {split} data RoMA reaches {scalars[f'{split}_accuracy_roma']:.1%} accuracy "
        f"(base {scalars[f'{split}_accuracy_base']:.1%}, oracle {scalars[f'{split}_accuracy_oracle']:.1%}), "
        f"closing {scalars[f'{split}_gap_closed_roma']:.0%} of the oracle gap against CE-only's "
        f"{scalars[f'{split}_gap_closed_ce_only']:.0%} and C3PO-lite's {scalars[f'{split}_gap_closed_c3po_lite']:.0%}."
    )


spec = JobSpec(
    name="router-align",
    metrics=(
        Metric(
            key="shifted_accuracy_{variant}",
            label="Accuracy, shifted data",
            unit="%",
            better="higher",
            proportion=True,
            n="test_examples",
            description="Share of test examples from the shifted distribution answered right.",
        ),
        Metric(
            key="iid_accuracy_{variant}",
            label="Accuracy, in-distribution",
            unit="%",
            better="higher",
            proportion=True,
            n="test_examples",
            description="Share of in-distribution test examples answered right.",
        ),
        Metric(
            key="shifted_gap_closed_{variant}",
            label="Oracle gap closed",
            unit="%",
            better="higher",
            description="Share of the gap between the base router and the oracle that the method closes.",
        ),
    ),
    comparison=Comparison(
        baseline="base", metrics=("shifted_accuracy_{variant}", "iid_accuracy_{variant}"), chart="gap_closed"
    ),
    title="Align MoE routers to the task manifold (RoMA)",
    summary=(
        "Post-train only the last routers so each sample routes like its successful neighbours; "
        "compare with CE-only, C3PO-lite and the oracle."
    ),
    version=3,  # 3: the neighbours' targets follow the tuned routers by default (targets = live)
    queue="gpu",
    soft_time_limit=2 * 3600,
    time_limit=2 * 3600 + 300,
    params=(
        Model(
            name="model",
            accepts=("hf-moe-lm", "moe-task-classifier"),
            help="An MoE language model (e.g. zoo:moe-lm-tiny) or MoE task classifier; leave empty (and upload "
            "nothing) to pre-train the tiny built-in classifier in the job.",
        ),
        File(
            name="checkpoint",
            formats=("zip", "tar"),
            max_bytes=20 * 2**30,
            help="Or upload a Hugging Face MoE checkpoint (safetensors + config + tokenizer) as a zip or tar archive.",
        ),
        File(
            name="task_file",
            formats=("jsonl", "json", "csv", "txt"),
            max_bytes=200 * 2**20,
            help=f"Labelled task set for a language model (default: the built-in multi-task set). {TASK_FORMAT}",
        ),
        Int(name="pretrain_steps", default=250, min=10, max=100_000, help="Pre-training steps when no model is given."),
        Choice(
            name="embedding",
            default="tfidf-svd",
            options=("tfidf-svd", "hidden-mean"),
            help="Task-embedding space: TF-IDF + SVD of the input, or the base model's mean-pooled hidden states.",
        ),
        Int(name="k", default=5, min=1, max=100, help="Successful neighbours per sample."),
        Float(
            name="lam",
            label="λ",
            default=0.8,
            min=0.0,
            max=100.0,
            help="Weight of the manifold regulariser (0: CE-only).",
        ),
        Float(
            name="sigma", label="σ", default=0.4, min=0.01, max=10.0, help="Gaussian-kernel width on cosine distance."
        ),
        Int(name="layers", default=2, min=1, max=64, help="Tune the routers of the last this-many MoE layers."),
        Choice(
            name="targets",
            default="live",
            options=("live", "fixed", "recomputed"),
            help="Neighbours' routing vectors from the routers being tuned at every step (live), from the base "
            "model (fixed: anchors the routers where they started), or recomputed from the tuned model each epoch.",
        ),
        Int(name="epochs", default=3, min=1, max=100, help="Router-tuning epochs."),
        Float(name="lr", default=3e-3, min=1e-6, max=1.0, help="AdamW learning rate for the routers."),
        Int(
            name="train_examples",
            default=1500,
            min=32,
            max=200_000,
            help="Labelled training examples of the built-in task set (an upload uses its own rows).",
        ),
        Int(name="test_examples", default=600, min=32, max=50_000, help="Built-in test examples per split."),
        Int(name="oracle_steps", default=30, min=1, max=1000, help="Per-sample oracle optimisation steps."),
        Seed(name="seed"),
    ),
    validate=_validate,
    check_inputs=_check_inputs,
    estimate=_estimate,
    guide=GUIDE,
    sample={
        "pretrain_steps": 120,
        "train_examples": 400,
        "test_examples": 200,
        "epochs": 2,
        "oracle_steps": 15,
        "seed": 0,
    },
    summarize=_summarize,
)


def _grouped_bar(title: str, rows: list[dict[str, Any]], y: str, y_title: str) -> dict[str, Any]:
    """Bars per method (in the rows' order), one cell per split."""
    bars = bar_chart(title, rows, x="method", y=y, x_title=None, y_title=y_title, color="method", legend=False)
    # Vega-Lite's own cell size (20 px per method, 300 px tall), now explicit: facets cannot fit the page.
    return small_multiples(bars, column="split", column_title="Split", width={"step": 20}, height=300)


def _load_classifier(folder: Path) -> Any:
    from mlcore.roma.model import MoEClassifier

    try:
        return MoEClassifier.load(folder)
    except (ValueError, OSError, KeyError, TypeError, RuntimeError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise JobError(f"Model: could not load a moe-task-classifier ({first[:200]}).") from None


def _load_lm(folder: Path, classes: tuple[str, ...], device: Any) -> Any:
    """An adapted HF MoE LM that answers ``classes``; every refusal is a one-line JobError."""
    from mlcore.hf.architectures import HFModelError
    from mlcore.lora_moe.hf import load_hf_lm
    from mlcore.roma.hf import HFRoutedLM

    model, tokenizer = load_hf_lm(folder, device)
    try:
        return HFRoutedLM(model, tokenizer, classes)
    except HFModelError as exc:
        raise JobError(f"Model: {exc}") from None


def _model_folder(inputs: dict[str, Any]) -> Path | None:
    from mlcore.sniff import unpacked_checkpoint

    if "checkpoint" in inputs and "model" in inputs:
        raise JobError("Give either a model or an uploaded checkpoint, not both.")
    if "checkpoint" in inputs:
        return unpacked_checkpoint(Path(inputs["checkpoint"]), label="Checkpoint")
    return Path(inputs["model"]) if "model" in inputs else None


def _task_sets(inputs: dict[str, Any], config: Any, *, text: bool, shifted_length: int) -> tuple[Any, dict[str, Any]]:
    """(train, {split name: test set}): the uploaded task file's train and test rows, or the built-in sets."""
    from mlcore.roma.roma import builtin_sets

    if "task_file" not in inputs:
        return builtin_sets(config, shifted_length=shifted_length, text=text)
    import torch

    from mlcore.lora_moe.labelled import LabelledDataError, load_labelled
    from mlcore.roma.tasks import TextTaskSet

    try:
        data = load_labelled(Path(inputs["task_file"]))
    except LabelledDataError as exc:
        raise JobError(f"Task file: {exc}.") from None

    def rows(split: str) -> TextTaskSet:
        index = data.rows(split)
        labels = torch.tensor([data.labels[i] for i in index], dtype=torch.long)
        return TextTaskSet(tuple(data.texts[i] for i in index), labels, data.classes)

    return rows("train"), {"test": rows("test")}


def _study_config(params: dict[str, Any]) -> StudyConfig:
    from mlcore.roma.roma import AlignConfig, StudyConfig

    own = ("model", "pretrain_steps")
    align = bind(AlignConfig, params, skip=(*STUDY_PARAMS, *own))
    return bind(StudyConfig, params, skip=(*ALIGN_PARAMS, *own), align=align)


def run(params: dict[str, Any], inputs: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    import torch

    from mlcore.roma.model import MoEClassifier, MoEClassifierConfig
    from mlcore.roma.roma import pretrain_moe, run_study
    from mlcore.roma.tasks import DIGIT_CLASSES, LENGTH
    from mlcore.sniff import native_architecture

    torch.manual_seed(params["seed"])
    config = _study_config(params)
    # Everything that can refuse the job happens before the first artifact, so bad input leaves nothing.
    folder = _model_folder(inputs)
    if folder is not None and native_architecture(folder) is not None:
        if "task_file" in inputs:
            raise JobError(
                "Task file: the MoE task classifier reads only the built-in digit tasks; pick a language model."
            )
        base = _load_classifier(folder)
        train, splits = _task_sets(inputs, config, text=False, shifted_length=base.config.max_length - 1)
        ctx.log(f"loaded the MoE classifier ({base.num_moe_layers} MoE layers)")
    elif folder is not None:
        train, splits = _task_sets(inputs, config, text=True, shifted_length=LENGTH + 2)
        classes = next(iter(splits.values())).classes if "task_file" in inputs else DIGIT_CLASSES
        ctx.progress(0.01, "loading the language model")
        base = _load_lm(folder, classes, ctx.device)
        ctx.log(
            f"adapted {base.adapter.arch}: {base.num_moe_layers} MoE layers of {base.num_experts(0)} experts; "
            f"{len(train)} training prompts, {len(classes)} labels"
        )
    else:
        if "task_file" in inputs:
            raise JobError("Task file: an uploaded task set needs a language model; pick one (e.g. zoo:moe-lm-tiny).")
        if params["layers"] > MoEClassifierConfig().layers:
            raise JobError(f"Layers: the built-in MoE classifier has {MoEClassifierConfig().layers} MoE layers.")
        ctx.progress(0.01, "pre-training the MoE classifier")
        total = params["pretrain_steps"]

        def on_pretrain(step: int, loss: float) -> None:
            ctx.raise_if_cancelled()
            if step % 10 == 0:
                ctx.metric("pretrain_loss", loss, step=step)
                ctx.progress(0.01 + 0.4 * step / total, f"pre-training, step {step} of {total}")

        base = pretrain_moe(MoEClassifierConfig(), steps=total, seed=params["seed"], on_step=on_pretrain)
        train, splits = _task_sets(inputs, config, text=False, shifted_length=base.config.max_length - 1)
        saved = ctx.workdir / "base"
        base.save(saved)
        ctx.artifact("base_model", saved)
    if params["layers"] > base.num_moe_layers:
        raise JobError(f"Layers: the model has {base.num_moe_layers} MoE layers; pick at most that many.")
    if params["k"] >= len(train):
        raise JobError(f"K: must be smaller than the {len(train)} training examples.")
    ctx.progress(0.45, "tuning the routers (RoMA and CE-only), then scoring")
    try:
        out = run_study(base, train, splits, config, log=ctx.log)
    except ValueError as exc:
        raise JobError(f"{exc}.") from None
    ctx.raise_if_cancelled()
    for step, value in enumerate(out["regulariser"]):
        if step % 5 == 0:
            ctx.metric("regulariser", value, step=step)
    metrics: dict[str, float] = {"successful_train_samples": float(out["successful"])}
    acc_rows, gap_rows, overlap_rows = [], [], []
    for split in splits:
        part = out[split]
        for method, value in part["accuracy"].items():
            metrics[f"{split}_accuracy_{method}"] = value
            acc_rows.append({"split": split, "method": method, "accuracy": value})
        for method, value in part["gap_closed"].items():
            metrics[f"{split}_gap_closed_{method}"] = value
            gap_rows.append({"split": split, "method": method, "gap_closed": value})
        for method, value in part["knn_overlap"].items():
            metrics[f"{split}_knn_overlap_{method}"] = value
            overlap_rows.append({"split": split, "method": method, "overlap": value})
    for name, value in metrics.items():
        ctx.metric(name, value)
    ctx.chart("accuracy", _grouped_bar("Accuracy", acc_rows, "accuracy", "Accuracy"))
    ctx.chart("gap_closed", _grouped_bar("Fraction of the oracle gap closed", gap_rows, "gap_closed", "Gap closed"))
    ctx.chart(
        "knn_overlap", _grouped_bar("k-NN overlap, embedding vs routing space", overlap_rows, "overlap", "Overlap")
    )
    ctx.chart(
        "regulariser",
        step_lines(
            "RoMA manifold regulariser Σ W‖r_i − r_j‖² (live routers)",
            [{"step": s, "value": v} for s, v in enumerate(out["regulariser"])],
            "value",
            "Regulariser",
        ),
    )
    tuned = ctx.workdir / "roma_model"
    out["models"]["roma"].save(tuned)
    ctx.artifact("roma_model", tuned)
    kind = "moe-task-classifier" if isinstance(base, MoEClassifier) else "hf-moe-lm"
    ctx.register(kind, tuned, {"method": "roma", "layers": out["layers"], "lam": params["lam"], "k": params["k"]})
    report = ctx.workdir / "report.json"
    report.write_text(
        json.dumps(
            {k: v for k, v in out.items() if k not in ("models",)} | {"config": vars(config)}, indent=1, default=str
        )
    )
    ctx.artifact("report.json", report, "application/json")
    first = next(iter(splits))
    acc = out[first]["accuracy"]
    ctx.log(
        f"{first} accuracy: base {acc['base']:.3f} → RoMA {acc['roma']:.3f} (CE-only {acc['ce_only']:.3f}, "
        f"C3PO-lite {acc['c3po_lite']:.3f}, oracle {acc['oracle']:.3f}); RoMA closed "
        f"{out[first]['gap_closed']['roma']:.2f} of the oracle gap"
    )
    ctx.progress(1.0, "done")
    return metrics
