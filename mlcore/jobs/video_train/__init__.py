"""``video-train``: train (or fine-tune) a class-conditional video DiT on the user's clips or built-in digits.

The clips are the user's own (an upload or a ``video-clips`` library dataset, classes from folder
names: :mod:`mlcore.jobs.video_train.user_clips`) or, without any, the built-in bouncing digits
(digit × direction).

Choose the attention pattern (full / MoGA + local / local) and the FFN (dense / DiT-MoE top-2 /
ProMoE, or the routers ProMoE is compared with: EC-DiT's expert choice and Race-DiT's global top-k).
Reports rectified-flow and auxiliary loss curves, held-out RF loss on a fixed time grid,
sample clips as training goes, MoGA group sizes or expert usage, and registers the trained model
(a ``video-dit`` the ``video-generate`` job samples from) with the team library.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlcore.charts import heatmap, step_lines
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
    Model,
    Seed,
)
from mlcore.jobs.binding import bind

if TYPE_CHECKING:
    from mlcore.video.pipeline import TrainConfig

ATTENTION = ("full", "moga", "local")
FFN = ("dense", "moe", "promoe", "ec", "race")
PROMOE_ACTIVATIONS = ("identity", "sigmoid", "softmax")
MAX_MEMORY_BYTES = 16 * 2**30
#: Parameters that shape the network (``_config``), not the training run; ``init`` and
#: ``sample_every`` are the job's own.
ARCHITECTURE_PARAMS = ("ffn", "experts", "conditional_routing", "promoe_activation", "groups", "dim", "depth", "heads")
#: The parameters of training on the user's own clips (``clips`` is a file: it arrives as an input).
USER_PARAMS = ("clip_set", "stride", "colour", "holdout", "judge_steps")
#: An archive of clips, or one video alone (cut into consecutive clips: mlcore.video.single_video).
CLIP_FORMATS = ("zip", "tar", "mp4", "webm", "mkv", "gif")
MAX_CLIPS_BYTES = 2 * 2**30


def _config(p: dict[str, Any]) -> dict[str, Any]:
    return {
        "patch_size": (1, 4, 4),
        "dim": p["dim"],
        "depth": p["depth"],
        "heads": p["heads"],
        "ffn_width": 4 * p["dim"],
        "ffn": p["ffn"],
        "num_experts": p["experts"],
        "promoe_conditional": p["conditional_routing"],
        "promoe_activation": p["promoe_activation"],
        "attention": p["attention"],
        "num_groups": p["groups"],
        "sample_frames": p["frames"],
        "sample_size": p["resolution"],
    }


def _validate(p: dict[str, Any]) -> list[tuple[str, str]]:
    errors = []
    if p["dim"] % p["heads"]:
        errors.append(("heads", f"Must divide the width ({p['dim']})."))
    if p["dim"] % 8:
        errors.append(("dim", "Must be a multiple of 8 (the FFN and experts split it)."))
    if p["resolution"] % 4:
        errors.append(("resolution", "Must be a multiple of 4 pixels (the patch size)."))
    return errors


def _estimate(p: dict[str, Any]) -> Estimate:
    from mlcore.video.memory import estimate_memory_bytes, token_count

    config = _config(p)
    # Training keeps every block's activations for backward (≈ depth × inference) at half the rows (no CFG pair).
    memory = estimate_memory_bytes(
        config, batch=p["batch_size"], frames=p["frames"], size=p["resolution"], attention=p["attention"]
    )
    memory = int(memory * max(1, p["depth"]) * 1.5)
    tokens = token_count(config, p["frames"], p["resolution"])
    seconds = p["steps"] * p["batch_size"] * tokens * p["dim"] ** 2 * p["depth"] * 6 * 12 / 2e9
    return Estimate(memory_bytes=memory, seconds=seconds)


def _summarize(scalars: Mapping[str, Any]) -> str:
    """ "Held-out rectified-flow loss 0.412 (training 0.398) after 120 CPU-seconds; 1,234,567 parameters …"."""
    line = (
        f"Held-out rectified-flow loss {scalars['heldout_rf_loss']:.3f} (training {scalars['final_rf_loss']:.3f}) "
        f"after {scalars['cpu_seconds']:.0f} CPU-seconds; {scalars['parameters']:,.0f} parameters, "
        f"{scalars['activated_ffn_parameters']:,.0f} FFN parameters active per token"
    )
    fractions = [v for k, v in scalars.items() if k.startswith("flop_fraction_layer") and v is not None]
    if fractions:
        line += f"; MoGA computes {sum(fractions) / len(fractions):.0%} of full attention's score FLOPs"
    return line + "."


spec = JobSpec(
    name="video-train",
    metrics=(
        Metric(
            key="heldout_rf_loss",
            label="Held-out loss",
            better="lower",
            description="Rectified-flow loss on held-out clips.",
        ),
        Metric(
            key="final_rf_loss",
            label="Training loss",
            better="lower",
            description="Rectified-flow loss at the last step.",
        ),
        Metric(
            key="cpu_seconds",
            label="Training time",
            unit="s",
            better="lower",
            description="Wall-clock seconds of training.",
        ),
        Metric(key="parameters", label="Parameters", description="Parameters of the whole model."),
    ),
    comparison=Comparison.none("Trains one model; the video benchmark compares attention patterns."),
    title="Train a video DiT on your clips (MoGA attention, MoE / ProMoE FFN)",
    summary="Train a small class-conditional video DiT on your own clips, or on built-in bouncing digits, with "
    "the attention and FFN you pick.",
    version=3,
    queue="gpu",
    soft_time_limit=6 * 3600,
    time_limit=6 * 3600 + 300,
    params=(
        File(
            name="clips",
            label="Your clips",
            formats=CLIP_FORMATS,
            max_bytes=MAX_CLIPS_BYTES,
            help="One video (MP4 / MOV / WebM / MKV / GIF, cut into consecutive clips), or a zip or tar of two or "
            "more clips: MP4 / MOV / WebM / MKV / GIF files or folders of PNG / JPEG "
            "frames; one folder per class labels them (walking/a.mp4, running/b.webm).",
        ),
        Dataset(
            name="clip_set",
            label="Or a clip dataset",
            accepts=("video-clips",),
            default=None,
            help="A video-clips dataset from your library (or the sample zoo:moving-shapes).",
        ),
        Int(
            name="stride",
            default=1,
            min=1,
            max=16,
            help="With your clips: keep every n-th frame (a clip needs frames × stride frames).",
        ),
        Bool(name="colour", default=True, help="With your clips: train on RGB (off: greyscale)."),
        Float(
            name="holdout",
            label="Held-out share",
            default=0.2,
            min=0.05,
            max=0.5,
            help="With your clips: the share held out (by content hash, at least one) for the held-out loss.",
        ),
        Int(
            name="judge_steps",
            default=150,
            min=0,
            max=5000,
            help="With labelled clips: train a judge this many steps to grade the samples' classes (0: no judge).",
        ),
        Model(
            name="init",
            accepts=("video-dit",),
            default=None,
            help="Fine-tune this model instead of starting from scratch (its architecture wins over the fields below).",
        ),
        Choice(name="attention", default="moga", options=ATTENTION, help="full, MoGA + local branches, or local only."),
        Choice(
            name="ffn",
            default="dense",
            options=FFN,
            help="dense MLP, DiT-MoE (top-2 + shared), ProMoE, EC-DiT (expert choice) or Race-DiT (global top-k).",
        ),
        Int(name="experts", default=8, min=2, max=64, help="Routed experts (every FFN but dense)."),
        Bool(
            name="conditional_routing", default=True, help="ProMoE: send null-class tokens to the unconditional expert."
        ),
        Choice(
            name="promoe_activation",
            default="identity",
            options=PROMOE_ACTIVATIONS,
            help="ProMoE: the activation on the prototype scores (the paper's identity, or an ablated one).",
        ),
        Float(
            name="contrastive_weight",
            default=1.0,
            min=0.0,
            max=10.0,
            help="ProMoE: routing contrastive loss weight (0 ablates it).",
        ),
        Int(name="groups", default=4, min=1, max=64, help="MoGA groups M."),
        Int(name="dim", default=64, min=16, max=1024, help="Transformer width."),
        Int(name="depth", default=4, min=1, max=24, help="Transformer blocks."),
        Int(name="heads", default=4, min=1, max=16, help="Attention heads (divide the width)."),
        Int(name="frames", default=8, min=1, max=64, help="Frames per training clip."),
        Int(name="resolution", default=16, min=8, max=128, help="Canvas side in pixels (multiple of 4)."),
        Int(name="steps", default=1000, min=1, max=200_000, help="Optimiser steps."),
        Int(name="batch_size", default=16, min=1, max=512, help="Clips per step."),
        Float(name="lr", default=1e-3, min=1e-6, max=1.0, help="AdamW learning rate (linear warm-up)."),
        Int(
            name="sample_every",
            default=250,
            min=0,
            max=100_000,
            help="Sample clips and held-out loss every N steps (0: end only).",
        ),
        Seed(name="seed"),
    ),
    validate=_validate,
    estimate=_estimate,
    guide="""
