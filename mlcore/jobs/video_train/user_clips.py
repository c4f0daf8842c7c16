"""``video-train`` on the user's own clips: the run behind the kind's ``clips`` upload and
``clip_set`` dataset (what is read and refused: :mod:`mlcore.video.user_clips`; training, held-out
loss and the judge: :mod:`mlcore.video.user_train`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlcore.charts import step_lines
from mlcore.jobs import JobContext, JobError

#: Sample clips drawn per snapshot when the clips have no classes.
UNLABELLED_SAMPLES = 4


def _model(params: dict[str, Any], inputs: dict[str, Any], channels: int, classes: int, device: Any) -> Any:
    import torch

    from mlcore.jobs.video_train import _build, _config
    from mlcore.video.dit import VideoDiT

    if "init" in inputs:
        model = _build(params, inputs, device)
        if int(model.config.in_channels) != channels:
            what = "colour" if int(model.config.in_channels) == 3 else "greyscale"
            raise JobError(
                f"init: the model to fine-tune is {what} ({model.config.in_channels} channel(s)); set colour "
                f"{'on' if what == 'colour' else 'off'} to match it, or train from scratch."
            )
        if int(model.config.num_digits) < classes:
            raise JobError(
                f"init: the model to fine-tune knows {model.config.num_digits} classes and your clips have "
                f"{classes}; train from scratch, or fine-tune a model made for as many classes."
            )
        return model
    torch.manual_seed(params["seed"])
    return VideoDiT(**_config(params), in_channels=channels, num_digits=classes, num_directions=1).to(device)


def run_on_user_clips(params: dict[str, Any], root: Path, inputs: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    import torch

    from mlcore.jobs.video_train import _routing_charts, _train_config, check_fits
    from mlcore.video.dit import AuxLosses, activated_ffn_parameters, parameter_count
    from mlcore.video.media import write_gif, write_strip
    from mlcore.video.pipeline import generate, make_optimiser
    from mlcore.video.user_clips import read_clip_set, split_by_content
    from mlcore.video.user_train import heldout_loss_on, train_on_clips

    frames, size = params["frames"], params["resolution"]
    channels = 3 if params["colour"] else 1
    ctx.progress(0.0, "decoding your clips")
    clip_set = read_clip_set(root, frames=frames, size=size, stride=params["stride"], channels=channels, log=ctx.log)
    train_clips, held = split_by_content(clip_set, params["holdout"])
    classes = max(1, len(clip_set.class_names))
    model = _model(params, inputs, channels, classes, ctx.device)
    config = dict(model.config)
    check_fits(model, params, frames, size)
    train_config = _train_config(params)
    ctx.log(
        f"held out by content hash: {', '.join(held.names)}; training on {len(train_clips.names)} clips; "
        f"VideoDiT {config['ffn']} FFN, {config['attention']} attention, {channels} channel(s), "
        f"{parameter_count(model):,} parameters" + (" (fine-tuning)" if "init" in inputs else "")
    )
    # One sample per class; without classes, a few of the one class.
    sample_labels = torch.arange(classes) if clip_set.labelled else torch.zeros(UNLABELLED_SAMPLES, dtype=torch.long)
    optimiser = make_optimiser(model, train_config)
    heldout_rows: list[dict[str, Any]] = []

    def snapshot(step: int) -> None:
        held_loss = heldout_loss_on(model, held, attention=params["attention"])
        ctx.metric("heldout_rf_loss", held_loss, step=step)
        heldout_rows.append({"step": step, "loss": held_loss})
        ctx.chart(
            "heldout_rf_loss",
            step_lines("Held-out RF loss (your held-out clips)", heldout_rows, "loss", "Velocity MSE"),
        )
        clips = generate(
            model,
            sample_labels,
            torch.zeros_like(sample_labels),
            frames=frames,
            size=size,
            steps=16,
            guidance=3.0,
            seed=0,
            attention=params["attention"],
        )
        clips = clips.cpu().numpy().transpose(0, 2, 1, 3, 4)  # [B, F, C, H, W]: rows of frames
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
        if state.step % max(1, params["steps"] // 200) == 0 or state.step == params["steps"]:
            stride = max(1, len(state.losses) // 400)
            rows = [
                {"step": s + 1, "loss": value, "term": term}
                for s, r, a in state.losses[::stride]
                for term, value in (("rectified flow", r), ("auxiliary", a))
            ]
            ctx.chart("loss", step_lines("Training loss", rows, "loss", "Loss", color="term"))
        if params["sample_every"] and state.step % params["sample_every"] == 0 and state.step < params["steps"]:
            snapshot(state.step)
        ctx.progress(0.02 + 0.8 * state.step / params["steps"], f"step {state.step} of {params['steps']}")

    state = train_on_clips(model, train_config, train_clips, optimiser=optimiser, on_step=on_step)
    ctx.progress(0.85, "final samples and evaluation")
    snapshot(state.step)
    batch = held.subset(list(range(min(16, len(held.names)))))
    _routing_charts(
        ctx,
        model,
        frames,
        size,
        params["attention"],
        AuxLosses,
        batch=(
            torch.from_numpy(batch.clips),
            torch.from_numpy(batch.labels),
            torch.zeros(len(batch.labels), dtype=torch.long),
        ),
    )
    rf_tail = [r for _, r, _ in state.losses[-50:]]
    metrics: dict[str, float] = {
        "final_rf_loss": sum(rf_tail) / len(rf_tail),
        "heldout_rf_loss": heldout_rows[-1]["loss"],
        "parameters": parameter_count(model),
        "activated_ffn_parameters": activated_ffn_parameters(model),
        "cpu_seconds": state.cpu_seconds,
        "train_clips": float(len(train_clips.names)),
        "heldout_clips": float(len(held.names)),
    }
    ctx.progress(0.9, "judging the samples")
    metrics |= _judge(params, train_clips, held, model, ctx)
    for key, value in metrics.items():
        ctx.metric(key, value)
    folder = ctx.workdir / "video-dit"
    model.save_pretrained(folder)
    card = {
        "ffn": config["ffn"],
        "attention": config["attention"],
        "frames": frames,
        "resolution": size,
        "channels": channels,
        "steps": state.step,
        "trained_on": "your clips",
        # The generate job's "digit" is the class index; its direction is the only one (right).
        "classes": list(clip_set.class_names),
        "heldout_rf_loss": metrics["heldout_rf_loss"],
    }
    (folder / "card.json").write_text(json.dumps(card, indent=1))
    ctx.artifact("video-dit", folder)
    ctx.register("video-dit", folder, card)
    ctx.log(
        f"{state.step} steps on your clips: training RF loss {metrics['final_rf_loss']:.4f}, held-out "
        f"{metrics['heldout_rf_loss']:.4f}; model registered as a video-dit"
        + (f" (class i of video-generate's digit = {', '.join(clip_set.class_names)})" if clip_set.labelled else "")
    )
    ctx.progress(1.0, "done")
    return metrics


def _judge(params: dict[str, Any], train: Any, held: Any, model: Any, ctx: JobContext) -> dict[str, float]:
    """Judge-based metrics where they apply, with a log line saying why when they do not."""
    import torch

    from mlcore.video.pipeline import generate
    from mlcore.video.user_train import frechet, judge_accuracy, train_judge

    if not train.class_names:
        ctx.log(
            "no class labels (the clips are not in class folders): the judge-based class accuracy and Fréchet "
            "distance do not apply and are omitted; the held-out RF loss is the measure"
        )
        return {}
    if params["judge_steps"] == 0:
        ctx.log("judge_steps is 0: the judge-based class accuracy and Fréchet distance are not computed")
        return {}
    missing = sorted(set(range(len(train.class_names))) - set(train.labels.tolist()))
    if missing:
        ctx.log(
            f"no training clip of {', '.join(train.class_names[i] for i in missing)}: the judge cannot learn every "
            "class, so the judge-based metrics are omitted"
        )
        return {}
    judge = train_judge(train, steps=params["judge_steps"], seed=params["seed"], device=ctx.device)
    real = torch.from_numpy(held.clips)
    labels = torch.from_numpy(held.labels)
    out = {"judge_heldout_accuracy": judge_accuracy(judge, real, labels)}
    fake = generate(
        model,
        labels,
        torch.zeros_like(labels),
        frames=params["frames"],
        size=params["resolution"],
        steps=16,
        guidance=3.0,
        seed=1,
        attention=params["attention"],
    ).cpu()
    out["class_accuracy"] = judge_accuracy(judge, fake, labels)
    distance = frechet(judge, fake, real)
    if distance is None:
        ctx.log("fewer than two held-out clips: the Fréchet distance needs two per side and is omitted")
    else:
        out["fcd"] = distance
    if out["judge_heldout_accuracy"] < 0.8:
        ctx.log(
            f"the judge names only {out['judge_heldout_accuracy']:.0%} of the real held-out clips right: its grade "
            "of the samples (class_accuracy) is weak evidence; more clips per class make it stronger"
        )
    return out
