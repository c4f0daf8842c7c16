"""``video-generate``: sample class-conditional clips from a video DiT with full, MoGA or local attention.

The model is a ``video-dit`` (the zoo's bouncing-digits DiT or one a ``video-train`` job
registered, on bouncing digits or on the user's own clips). Its card
(:mod:`mlcore.video.model_card`) says what it takes: a bouncing-digits model is conditioned on
``digit`` and ``direction``, a model of the user's clips on ``class_name`` (one of its own class
names), greyscale or RGB; frames and resolution default to what it was trained on. Outputs: an MP4
(H.264, yuv420p, faststart) and a GIF preview of the clips side by side, a frame strip PNG (rows =
clips), in colour for an RGB model, timings, the judge's verdict when the model was trained on
bouncing digits (a log line says why it is omitted otherwise), and for MoGA a chart of tokens per
group in every layer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlcore.charts import bar_chart, small_multiples
from mlcore.jobs import (
    Choice,
    Comparison,
    Estimate,
    Float,
    Int,
    JobContext,
    JobError,
    JobSpec,
    Metric,
    Model,
    Seed,
    Text,
)

if TYPE_CHECKING:
    from torch import Tensor

    from mlcore.video.model_card import VideoModelCard

DIRECTIONS = ("right", "left", "down", "up")
#: When the judge metrics exist (the Metric descriptions say so on every page).
JUDGE_NOTE = (
    " Bouncing-digits models at 8 frames of 16² only; for other models (your clips) it is omitted and the log says why."
)
#: Frames and resolution when neither the job nor the model says (the zoo model's).
DEFAULT_FRAMES, DEFAULT_RESOLUTION = 8, 16
ATTENTION = ("full", "moga", "local")
#: The zoo model's configuration: what ``estimate`` assumes before the model is resolved.
DEFAULT_CONFIG: dict[str, Any] = {"patch_size": (1, 4, 4), "dim": 64, "ffn_width": 256, "heads": 4, "num_groups": 4}
#: The most a worker's job may hold; ``run`` re-checks with the model's real configuration.
MAX_MEMORY_BYTES = 16 * 2**30


def _validate(p: dict[str, Any]) -> list[tuple[str, str]]:
    if p["resolution"] is not None and p["resolution"] % 4:
        return [("resolution", "Must be a multiple of 4 pixels (the DiT's patch size).")]
    return []


def _estimate(p: dict[str, Any]) -> Estimate:
    from mlcore.video.memory import estimate_memory_bytes, sampling_seconds

    # Before the model is resolved its own frames and resolution are unknown: assume the zoo model's.
    p = {**p, "frames": p["frames"] or DEFAULT_FRAMES, "resolution": p["resolution"] or DEFAULT_RESOLUTION}
    memory = estimate_memory_bytes(
        DEFAULT_CONFIG, batch=p["clips"], frames=p["frames"], size=p["resolution"], attention=p["attention"]
    )
    return Estimate(memory_bytes=memory, seconds=sampling_seconds(DEFAULT_CONFIG, p))


def _summarize(scalars: Mapping[str, Any]) -> str:
    """ "Sampled in 4.2 s (0.21 s per step, 512 tokens per clip); the judge recognises 67% of clips …"."""
    line = (
        f"Sampled in {scalars['seconds_total']:.1f} s ({scalars['seconds_per_step']:.2f} s per step, "
        f"{scalars['tokens_per_clip']:.0f} tokens per clip)"
    )
    if scalars.get("recognised") is not None:
        line += (
            f"; the judge recognises {scalars['recognised']:.0%} of clips (digit {scalars['digit_recognised']:.0%}, "
            f"direction {scalars['direction_recognised']:.0%})"
        )
    if scalars.get("flop_fraction") is not None:
        line += f"; MoGA computes {scalars['flop_fraction']:.0%} of full attention's score FLOPs"
    return line + "."


spec = JobSpec(
    name="video-generate",
    metrics=(
        Metric(
            key="recognised",
            label="Clips recognised",
            unit="%",
            better="higher",
            proportion=True,
            n="clips",
            description="Share of clips in which the judge names both the requested digit and direction." + JUDGE_NOTE,
        ),
        Metric(
            key="digit_recognised",
            label="Digit recognised",
            unit="%",
            better="higher",
            proportion=True,
            n="clips",
            description="Share of clips showing the requested digit." + JUDGE_NOTE,
        ),
        Metric(
            key="direction_recognised",
            label="Direction recognised",
            unit="%",
            better="higher",
            proportion=True,
            n="clips",
            description="Share of clips moving in the requested direction." + JUDGE_NOTE,
        ),
        Metric(
            key="flop_fraction",
            label="Attention FLOPs vs full",
            unit="%",
            better="lower",
            beside="seconds_per_step",
            description="MoGA's attention-score FLOPs as a share of full attention's: a count, not a speed. At "
            "a few hundred tokens grouping costs more time than it saves; read the wall-clock beside it.",
        ),
        Metric(
            key="seconds_per_step",
            label="Wall-clock per step",
            unit="s",
            better="lower",
            description="Wall-clock seconds per sampling step on the worker.",
        ),
        Metric(
            key="seconds_total",
            label="Sampling time",
            unit="s",
            better="lower",
            description="Wall-clock seconds of sampling.",
        ),
    ),
    comparison=Comparison.none("Samples with one attention pattern; run it again with another to compare (Compare)."),
    title="Generate a video with MoGA attention",
    summary="Sample clips of a digit moving in a direction, or of a class of your own clips, from a video DiT with "
    "full, MoGA or local attention.",
    version=1,
    queue="gpu",
    soft_time_limit=1800,
    time_limit=1900,
    params=(
        Model(
            name="model", accepts=("video-dit",), default="zoo:video-dit-digits", help="The video DiT to sample from."
        ),
        Int(
            name="digit",
            default=3,
            min=0,
            max=9,
            help="Bouncing-digits models: which digit moves (a model of your clips takes class_name instead).",
        ),
        Choice(
            name="direction",
            default="right",
            options=DIRECTIONS,
            help="Bouncing-digits models: where the digit starts moving.",
        ),
        Text(
            name="class_name",
            label="Class",
            default="",
            max_length=200,
            help="Models trained on your clips: the class to sample, one of the class names on the model's card "
            "(empty: every class in turn).",
        ),
        Int(name="clips", default=4, min=1, max=16, help="Clips to sample (one noise seed each)."),
        Int(
            name="frames",
            default=None,
            min=1,
            max=256,
            help="Frames per clip (empty: what the model was trained on, from its card; the zoo model: 8).",
        ),
        Int(
            name="resolution",
            default=None,
            min=8,
            max=256,
            help="Height = width in pixels, a multiple of 4 (empty: what the model was trained on; the zoo model: 16).",
        ),
        Int(name="steps", default=20, min=1, max=200, help="Euler sampling steps (flow matching)."),
        Float(name="guidance", default=3.0, min=1.0, max=20.0, help="Classifier-free guidance scale (1 = off)."),
        Choice(
            name="attention",
            default="moga",
            options=ATTENTION,
            help="full: every token sees every token; moga: MoGA groups + spatial windows + per-frame, averaged; "
            "local: windows + per-frame only.",
        ),
        Seed(name="seed"),
    ),
    validate=_validate,
    estimate=_estimate,
    guide="""