**What it trains on.** Your own clips (below), or, without any, the built-in bouncing digits (greyscale,
each conditioned on its digit and direction). *Try with a sample* trains on `zoo:moving-shapes`: eight
labelled clips as users bring them (MP4, WebM, GIF and folders of PNG frames in class folders).

**Your own clips.** Upload one video, cut into consecutive unlabelled clips of *frames* × *stride* frames
(at least two, or it is refused: then upload a zip of several clips), or a zip or tar (*clips*) or pick a
`video-clips` dataset (*clip_set*) of two or more clips: MP4 / MOV / WebM / MKV / GIF files (recognised
by content) or folders of PNG / JPEG frames (one folder per clip, natural name order). One folder per
class (`walking/a.mp4`) labels them; clips all at the top level are unlabelled. Each clip keeps its first
*frames* frames (every *stride*-th), centre-cropped to a square of *resolution* pixels, in colour or
greyscale (*colour*). A share of clips (*holdout*) is held out by content hash for the held-out loss.
With labels, a judge trained on your training clips grades the samples (`class_accuracy`, `fcd`), and
`judge_heldout_accuracy` says how far to trust it; without labels these metrics do not apply and the log
says so. Refused with what to fix: a clip that does not decode, frames over 3840×2160 pixels, a clip
shorter than frames × stride, a mix of labelled and loose clips.

