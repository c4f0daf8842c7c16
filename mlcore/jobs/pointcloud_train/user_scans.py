"""``pointcloud-train`` on the user's own labelled scans: the run behind the kind's ``scans`` upload
and ``scan_set`` dataset (see :mod:`mlcore.pointcloud.user_scans` for what is read and refused, and
:mod:`mlcore.pointcloud.user_train` for the label space, the mixing and the evaluation)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from mlcore.charts import bar_chart, step_lines
from mlcore.jobs import JobContext, JobError
from mlcore.pointcloud.labels import LABELS

#: Crops of fewer points than this teach the attention patches nothing (PTv3-lite's patch is 64).
MIN_CROP_POINTS = 256


def metric_name(class_name: str, taken: set[str], prefix: str = "iou_") -> str:
    """``iou_low_vegetation`` for "low vegetation"; a suffix keeps two classes that slug alike apart."""
    base = prefix + (re.sub(r"[^a-z0-9]+", "_", class_name.lower()).strip("_") or "class")
    name, n = base, 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    taken.add(name)
    return name


def run_on_user_scans(params: dict[str, Any], root: Path, ctx: JobContext) -> dict[str, Any]:
    import torch

    from mlcore.jobs.pointcloud_train import SEEN, _model_config, _train_config, attribute_log, usage_chart
    from mlcore.pointcloud.pipeline import train
    from mlcore.pointcloud.ptv3 import PTv3, parameter_counts
    from mlcore.pointcloud.user_scans import read_scan_set, split_by_content
    from mlcore.pointcloud.user_train import (
        UserPool,
        as_scan,
        evaluate,
        evaluate_synmix,
        label_space,
        mix,
        replace_datasets,
        save_user_segmenter,
    )

    ctx.progress(0.0, "reading your scans")
    scan_set = read_scan_set(root, log=ctx.log)
    train_scans, held = split_by_content(scan_set.scans, params["holdout"])
    synmix = tuple(d for d in SEEN if d in params["datasets"]) if params["mix_synmix"] else ()
    space = label_space(scan_set.class_names, synmix=bool(synmix))
    counts = scan_set.class_points(train_scans)
    untrained = [n for n, c in zip(scan_set.class_names, counts) if c == 0]
    ctx.log(
        f"{len(scan_set.scans)} scans, {len(scan_set.class_names)} classes ({', '.join(scan_set.class_names)}; "
        f"names from {scan_set.names_from}); held out by content hash: {', '.join(s.name for s in held)}"
    )
    if untrained:
        ctx.log(
            f"no training scan holds {', '.join(untrained)}: the model cannot learn them, and their IoU on the "
            "held-out scans will be 0"
        )
    if synmix:
        shared = [n for n in scan_set.class_names if n.lower() in {m.lower() for m in LABELS}]
        ctx.log(
            f"mixed with SynMix {', '.join(synmix)}: half the crops are yours; classes shared with SynMix: "
            f"{', '.join(shared) or 'none'}"
        )
    else:
        ctx.log("SynMix not mixed in (mix_synmix off): training on your scans alone")
    torch.manual_seed(params["seed"])
    model = PTv3(_model_config(params, num_classes=len(space.names)))
    sizes = parameter_counts(model)
    cfg = replace_datasets(_train_config(params, user_scans=True), mix(synmix))
    if cfg.points < MIN_CROP_POINTS:
        raise JobError(f"points: crops of your scans need at least {MIN_CROP_POINTS} points.")
    ctx.log(
        f"{params['architecture']}: {sizes['total']:,} parameters ({sizes['active']:,} active per point); "
        f"voxel {params['voxel']:g} m, {cfg.batch_size} crops × {cfg.points} points per step"
    )
    ctx.log(attribute_log(cfg))
    ctx.raise_if_cancelled()
    pool = UserPool([as_scan(s, space) for s in train_scans], space, params["voxel"], synmix, cfg.scenes)
    held_scans = [as_scan(s, space) for s in held]
    curve: list[dict[str, Any]] = []
    eval_every = params["eval_every"]

    def on_step(step: int, result: Any) -> None:
        ctx.raise_if_cancelled()
        ctx.metric("loss", result.loss[-1][1], step=step)
        if model.cfg.is_moe:
            ctx.metric("balance_loss", result.balance[-1][1], step=step)
        if eval_every and (step + 1) % eval_every == 0 and step + 1 < cfg.steps:
            value = evaluate(model, held_scans, space, params["voxel"], device=ctx.device)["miou"]
            model.train()
            ctx.metric("heldout_miou", value, step=step + 1)
            curve.append({"step": step + 1, "miou": value})
            ctx.chart("miou", step_lines("Held-out mIoU (your scans)", curve, "miou", "mIoU"))
        if step % 10 == 0 or step + 1 == cfg.steps:
            stride = max(1, len(result.loss) // 400)
            rows = [{"step": s, "loss": v} for s, v in result.loss[::stride]]
            ctx.chart("loss", step_lines("Training loss", rows, "loss", "Cross-entropy"))
            ctx.progress(0.05 + 0.8 * (step + 1) / cfg.steps, f"step {step + 1} of {cfg.steps}")

    started = time.perf_counter()
    result = train(model, cfg, pool=pool, on_step=on_step, device=ctx.device)
    ctx.progress(0.88, "measuring IoU on your held-out scans")
    final = evaluate(model, held_scans, space, params["voxel"], device=ctx.device)
    curve.append({"step": cfg.steps, "miou": final["miou"]})
    ctx.metric("heldout_miou", final["miou"], step=cfg.steps)
    ctx.chart("miou", step_lines("Held-out mIoU (your scans)", curve, "miou", "mIoU"))
    metrics: dict[str, float] = {
        "user_miou": final["miou"],
        "user_accuracy": final["accuracy"],
        "train_scans": float(len(train_scans)),
        "heldout_scans": float(len(held)),
        "parameters": float(sizes["total"]),
        "active_parameters": float(sizes["active"]),
        "train_seconds": result.seconds,
        "final_loss": result.loss[-1][1],
    }
    taken: set[str] = set()
    for name in scan_set.class_names:
        metrics[metric_name(name, taken)] = final["iou"].get(name, 0.0)
    rows = [{"class": n, "iou": final["iou"].get(n, 0.0)} for n in scan_set.class_names]
    ctx.chart(
        "class_iou",
        bar_chart("IoU per class on your held-out scans", rows, x="class", y="iou", x_title="Class", y_title="IoU"),
    )
    absent = [n for n in scan_set.class_names if n not in final["iou"]]
    if absent:
        ctx.log(f"not in the held-out scans and never predicted there (IoU reported as 0): {', '.join(absent)}")
    if synmix:
        for name, value in evaluate_synmix(model, synmix, space, params["eval_scenes"], device=ctx.device).items():
            metrics[f"miou_{name}"] = value
        metrics["seen_miou"] = sum(metrics[f"miou_{n}"] for n in synmix) / len(synmix)
    for key, value in metrics.items():
        ctx.metric(key, value)
    if model.cfg.is_moe:
        _usage(ctx, model, held_scans, space, params["voxel"], usage_chart)
    folder = ctx.workdir / "segmenter"
    card = {
        "architecture": params["architecture"],
        "experts": params["experts"],
        "top_k": params["top_k"],
        "classes": list(space.names),
        "user_classes": list(scan_set.class_names),
        "class_codes": dict(zip(scan_set.class_names, scan_set.class_codes, strict=False)),
        "voxel": params["voxel"],
        "datasets": ["your scans", *synmix],
        "steps": params["steps"],
        "miou_heldout": final["miou"],
        "iou": final["iou"],
        "seconds": time.perf_counter() - started,
    }
    # What the scans held: pointcloud-segment's attributes=auto gives the model the same.
    attributes = [
        name
        for name, held_by in (("colour", lambda s: s.rgb is not None), ("intensity", lambda s: s.intensity is not None))
        if any(held_by(s) for s in train_scans)
    ]
    save_user_segmenter(
        model.cpu(),
        folder,
        space,
        params["voxel"],
        card,
        codes=scan_set.class_codes,
        attributes=attributes,
        synmix=synmix,
        attribute_augment=cfg.attribute_augment,
    )
    ctx.artifact("segmenter", folder)
    ctx.register("pointcloud-segmenter", folder, card)
    ctx.log(
        f"the segmenter predicts your classes ({', '.join(scan_set.class_names)}) at {params['voxel']:g} m: "
        "pointcloud-segment labels new scans with them"
    )
    ctx.log(
        f"held-out mIoU {final['miou']:.3f} over {final['points']:,} labelled points "
        f"({', '.join(f'{n} {v:.3f}' for n, v in final['iou'].items())}); {result.seconds:.0f} s of training"
    )
    ctx.progress(1.0, "done")
    return metrics


def _usage(ctx: JobContext, model: Any, scans: list[Any], space: Any, voxel: float, chart: Any) -> None:
    """Expert usage on the held-out scans (top-1 expert per point, per MoE layer)."""
    import numpy as np

    from mlcore.pointcloud.user_train import predict

    totals: list[np.ndarray] = []
    for scan in scans[:4]:
        predict(model, scan, space.user_allowed, voxel, device=ctx.device)
        for i, ids in enumerate(model.point_routing()):
            counts = np.bincount(ids.cpu().numpy(), minlength=model.cfg.experts)
            if i < len(totals):
                totals[i] += counts
            else:
                totals.append(counts)
    if totals:
        usage = {"your scans": [(t / max(1, t.sum())).round(4).tolist() for t in totals]}
        ctx.chart("expert_usage", chart(usage))
