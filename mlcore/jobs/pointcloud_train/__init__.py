"""``pointcloud-train``: train a PTv3-lite segmenter — dense or Point-MoE — jointly on SynMix datasets.

The architecture choice is the benchmark's: a dense twin (W_o as one gated MLP as wide as k experts:
equal active compute), Point-MoE on the attention output projection (the paper's released
placement) or on the FFN. Reports loss and mIoU curves, per-dataset mIoU on the seen datasets and
on the zero-shot ones (E: another LiDAR and mount; F: larger, noisier rooms), the expert usage by
dataset, and registers the trained segmenter (kind ``pointcloud-segmenter``) in the team library.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlcore.charts import bar_chart, small_multiples, step_lines
from mlcore.jobs import (
    Bool,
    Choice,
    Comparison,
    Dataset,
    Estimate,
    File,
    Float,
    Int,
    JobContext,
    JobError,
    JobSpec,
    Metric,
    Multi,
    Seed,
)
from mlcore.jobs.binding import bind

if TYPE_CHECKING:
    from mlcore.pointcloud.pipeline import TrainConfig
    from mlcore.pointcloud.ptv3 import PTv3Config

SEEN = ("A", "B", "C", "D")
ZERO_SHOT = ("E", "F")
ARCHITECTURES = ("moe-proj", "moe-ffn", "dense")
#: ``attribute_augment`` choices: "auto" or a preset of :mod:`mlcore.pointcloud.augment`.
ATTRIBUTE_CHOICES = ("auto", "balanced", "batch-30", "robust", "off")
#: The parameters that shape the network, and those of the training run.
MODEL_PARAMS = ("architecture", "block_norm", "experts", "top_k")
TRAIN_PARAMS = (
    "datasets",
    "mixed",
    "steps",
    "batch_size",
    "points",
    "scenes",
    "lr",
    "balance",
    "eval_every",
    "eval_scenes",
    "attribute_augment",
)
#: The parameters of training on the user's own scans (``scans`` is a file: it arrives as an input).
USER_PARAMS = ("scan_set", "mix_synmix", "voxel", "holdout")
SCAN_FORMATS = ("zip", "tar")
MAX_SCANS_BYTES = 2 * 2**30


def _validate(p: dict[str, Any]) -> list[tuple[str, str]]:
    errors = []
    if p["architecture"] != "dense" and p["top_k"] > p["experts"]:
        errors.append(("top_k", f"Must be at most the number of experts ({p['experts']})."))
    if not p["datasets"]:
        errors.append(("datasets", "Pick at least one dataset to train on."))
    return errors


def _estimate(p: dict[str, Any]) -> Estimate:
    # Activations ≈ 40 KB per point per step for the default widths (forward + backward), the scan pool
    # ≈ 1 MB per scan, and ~1.5 s per step of 8k points on one CPU core.
    points = p["batch_size"] * p["points"]
    pool = p["scenes"] * len(p["datasets"]) * 2**20
    return Estimate(memory_bytes=2**30 + points * 40_000 + pool, seconds=p["steps"] * points / 5_000 + 30)


def _summarize(scalars: Mapping[str, Any]) -> str:
    """ "Validation mIoU 0.552 on the training datasets, 0.310 zero-shot; 120,000 parameters (40,000 active …"."""
    if scalars.get("user_miou") is not None:
        return (
            f"mIoU {scalars['user_miou']:.3f} on {scalars['heldout_scans']:.0f} held-out scan(s) of yours "
            f"(point accuracy {scalars['user_accuracy']:.1%}); {scalars['parameters']:,.0f} parameters, trained in "
            f"{scalars['train_seconds']:.0f} s."
        )
    return (
        f"Validation mIoU {scalars['seen_miou']:.3f} on the training datasets, {scalars['zero_shot_miou']:.3f} "
        f"zero-shot; {scalars['parameters']:,.0f} parameters ({scalars['active_parameters']:,.0f} active per "
        f"point), trained in {scalars['train_seconds']:.0f} s."
    )


spec = JobSpec(
    name="pointcloud-train",
    metrics=(
        Metric(
            key="seen_miou",
            label="mIoU, training datasets",
            better="higher",
            description="Validation mean IoU on held-out scenes of the datasets it trained on.",
        ),
        Metric(
            key="zero_shot_miou",
            label="mIoU, zero-shot",
            better="higher",
            description="Mean IoU on a dataset it never saw.",
        ),
        Metric(
            key="train_seconds",
            label="Training time",
            unit="s",
            better="lower",
            description="Wall-clock seconds of training.",
        ),
        Metric(key="parameters", label="Parameters", description="Parameters of the whole model."),
        Metric(
            key="active_parameters",
            label="Active parameters",
            better="lower",
            description="Parameters one point passes through.",
        ),
    ),
    comparison=Comparison.none("Trains one model; the benchmark compares Point-MoE with its dense twin."),
    title="Train a point-cloud segmenter (dense or Point-MoE)",
    summary="Joint multi-sensor training on procedural rooms and streets; seen and zero-shot mIoU, expert usage.",
    version=4,
    queue="gpu",
    soft_time_limit=6 * 3600,
    time_limit=6 * 3600 + 300,
    params=(
        File(
            name="scans",
            label="Your labelled scans",
            formats=SCAN_FORMATS,
            max_bytes=MAX_SCANS_BYTES,
            help="A zip or tar of two or more labelled scans: LAS / LAZ (classification), PLY / PCD with a label "
            "property, or NAME.labels beside NAME.xyz; optional classes.json / classes.yaml naming the ids.",
        ),
        Dataset(
            name="scan_set",
            label="Or a labelled-scan dataset",
            accepts=("pointcloud-dataset",),
            default=None,
            help="A pointcloud-dataset from your library (or the sample zoo:labelled-rooms).",
        ),
        Bool(
            name="mix_synmix",
            label="Mix in SynMix",
            default=False,
            help="With your scans: also train on the SynMix datasets picked below (half of the crops stay yours).",
        ),
        Float(
            name="voxel",
            label="Voxel size (m)",
            default=0.05,
            min=0.005,
            max=2.0,
            help="With your scans: the grid they are sampled at (SynMix: 0.04 m rooms, 0.1 m streets).",
        ),
        Float(
            name="holdout",
            label="Held-out share",
            default=0.25,
            min=0.05,
            max=0.5,
            help="With your scans: the share of scans held out for IoU, chosen by content hash (at least one).",
        ),
        Choice(
            name="architecture",
            default="moe-proj",
            options=ARCHITECTURES,
            help="Point-MoE on the attention output projection (the paper), on the FFN, or the dense twin.",
        ),
        Choice(
            name="block_norm",
            label="Block norm",
            default="layer",
            options=("layer", "batch"),
            help="The blocks' pre-norm: LayerNorm (PTv3) or BatchNorm (the paper's ablation; its running "
            "statistics can overflow on scans unlike the training crops).",
        ),
        Int(name="experts", default=4, min=2, max=16, help="Experts per MoE layer (the paper: 4 for S, 8 for L)."),
        Int(name="top_k", label="Top-k", default=2, min=1, max=8, help="Experts each point is routed to."),
        Float(
            name="balance",
            label="Balance weight α",
            default=0.0,
            min=0.0,
            max=1.0,
            help="α of the load-balance loss (the paper: 0).",
        ),
        Multi(
            name="datasets",
            options=SEEN,
            default=list(SEEN),
            help="Seen SynMix datasets to train on (E and F stay held out).",
        ),
        Bool(
            name="mixed", default=True, help="Mix datasets within every batch (off: each batch comes from one dataset)."
        ),
        Int(name="steps", default=300, min=1, max=100_000, help="Optimiser steps."),
        Int(name="batch_size", default=4, min=1, max=64, help="Crops per step."),
        Int(name="points", default=2048, min=256, max=65_536, help="Points per crop."),
        Int(name="scenes", default=16, min=1, max=1000, help="Training scans generated per dataset."),
        Float(name="lr", default=3e-3, min=1e-5, max=0.1, help="AdamW peak learning rate (warm-up, cosine)."),
        Choice(
            name="attribute_augment",
            label="Attribute robustness",
            default="auto",
            options=ATTRIBUTE_CHOICES,
            help="How training treats colour and intensity. auto: balanced on your scans, batch-30 on SynMix (the "
            "zoo's recipe). balanced: re-mapped as other sensors report them, never dropped (best where classes "
            "differ only by an attribute, but needs it at segmentation). batch-30: also dropped from 30% of the "
            "batches, with BatchNorm statistics kept per attribute presence (reads scans with or without them). "
            "robust: dropped from 70% of the crops. off: as the scans hold them.",
        ),
        Int(
            name="eval_every",
            default=100,
            min=0,
            max=100_000,
            help="Validation interval in steps (0: at the end only).",
        ),
        Int(name="eval_scenes", default=3, min=1, max=50, help="Validation scans per dataset."),
        Seed(name="seed"),
    ),
    validate=_validate,
    estimate=_estimate,
    guide=(
        "**Your own scans.** Upload a zip or tar (*scans*) or pick a `pointcloud-dataset` (*scan_set*) of two or "
        "more labelled scans: LAS / LAZ with the classification field (0 and 1 count as unlabelled; ASPRS names by "
        "default), PLY or PCD with a per-point label property (`label`, `class`, `classification`, "
        "`scalar_Classification`, `semantic`, `class_id` …), or any cloud with `NAME.labels` beside it (one class id "
        'per line). A `classes.json` or `classes.yaml` names the ids (`{"2": "ground", "6": '
        '"building"}`; `null` leaves an id unlabelled). Scans are held out by content hash (*holdout*), the model '
        "trains on the rest at your *voxel* size, alone or with *mix_synmix*, and reports the IoU of each of your "
        "classes on the held-out scans. Refused with what to fix: no labels, ids the map does not name, one class, "
        "fewer than 64 labelled points in a scan, a single scan. The trained segmenter joins your library as a "
        "`pointcloud-segmenter` that knows your classes: pointcloud-segment labels new scans with their names (and, "
        "in a LAS output, the ids your files gave them) at your voxel size.\n\n"
        "**Colour and intensity** (*attribute_augment*). A model trained always with colour does not fall back to "
        "geometry on a scan without it, it mislabels; one trained with colour dropped from many crops reads the "
        "scan without it but stops seeing classes only colour separates (a painted door in a wall). *auto* trains "
        "your scans *balanced* (re-mapped as other sensors and exporters report them, never dropped: segment scans "
        "that carry what your training scans carry; pointcloud-segment warns when one does not) and SynMix "
        "*batch-30*, as the zoo segmenter is trained: 30% of the batches without colour, 30% without intensity, "
        "and BatchNorm statistics kept for each combination of attributes, so the model reads a scan with the "
        "statistics of what it carries. On bench/results/pointcloud-attributes.md's painted doors (5 seeds), "
        "*balanced* scores mIoU 0.95 with colour and 0.01 without; *batch-30* 0.83 and 0.65. The log says which "
        "was used, and the segmenter remembers it.\n\n"
        "**Curves.** *Loss* is the cross-entropy over each scan's own label set (merged or unannotated classes do "
        "not count); *validation mIoU* is the mean intersection-over-union per dataset on held-out scans, with "
        "predictions carried back to every input point. A healthy run's loss falls fast in the first hundred "
        "steps and the mIoU of every seen dataset rises; the zero-shot datasets (E: a 128-beam LiDAR on a taller "
        "mount; F: larger rooms, noisier depth camera) are measured only at the end.\n\n"
        "**Expert usage by dataset** (Point-MoE only) shows, per MoE layer, the share of points whose top-1 expert "
        "is each expert. The router never sees the dataset; if experts specialise by sensor, the indoor and "
        "outdoor bars differ. Identical bars mean no specialisation.\n\n"
        "**The paper.** Point-MoE (arXiv 2505.23926, ICLR 2026) replaces the attention output projection of every "
        "PTv3 block by top-2 of 4–8 gated-MLP experts and trains on mixed batches of many datasets without "
        "dataset labels, reporting higher seen and zero-shot mIoU than PTv3 and PPT. At our scale (a ~0.5M-"
        "parameter PTv3-lite, minutes of CPU) the effect is small or absent: see `bench/results/pointcloud.md`. "
        "The trained model is offered to your library as a `pointcloud-segmenter` for `pointcloud-segment`."
    ),
    # The sample runs the user-data path: the built-in labelled rooms stand in for a user's scans.
    sample={
        "scan_set": "zoo:labelled-rooms",
        "steps": 40,
        "eval_every": 20,
        "batch_size": 2,
        "points": 1024,
        "seed": 0,
    },
    summarize=_summarize,
)


def usage_chart(usage: dict[str, list[list[float]]], layer_numbers: Sequence[int] = ()) -> dict[str, Any]:
    """Stacked bars: per dataset (x) and MoE layer (row), the share of points per top-1 expert;
    ``layer_numbers`` names the rows when ``usage`` holds a selection of the layers."""
    rows = [
        {
            "dataset": name,
            "layer": f"layer {layer_numbers[li] if layer_numbers else li + 1}",
            "expert": f"expert {e}",
            "share": share,
        }
        for name, layers in usage.items()
        for li, layer in enumerate(layers)
        for e, share in enumerate(layer)
    ]
    bars = bar_chart(
        "Expert usage by dataset (top-1 expert per point)",
        rows,
        x="dataset",
        y="share",
        x_title="Dataset",
        y_title="Share of points",
        keep_order=False,
        color="expert",
        color_title="Expert",
        normalize=True,
    )
    # Vega-Lite's own cell size (20 px per dataset, 300 px tall), now explicit: facets cannot fit the page.
    return small_multiples(bars, row="layer", width={"step": 20}, height=300)


def attribute_log(cfg: TrainConfig) -> str:
    """The log's line on how training treats colour and intensity."""
    from mlcore.pointcloud.augment import summary

    kept = "; BatchNorm statistics kept per attribute presence" if cfg.presence_stats else ""
    return f"attribute robustness {summary(cfg.attribute_augment or 'off')}{kept}"