**Curves.** `rf_loss` is the rectified-flow training loss (velocity MSE on fresh clips);
`aux_loss` the router losses (MoGA group balance, DiT-MoE Switch balance, ProMoE routing
contrastive). `heldout_rf_loss` is the loss on held-out clips (yours, or digit glyphs never trained on)
at a fixed grid of noise levels t ∈ {0.1, 0.3, 0.5, 0.7, 0.9} with shared noise: the most sensitive way
to compare two runs.

**Samples.** Every `sample_every` steps a frame strip (one row per class: each of your classes, a few
rows for unlabelled clips, or digits 0–9 with directions cycling) and a GIF show what the model
generates with guidance 3.

**Routing.** With MoGA, `group_sizes` shows tokens per group (Σ nᵢ²/N² is the real FLOP
fraction); with an MoE FFN, `expert_usage` shows tokens per expert per layer (ProMoE's
unconditional expert is the last one and takes only null-class tokens).

**The papers.** MoGA (ICLR 2026) routes tokens into groups and attends within groups next to
static local branches; ProMoE (ICLR 2026) routes null-branch tokens to an unconditional expert
and the rest by cosine similarity to prototypes, trained with a routing contrastive loss; it
claims better FID than dense DiTs and DiT-MoE at equal activated compute. Our toy-scale results
are in `bench/results/video.md`.