**What you see.** The MP4 and the GIF show the sampled clips side by side; the frame strip lays
them out frame by frame (one row per clip). A good clip shows one clean digit of the requested
class moving steadily in the requested direction and bouncing off the walls.

**A model trained on your clips.** The job reads the model's card: an RGB model gives colour
output, *frames* and *resolution* left empty take what the model was trained on, and the condition
is *class_name*, one of the class names the model learnt from your folder names (the form's error
lists them; empty samples every class in turn). A model of unlabelled clips takes no condition.
*digit* and *direction* belong to bouncing-digits models and are refused for such a model when
changed. The bouncing-digits judge cannot grade your classes, so `recognised` and its parts are
omitted and the log says why; `video-train` reports a judge of your own classes (`class_accuracy`).

**Numbers.** `recognised` is the share of clips in which a separately trained judge (a small 3-D
CNN, ≥ 98% on real clips) names both the requested digit and the direction; `digit_recognised`
and `direction_recognised` split it. Timings are wall-clock seconds on the worker.

**Tokens per group** (MoGA only): how many tokens each layer's router sent to each group during
sampling. MoGA's cost is Σ nᵢ² / N² of full attention (`flop_fraction`), so balanced groups are
cheap and one dominant group is as expensive as full attention.

**The paper.** MoGA (Mixture-of-Groups Attention, ICLR 2026) routes every token to one of M groups
with a light learnable router and attends only within groups, scaled by the routing probability,
next to static local branches (spatial windows, per-frame attention) whose outputs are averaged. It
claims ~71% sparsity at quality on par with full attention for minute-long video. The zoo model
was trained with the three patterns cycled step by step, so all three options here are in
distribution. Our benchmark (`bench/results/video.md`) measures the speed-up and the real FLOP
fraction up to 65,536 tokens, and quality against full, local-only, random-group, block top-k and
sliding-tile attention at 128 and 1,024 tokens per clip: at 128 tokens MoGA + local matches full
attention within 5%; at 1,024 tokens the seeds spread more than the patterns differ, so parity there
is inconclusive at this scale.
""".strip(),
    sample={"clips": 2, "steps": 12, "frames": 8, "resolution": 16, "attention": "moga", "seed": 0},
    summarize=_summarize,
)


def _group_chart(sizes: list[list[int]]) -> dict[str, Any]:
    rows = [
        {"layer": f"layer {layer}", "group": f"g{group}", "tokens": count}
        for layer, counts in enumerate(sizes)
        for group, count in enumerate(counts)
    ]
    bars = bar_chart(
        "Tokens per MoGA group (summed over sampling steps and clips)",
        rows,
        x="group",
        y="tokens",
        x_title="Group",
        y_title="Tokens",
        keep_order=False,
        color="group",
        legend=False,
    )
    # Vega-Lite's own cell size (20 px per group, 300 px tall), now explicit: facets cannot fit the page.
    return small_multiples(bars, column="layer", width={"step": 20}, height=300)


def _load(folder: Path, device: Any) -> Any:
    import torch

    from mlcore.video.dit import VideoDiT

    if not (folder / "config.json").is_file():
        raise JobError("The model folder has no config.json; pick a video-dit from the zoo or a video-train job.")
    try:
        model = VideoDiT.from_pretrained(folder)
    except (OSError, ValueError, RuntimeError, TypeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise JobError(f"Could not load the video DiT: {first[:300]}.") from None
    return model.to(device=device, dtype=torch.float32).eval()


def _changed(params: dict[str, Any], *names: str) -> list[str]:
    """Which of ``names`` differ from their defaults (a form sends every field, so only a change is a choice)."""
    defaults = {p.name: p.default for p in spec.params}
    return [name for name in names if params[name] != defaults[name]]


def _conditions(params: dict[str, Any], card: VideoModelCard) -> tuple[Tensor, Tensor, str]:
    """(class labels, direction labels, what was asked in words) for ``params['clips']`` clips, from the
    parameters that fit the model's card; a parameter that does not fit it is refused, never ignored."""
    import torch

    n, name = params["clips"], params["class_name"]
    if card.digits:
        if name:
            raise JobError(
                f"class_name ({name!r}) picks a class of a model trained on your clips; this model was trained on "
                "bouncing digits and is conditioned by digit and direction: set those and leave class_name empty."
            )
        digit, direction = params["digit"], DIRECTIONS.index(params["direction"])
        return (
            torch.full((n,), digit, dtype=torch.long),
            torch.full((n,), direction, dtype=torch.long),
            f"a {digit} moving {params['direction']}",
        )
    own = f"this model was {card.describe}"
    wrong = _changed(params, "digit") + (_changed(params, "direction") if card.directions == 1 else [])
    if wrong:
        pick = (
            f"pick one of its classes ({', '.join(card.classes)}) with class_name"
            if card.labelled
            else "it takes no condition"
        )
        raise JobError(
            f"{' and '.join(wrong)} condition bouncing-digits models, but {own}: {pick}, and leave "
            f"{' and '.join(wrong)} at {'their defaults' if len(wrong) > 1 else 'its default'}."
        )
    direction = DIRECTIONS.index(params["direction"]) if card.directions > 1 else 0
    if direction >= card.directions:
        known = ", ".join(DIRECTIONS[: card.directions])
        raise JobError(f"direction: this model knows {card.directions} directions ({known}).")
    directions = torch.full((n,), direction, dtype=torch.long)
    if not card.labelled:
        if name:
            raise JobError(f"class_name ({name!r}): {own}, so there is no class to pick; leave class_name empty.")
        return torch.zeros(n, dtype=torch.long), directions, "the model's one (unlabelled) class"
    if name:
        if name not in card.classes:
            raise JobError(
                f"class_name: {name!r} is not a class of this model; its classes are {', '.join(card.classes)}."
            )
        return torch.full((n,), card.classes.index(name), dtype=torch.long), directions, f"class {name}"
    labels = torch.arange(n) % len(card.classes)
    shown = ", ".join(card.classes[int(i)] for i in labels)
    return labels, directions, f"every class in turn ({shown})"