def _layout(architecture: str, top_k: int) -> dict[str, Any]:
    """Where the experts go (PTv3Config's ``proj``, ``proj_ratio`` and ``ffn``); a dense W_o is as wide as k experts."""
    if architecture == "dense":
        return {"proj": "dense", "proj_ratio": float(top_k)}
    if architecture == "moe-ffn":
        return {"proj": "dense", "proj_ratio": float(top_k), "ffn": "moe"}
    return {"proj": "moe", "proj_ratio": 1.0}


def _model_config(params: dict[str, Any], num_classes: int | None = None) -> PTv3Config:
    """The architecture asked for, with the zoo's local patches and robust ground: without them a
    tiled scan labels differently from the whole one, and a few points under the floor lift it."""
    from mlcore.pointcloud.ptv3 import PTv3Config
    from mlcore.zoo.pointcloud import SCAN_LAYOUT

    return bind(
        PTv3Config,
        params,
        skip=(*TRAIN_PARAMS, *USER_PARAMS, "architecture", "seed"),
        **SCAN_LAYOUT,
        **_layout(params["architecture"], params["top_k"]),
        **({"num_classes": num_classes} if num_classes is not None else {}),
    )


def attribute_augment(choice: str, *, user_scans: bool) -> str:
    """The augmentation preset ``choice`` stands for: "auto" is the user path's default on the user's
    scans and the zoo recipe's on SynMix."""
    from mlcore.pointcloud.user_train import USER_ATTRIBUTE_AUGMENT
    from mlcore.zoo.pointcloud import RECIPES

    if choice != "auto":
        return choice
    return USER_ATTRIBUTE_AUGMENT if user_scans else RECIPES["pointmoe-synmix"].train["attribute_augment"]