A good run on the digits: `rf_loss` falling below ~0.3 and digits readable in the strip after a few
thousand steps; direction is usually learnt before the digit's identity. On your clips, compare
`heldout_rf_loss` with `rf_loss` (a widening gap is overfitting) and, with labels, `class_accuracy`
with `judge_heldout_accuracy`.
""".strip(),
    # The sample runs the user-data path: the built-in moving shapes stand in for a user's clips.
    sample={
        "clip_set": "zoo:moving-shapes",
        "steps": 60,
        "batch_size": 8,
        "sample_every": 30,
        "attention": "moga",
        "ffn": "promoe",
        "judge_steps": 100,
        "seed": 0,
    },
    summarize=_summarize,
)


def _build(params: dict[str, Any], inputs: dict[str, Any], device: Any) -> Any:
    import torch

    from mlcore.video.dit import VideoDiT

    if "init" in inputs:
        folder = Path(inputs["init"])
        try:
            model = VideoDiT.from_pretrained(folder)
        except (OSError, ValueError, RuntimeError, TypeError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise JobError(f"Could not load the model to fine-tune: {first[:300]}.") from None
        model.register_to_config(attention=params["attention"])
        for layer in model.attention_layers():
            layer.mode = params["attention"]
        return model.to(device=device, dtype=torch.float32)
    torch.manual_seed(params["seed"])
    return VideoDiT(**_config(params)).to(device)


def _train_config(params: dict[str, Any]) -> TrainConfig:
    """The training run: the spec's values, one attention pattern, and a warm-up of a tenth of the steps."""
    from mlcore.video.pipeline import TrainConfig

    return bind(
        TrainConfig,
        params,
        rename={"resolution": "size", "attention": "attention_modes"},
        convert={"attention": lambda mode: (mode,)},
        skip=(*ARCHITECTURE_PARAMS, *USER_PARAMS, "init", "sample_every"),
        warmup=min(100, params["steps"] // 10),
    )


def check_fits(model: Any, params: dict[str, Any], frames: int, size: int) -> None:
    """Refuse clips the patch grid cannot tile, or a model, batch and clip size a worker cannot hold."""
    from mlcore.video.memory import estimate_memory_bytes

    try:
        model.token_grid(frames, size, size)
    except ValueError as exc:
        raise JobError(f"frames / resolution: {exc}.") from None
    config = dict(model.config)
    need = estimate_memory_bytes(
        config, batch=params["batch_size"], frames=frames, size=size, attention=params["attention"]
    )
    if need * config["depth"] * 1.5 > MAX_MEMORY_BYTES:
        raise JobError("This model, batch and clip size need more memory than a worker has; shrink one of them.")


def run(params: dict[str, Any], inputs: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    import torch

    from mlcore.data.video import DIRECTIONS, NUM_DIGITS
    from mlcore.video.dit import AuxLosses, activated_ffn_parameters, parameter_count
    from mlcore.video.media import write_gif, write_strip
    from mlcore.video.pipeline import generate, heldout_loss, make_optimiser, train

    if "clips" in inputs and "clip_set" in inputs:
        raise JobError(
            "Bring your clips one way: an upload (clips) or a library dataset (clip_set), not both; the job would "
            "otherwise have to ignore one."
        )
    if "clips" in inputs or "clip_set" in inputs:
        from mlcore.jobs.video_train.user_clips import run_on_user_clips

        root = Path(inputs.get("clips") or inputs["clip_set"])
        if root.is_file():  # one video uploaded alone, not an archive
            from mlcore.video.single_video import clips_from_one_video

            root, count = clips_from_one_video(
                root,
                ctx.workdir / "one-video",
                frames=params["frames"],
                size=params["resolution"],
                stride=params["stride"],
                channels=3 if params["colour"] else 1,
            )
            ctx.log(
                f"one video uploaded: cut into {count} consecutive clips; neighbouring clips of one video look "
                "alike, so the held-out loss is optimistic (a zip of separate clips measures it better)"
            )
        return run_on_user_clips(params, root, inputs, ctx)
    changed = [p.name for p in spec.params if p.name in USER_PARAMS[1:] and params[p.name] != p.default]
    if changed:
        raise JobError(
            f"{', '.join(changed)} apply to your own clips, but none were given: upload a zip of clips (clips) or "
            "pick a video-clips dataset (clip_set), or leave them at their defaults."
        )
    model = _build(params, inputs, ctx.device)
    config = dict(model.config)
    frames, size = params["frames"], params["resolution"]
    check_fits(model, params, frames, size)
    train_config = _train_config(params)
    ctx.log(
        f"VideoDiT {config['ffn']} FFN, {config['attention']} attention, "
        f"width {config['dim']}, depth {config['depth']}: "
        f"{parameter_count(model):,} parameters ({activated_ffn_parameters(model):,} activated FFN); "
        f"{frames} frames of {size}², {int(torch.tensor(model.token_grid(frames, size, size)).prod())} tokens"
        + (" (fine-tuning)" if "init" in inputs else "")
    )
    # One sample row per class, directions cycling, so the strip shows every digit.
    sample_digits = torch.arange(NUM_DIGITS)
    sample_directions = torch.arange(NUM_DIGITS) % len(DIRECTIONS)
    optimiser = make_optimiser(model, train_config)
    heldout_rows: list[dict[str, Any]] = []

    def snapshot(step: int) -> None:
        held = heldout_loss(model, clips=32, frames=frames, size=size, attention=params["attention"])
        ctx.metric("heldout_rf_loss", held["mean"], step=step)
        heldout_rows.append({"step": step, "loss": held["mean"]})
        ctx.chart(
            "heldout_rf_loss", step_lines("Held-out RF loss (fixed t grid)", heldout_rows, "loss", "Velocity MSE")
        )
        clips = (
            generate(
                model,
                sample_digits,
                sample_directions,
                frames=frames,
                size=size,
                steps=16,
                guidance=3.0,
                seed=0,
                attention=params["attention"],
            )[:, 0]
            .cpu()
            .numpy()
        )
        write_strip(clips, ctx.workdir / f"samples-{step:06d}.png", scale=max(1, 48 // size))
        ctx.artifact(f"samples at step {step}.png", ctx.workdir / f"samples-{step:06d}.png", "image/png")
        write_gif(clips[0], ctx.workdir / f"sample-{step:06d}.gif", scale=max(2, 96 // size))
        ctx.artifact(f"sample at step {step}.gif", ctx.workdir / f"sample-{step:06d}.gif", "image/gif")
        model.train()

    def on_step(state: Any) -> None:
        ctx.raise_if_cancelled()
        _, rf, aux = state.losses[-1]
        ctx.metric("rf_loss", rf, step=state.step)
        ctx.metric("aux_loss", aux, step=state.step)
        every = max(1, params["steps"] // 200)
        if state.step % every == 0 or state.step == params["steps"]:
            stride = max(1, len(state.losses) // 400)
            rows = [
                {"step": s + 1, "loss": value, "term": term}
                for s, r, a in state.losses[::stride]
                for term, value in (("rectified flow", r), ("auxiliary", a))
            ]
            ctx.chart("loss", step_lines("Training loss", rows, "loss", "Loss", color="term"))
        if params["sample_every"] and state.step % params["sample_every"] == 0 and state.step < params["steps"]:
            snapshot(state.step)
        ctx.progress(0.02 + 0.88 * state.step / params["steps"], f"step {state.step} of {params['steps']}")

    state = train(model, train_config, optimiser=optimiser, on_step=on_step)
    ctx.progress(0.9, "final samples and evaluation")
    snapshot(state.step)
    _routing_charts(ctx, model, frames, size, params["attention"], AuxLosses)

    folder = ctx.workdir / "video-dit"
    model.save_pretrained(folder)
    card = {
        "ffn": config["ffn"],
        "attention": config["attention"],
        "frames": frames,
        "resolution": size,
        "steps": state.step,
        "heldout_rf_loss": heldout_rows[-1]["loss"],
    }
    (folder / "card.json").write_text(json.dumps(card, indent=1))
    ctx.artifact("video-dit", folder)
    ctx.register("video-dit", folder, card)
    rf_tail = [r for _, r, _ in state.losses[-50:]]
    metrics = {
        "final_rf_loss": sum(rf_tail) / len(rf_tail),
        "heldout_rf_loss": heldout_rows[-1]["loss"],
        "parameters": parameter_count(model),
        "activated_ffn_parameters": activated_ffn_parameters(model),
        "cpu_seconds": state.cpu_seconds,
    }
    for key, value in metrics.items():
        ctx.metric(key, value)
    ctx.log(
        f"{state.step} steps: training RF loss {metrics['final_rf_loss']:.4f}, "
        f"held-out {metrics['heldout_rf_loss']:.4f}; "
        f"model registered as a video-dit"
    )
    ctx.progress(1.0, "done")
    return metrics


def _routing_charts(
    ctx: JobContext,
    model: Any,
    frames: int,
    size: int,
    attention: str,
    aux_type: Any,
    batch: tuple[Any, Any, Any] | None = None,
) -> None:
    """Group sizes (MoGA) and expert usage (MoE FFNs) on one held-out batch: ``batch`` (clips
    [B, C, F, H, W], classes, directions as tensors), or 16 held-out bouncing digits."""
    import torch

    from mlcore.data.video import bouncing_digits

    if batch is None:
        data = bouncing_digits(16, frames=frames, size=size, split="test", seed=99)
        batch = (
            torch.from_numpy(data.clips).unsqueeze(1),
            torch.from_numpy(data.digits),
            torch.from_numpy(data.directions),
        )
    x, digits, directions = (part.to(model.device) for part in batch)
    aux = aux_type()
    with torch.no_grad():
        model(x, torch.full((len(x),), 0.5, device=x.device), digits, directions, aux=aux)
    if attention == "moga":
        rows = []
        for layer, block in enumerate(model.attention_layers()):
            if block.last_stats is not None:
                rows += [
                    {"layer": layer, "index": g, "tokens": int(n)} for g, n in enumerate(block.last_stats.group_sizes())
                ]
                ctx.metric(f"flop_fraction_layer{layer}", block.last_stats.flop_fraction())
        ctx.chart(
            "group_sizes",
            heatmap(
                "Tokens per MoGA group (one held-out batch)",
                rows,
                x="index",
                y="layer",
                value="tokens",
                x_title="Group",
                y_title="Layer",
                value_title="Tokens",
            ),
        )
    if aux.routings:
        rows = [
            {"layer": layer, "index": e, "tokens": int(n)}
            for layer, routing in enumerate(aux.routings)
            for e, n in enumerate(routing.expert_counts())
        ]
        ctx.chart(
            "expert_usage",
            heatmap(
                "Tokens per expert (one held-out batch)",
                rows,
                x="index",
                y="layer",
                value="tokens",
                x_title="Expert",
                y_title="Layer",
                value_title="Tokens",
            ),
        )