def run(params: dict[str, Any], inputs: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    import numpy as np
    import torch

    from mlcore.video.media import write_gif, write_mp4, write_strip
    from mlcore.video.memory import estimate_memory_bytes
    from mlcore.video.model_card import read_card
    from mlcore.video.pipeline import generate

    if "model" not in inputs:
        raise JobError("Pick a video model (e.g. zoo:video-dit-digits).")
    ctx.progress(0.0, "loading the model")
    folder = Path(inputs["model"])
    model = _load(folder, ctx.device)
    config = dict(model.config)
    card = read_card(folder, config)
    # Left empty, frames and resolution are what the model was trained on (its card, else its config).
    params = {
        **params,
        "frames": params["frames"] or card.frames,
        "resolution": params["resolution"] or card.resolution,
    }
    if params["resolution"] % 4:
        raise JobError(f"resolution: the model's card says {params['resolution']} pixels; set a multiple of 4.")
    frames, size = params["frames"], params["resolution"]
    ctx.log(
        f"the model was {card.describe}; sampling {frames} frames of {size}²"
        + ("" if (frames, size) == (card.frames, card.resolution) else " (not what it was trained on)")
    )
    try:
        model.token_grid(frames, size, size)
    except ValueError as exc:
        raise JobError(f"frames / resolution: {exc}; pick values divisible by the patch.") from None
    need = estimate_memory_bytes(config, batch=params["clips"], frames=frames, size=size, attention=params["attention"])
    if need > MAX_MEMORY_BYTES:
        raise JobError(
            f"{params['clips']} clips of {frames} frames at {size}² need about "
            f"{need / 2**30:.1f} GiB with {params['attention']} attention; "
            f"the limit is {MAX_MEMORY_BYTES / 2**30:.0f} GiB. "
            "Use fewer clips, frames or pixels, or local attention."
        )
    labels, directions, asked = _conditions(params, card)
    if int(labels.max()) >= int(config["num_digits"]) or int(directions.max()) >= int(config["num_directions"]):
        raise JobError(f"This model knows {config['num_digits']} digits and {config['num_directions']} directions.")

    sizes = [torch.zeros(int(config["num_groups"]), dtype=torch.long) for _ in model.attention_layers()]
    flop_fractions: list[float] = []
    step_times: list[float] = []
    last = [time.perf_counter()]

    def record_step() -> None:
        """The wall time and group sizes of the sampling step that just finished."""
        now = time.perf_counter()
        step_times.append(now - last[0])
        last[0] = now
        if params["attention"] == "moga":
            for layer, attention in enumerate(model.attention_layers()):
                if attention.last_stats is not None:
                    sizes[layer] += attention.last_stats.group_sizes().cpu()
                    flop_fractions.append(attention.last_stats.flop_fraction())

    def on_step(i: int, total: int) -> None:
        # Called before every step, so a cancel stops sampling within one step.
        ctx.raise_if_cancelled()
        if i:
            record_step()
        ctx.progress(0.05 + 0.85 * i / total, f"sampling step {i + 1} of {total}")

    started = time.perf_counter()
    last[0] = started
    clips = generate(
        model,
        labels,
        directions,
        frames=frames,
        size=size,
        steps=params["steps"],
        guidance=params["guidance"],
        seed=params["seed"],
        attention=params["attention"],
        on_step=on_step,
    )
    record_step()
    seconds = time.perf_counter() - started
    # [n, F, C, H, W]: the media writers take a clip as frames of C channels (1: grey, 3: RGB).
    clips_np = clips.cpu().numpy().transpose(0, 2, 1, 3, 4)

    ctx.progress(0.92, "encoding the video")
    tiled = np.concatenate(list(clips_np), axis=-1)  # clips side by side
    write_mp4(tiled, ctx.workdir / "clips.mp4", scale=max(2, 128 // size * 2 // 2))
    ctx.artifact("clips.mp4", ctx.workdir / "clips.mp4", "video/mp4")
    write_gif(tiled, ctx.workdir / "preview.gif", scale=max(2, 96 // size))
    ctx.artifact("preview.gif", ctx.workdir / "preview.gif", "image/gif")
    write_strip(clips_np, ctx.workdir / "frames.png", scale=max(1, 64 // size))
    ctx.artifact("frames.png", ctx.workdir / "frames.png", "image/png")

    tokens = int(np.prod(model.token_grid(frames, size, size)))
    metrics: dict[str, Any] = {
        "seconds_total": seconds,
        "seconds_per_step": float(np.mean(step_times)) if step_times else seconds,
        "tokens_per_clip": tokens,
    }
    if params["attention"] == "moga":
        metrics["flop_fraction"] = float(np.mean(flop_fractions)) if flop_fractions else 1.0
        ctx.chart("tokens_per_group", _group_chart([s.tolist() for s in sizes]))
    verdict = _judge(clips, labels, directions, params, card, ctx)
    metrics.update(verdict)
    for key, value in metrics.items():
        ctx.metric(key, value)
    summary = (
        f"{params['clips']} clip(s) of {asked}, {frames}×{size}² ({tokens} tokens), {params['attention']} attention, "
        f"{params['steps']} steps, guidance {params['guidance']:g}: {seconds:.1f} s "
        f"({metrics['seconds_per_step']:.2f} s/step)"
    )
    if "recognised" in verdict:
        summary += (
            f"; the judge recognises {verdict['recognised']:.0%} (digit {verdict['digit_recognised']:.0%}, "
            f"direction {verdict['direction_recognised']:.0%})"
        )
    if "flop_fraction" in metrics:
        summary += f"; MoGA computes {metrics['flop_fraction']:.0%} of full attention's score FLOPs"
    ctx.log(summary)
    (ctx.workdir / "timings.json").write_text(json.dumps({"step_seconds": step_times, "total": seconds}, indent=1))
    ctx.artifact("timings.json", ctx.workdir / "timings.json", "application/json")
    ctx.progress(1.0, "done")
    return metrics


def _judge(
    clips: Any, digits: Any, directions: Any, params: dict[str, Any], card: VideoModelCard, ctx: JobContext
) -> dict[str, float]:
    """The zoo judge's verdict where it applies (a bouncing-digits model sampled at the 8 × 16² it was
    trained on); otherwise a log line saying why the judge metrics are omitted."""
    from mlcore.video.classifier import judge
    from mlcore.zoo.video import CHECKPOINTS, load_judge

    omitted = "the judge metrics (recognised, digit_recognised, direction_recognised) are omitted"
    if not card.digits:
        ctx.log(
            f"the bouncing-digits judge does not apply: this model was {card.describe}, and the judge knows only "
            f"digits and directions; {omitted}"
        )
        return {}
    if params["frames"] != 8 or params["resolution"] != 16:
        ctx.log(
            f"the judge was trained on 8 frames of 16² and these clips are {params['frames']} frames of "
            f"{params['resolution']}²; {omitted}"
        )
        return {}
    if not (CHECKPOINTS / "video-judge" / "manifest.json").is_file():
        ctx.log(f"the judge's checkpoint is not installed on this worker; {omitted}")
        return {}
    result = judge(load_judge(), clips.cpu(), digits, directions)
    return {
        "recognised": result.accuracy,
        "digit_recognised": result.digit_accuracy,
        "direction_recognised": result.direction_accuracy,
    }