def _train_config(params: dict[str, Any], *, user_scans: bool = False) -> TrainConfig:
    """The run's TrainConfig, heights measured from the scan's ground as the zoo recipes and
    ``pointcloud-segment`` measure them (from a crop's own, a crop of ceiling is a floor). BatchNorm
    statistics per attribute presence are kept whenever the augmentation drops an attribute
    (:mod:`mlcore.pointcloud.presence`: without them such a model is blind to what only the attribute
    separates)."""
    from mlcore.pointcloud.augment import dropped
    from mlcore.pointcloud.pipeline import TrainConfig

    augment = attribute_augment(params["attribute_augment"], user_scans=user_scans)
    return bind(
        TrainConfig,
        params,
        convert={"datasets": lambda chosen: tuple(d for d in SEEN if d in chosen)},
        skip=(*MODEL_PARAMS, *USER_PARAMS, "attribute_augment"),
        attribute_augment=augment,
        presence_stats=bool(dropped(augment)),
        height="scan",
    )


def run(params: dict[str, Any], inputs: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    import torch

    from mlcore.pointcloud.datasets import make_scan
    from mlcore.pointcloud.pipeline import ScanPool, evaluate, save_segmenter, train
    from mlcore.pointcloud.ptv3 import PTv3, parameter_counts

    if "scans" in inputs and "scan_set" in inputs:
        raise JobError(
            "Bring your scans one way: an upload (scans) or a library dataset (scan_set), not both; the job "
            "would otherwise have to ignore one."
        )
    if "scans" in inputs or "scan_set" in inputs:
        from mlcore.jobs.pointcloud_train.user_scans import run_on_user_scans

        return run_on_user_scans(params, Path(inputs.get("scans") or inputs["scan_set"]), ctx)
    if params["mix_synmix"]:
        raise JobError(
            "mix_synmix mixes SynMix into your own scans, but none were given: upload a zip of labelled scans "
            "(scans) or pick a pointcloud-dataset (scan_set), or turn mix_synmix off."
        )
    changed = [p.name for p in spec.params if p.name in ("voxel", "holdout") and params[p.name] != p.default]
    if changed:
        raise JobError(
            f"{' and '.join(changed)} apply to your own scans, but none were given: upload a zip of labelled scans "
            "(scans) or pick a pointcloud-dataset (scan_set), or leave them at their defaults."
        )
    cfg = _train_config(params)
    datasets = cfg.datasets
    if not datasets:
        raise JobError("datasets: pick at least one of A, B, C, D.")
    torch.manual_seed(params["seed"])
    model = PTv3(_model_config(params))
    sizes = parameter_counts(model)
    ctx.log(
        f"{params['architecture']}: {sizes['total']:,} parameters ({sizes['active']:,} active per point); "
        f"datasets {', '.join(datasets)}, {'mixed' if cfg.mixed else 'single-dataset'} batches of "
        f"{cfg.batch_size} × {cfg.points} points"
    )
    ctx.log(attribute_log(cfg))
    ctx.progress(0.0, "generating scenes")
    ctx.raise_if_cancelled()
    pool = ScanPool(datasets, cfg.scenes)

    def on_step(step: int, result: Any) -> None:
        ctx.raise_if_cancelled()
        ctx.metric("loss", result.loss[-1][1], step=step)
        if model.cfg.is_moe:
            ctx.metric("balance_loss", result.balance[-1][1], step=step)
        if result.evals and result.evals[-1][0] == step + 1:
            for name, value in result.evals[-1][1]["miou"].items():
                ctx.metric(f"val_miou_{name}", value, step=step + 1)
            rows = [{"step": s, "miou": v, "dataset": n} for s, ev in result.evals for n, v in ev["miou"].items()]
            ctx.chart("miou", step_lines("Validation mIoU", rows, "miou", "mIoU", color="dataset"))
        if step % 10 == 0 or step + 1 == cfg.steps:
            stride = max(1, len(result.loss) // 400)
            rows = [{"step": s, "loss": v} for s, v in result.loss[::stride]]
            ctx.chart("loss", step_lines("Training loss", rows, "loss", "Cross-entropy"))
            ctx.progress(0.05 + 0.8 * (step + 1) / cfg.steps, f"step {step + 1} of {cfg.steps}")

    result = train(model, cfg, pool=pool, on_step=on_step, device=ctx.device)
    ctx.progress(0.88, "evaluating on seen and zero-shot datasets")
    scans = {n: [make_scan(n, i, "val") for i in range(cfg.eval_scenes)] for n in (*datasets, *ZERO_SHOT)}
    final = evaluate(model, scans, device=ctx.device)
    metrics: dict[str, float] = {
        "parameters": float(sizes["total"]),
        "active_parameters": float(sizes["active"]),
        "train_seconds": result.seconds,
        "final_loss": result.loss[-1][1],
        "seen_miou": sum(final["miou"][n] for n in datasets) / len(datasets),
        "zero_shot_miou": sum(final["miou"][n] for n in ZERO_SHOT) / len(ZERO_SHOT),
    }
    for name, value in final["miou"].items():
        metrics[f"miou_{name}"] = value
    for key, value in metrics.items():
        ctx.metric(key, value)
    if final["usage"]:
        ctx.chart("expert_usage", usage_chart(final["usage"]))
    folder = ctx.workdir / "segmenter"
    card = {
        "architecture": params["architecture"],
        "experts": params["experts"],
        "top_k": params["top_k"],
        "balance": params["balance"],
        "datasets": list(datasets),
        "mixed": params["mixed"],
        "steps": params["steps"],
        "attribute_augment": cfg.attribute_augment,
        "height": cfg.height,
        "miou": final["miou"],
    }
    save_segmenter(model.cpu(), folder, card=card)
    ctx.artifact("segmenter", folder)
    ctx.register("pointcloud-segmenter", folder, card)
    ctx.log(
        f"seen mIoU {metrics['seen_miou']:.3f}, zero-shot mIoU {metrics['zero_shot_miou']:.3f} "
        f"({', '.join(f'{n} {v:.3f}' for n, v in final['miou'].items())}); {result.seconds:.0f} s of training"
    )
    ctx.progress(1.0, "done")
    return metrics
