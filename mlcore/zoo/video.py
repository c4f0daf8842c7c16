"""The video zoo: the class-conditional bouncing-digits DiT and its judge, each by a fixed recipe.

``python -m mlcore.zoo train video-judge`` trains the classifier that grades generated clips;
``python -m mlcore.zoo train video-dit-digits`` trains the DiT (resuming from
``var/zoo/NAME/state.pt``), grades 200 generated clips with the judge and writes the commit-ready
checkpoint to ``mlcore/zoo/checkpoints/NAME/`` (fp16 safetensors, config, ``train_log.jsonl``,
``RECIPE.md``, ``manifest.json`` with sha256s). Training stops at the recipe's step count or its
CPU-time budget, whichever comes first; ``--cpu-minutes 0`` exports what the saved state holds.

``--device cuda`` trains (and evaluates) on a GPU; the CPU-time budget then applies only when
``--cpu-minutes`` is given, since a GPU process's CPU time is mostly launch overhead and waiting.
``--wall-minutes N`` bounds this run's training by the wall clock (checked before every step, on
any device; evaluation and export follow), so a lent GPU with a fixed time slot can train, grade
and export in one command. The state in ``workdir/state.pt`` resumes on either device, and the
exported checkpoint is written from the CPU in float16 whatever the device. Log lines and metrics
carry the wall seconds and the device.

The DiT trains with the attention pattern cycled step by step over full / MoGA + local / local, so
one checkpoint serves every pattern of the ``video-generate`` job (see the guide there).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINTS = ROOT / "mlcore" / "zoo" / "checkpoints"


@dataclass(frozen=True)
class VideoDiTRecipe:
    name: str = "video-dit-digits"
    title: str = "Bouncing-digits video DiT (8 frames of 16×16, class = digit × direction)"
    model: dict[str, Any] = field(
        default_factory=lambda: {
            "patch_size": (1, 4, 4),
            "dim": 64,
            "depth": 4,
            "heads": 4,
            "ffn_width": 256,
            "ffn": "dense",
            "attention": "moga",
            "num_groups": 4,
            "window": (4, 2, 2),
            "sample_frames": 8,
            "sample_size": 16,
        }
    )
    steps: int = 32000
    batch_size: int = 16
    lr: float = 1e-3
    warmup: int = 100
    ema: float = 0.999  #: the exported weights are this moving average (DiT practice)
    attention_modes: tuple[str, ...] = ("full", "moga", "local")
    cpu_minutes: float = 130.0
    seed: int = 0
    checkpoint_every: int = 50
    eval_clips_per_class: int = 5
    eval_steps: int = 20
    eval_guidance: float = 3.0


@dataclass(frozen=True)
class JudgeRecipe:
    name: str = "video-judge"
    title: str = "Bouncing-digits judge (3-D CNN: digit and direction)"
    steps: int = 2000
    batch_size: int = 32
    lr: float = 3e-3
    width: int = 48
    seed: int = 0


RECIPES: dict[str, Any] = {"video-dit-digits": VideoDiTRecipe(), "video-judge": JudgeRecipe()}


def sha256_of(path: Path) -> str:
    from mlcore.zoo.lm import sha256_of as digest

    return digest(path)


def write_manifest(target: Path, recipe: Any, command: str, metrics: dict[str, Any]) -> None:
    import torch

    (target / "RECIPE.md").write_text(
        f"# {recipe.title}\n\nReproduce with:\n\n    {command}\n\nRecipe:\n\n```json\n"
        + json.dumps(asdict(recipe), indent=1)
        + "\n```\n"
    )
    files = {p.name: sha256_of(p) for p in sorted(target.iterdir()) if p.is_file() and p.name != "manifest.json"}
    manifest = {
        "name": recipe.name,
        "title": recipe.title,
        "command": command,
        "recipe": asdict(recipe),
        "metrics": metrics,
        "versions": {"torch": torch.__version__},
        "files": files,
    }
    (target / "manifest.json").write_text(json.dumps(manifest, indent=1))


def train_judge(recipe: JudgeRecipe, target: Path, workdir: Path, *, device: str = "cpu") -> dict[str, Any]:
    import torch

    from mlcore.video.classifier import train_classifier

    workdir.mkdir(parents=True, exist_ok=True)
    log = (workdir / "train_log.jsonl").open("w")
    started, wall_started = time.process_time(), time.perf_counter()

    def on_step(step: int, loss: float) -> None:
        if step % 20 == 0:
            entry = {
                "step": step,
                "loss": round(loss, 5),
                "wall_seconds": round(time.perf_counter() - wall_started, 1),
                "device": str(device),
            }
            log.write(json.dumps(entry) + "\n")
            log.flush()

    model, result = train_classifier(
        steps=recipe.steps,
        batch=recipe.batch_size,
        lr=recipe.lr,
        seed=recipe.seed,
        width=recipe.width,
        on_step=on_step,
        device=device,
    )
    log.close()
    metrics = {
        **asdict(result),
        "cpu_seconds": round(time.process_time() - started, 1),
        "wall_seconds": round(time.perf_counter() - wall_started, 1),
        "device": str(device),
    }
    print(json.dumps(metrics))
    if target.exists():
        shutil.rmtree(target)
    model.to(device="cpu", dtype=torch.float16).save_pretrained(target)
    shutil.copy2(workdir / "train_log.jsonl", target / "train_log.jsonl")
    write_manifest(target, recipe, f"python -m mlcore.zoo train {recipe.name}", metrics)
    return metrics


def load_judge(folder: Path | None = None) -> Any:
    """The committed judge in float32 (verified against its manifest)."""
    import torch

    from mlcore.video.classifier import ClipClassifier
    from mlcore.zoo.lm import verify_manifest

    folder = folder or CHECKPOINTS / "video-judge"
    verify_manifest(folder)
    return ClipClassifier.from_pretrained(folder, torch_dtype=torch.float32).eval()


def load_dit(folder: Path) -> Any:
    import torch

    from mlcore.video.dit import VideoDiT

    return VideoDiT.from_pretrained(folder, torch_dtype=torch.float32).eval()


def grade(
    model: Any, judge: Any, *, per_class: int, steps: int, guidance: float, seed: int = 0, attention: str | None = None
) -> dict[str, float]:
    """Generate ``per_class`` clips for each (digit, direction) and let the judge name them."""
    import torch

    from mlcore.data.video import DIRECTIONS, NUM_DIGITS
    from mlcore.video.classifier import judge as run_judge
    from mlcore.video.pipeline import generate_in_chunks

    digits = torch.arange(NUM_DIGITS).repeat_interleave(len(DIRECTIONS) * per_class)
    directions = torch.arange(len(DIRECTIONS)).repeat_interleave(per_class).repeat(NUM_DIGITS)
    clips = generate_in_chunks(
        model, digits, directions, seed=seed, steps=steps, guidance=guidance, attention=attention
    )
    result = run_judge(judge, clips, digits, directions)
    return {
        "digit_accuracy": result.digit_accuracy,
        "direction_accuracy": result.direction_accuracy,
        "accuracy": result.accuracy,
    }


def train_dit(
    recipe: VideoDiTRecipe,
    target: Path,
    workdir: Path,
    *,
    cpu_minutes: float | None = None,
    wall_minutes: float | None = None,
    device: str = "cpu",
) -> dict[str, Any]:
    """Train (resuming ``workdir/state.pt``), grade and export the DiT; see the module docstring for
    the budgets. ``wall_minutes`` counts from this call's start, not across resumes."""
    import torch

    from mlcore.video.dit import VideoDiT
    from mlcore.video.pipeline import (
        TrainConfig,
        heldout_loss,
        load_state,
        make_ema,
        make_optimiser,
        save_state,
        train,
    )

    wall_started = time.perf_counter()
    workdir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(recipe.seed)
    # Initialised on the CPU and then moved, so every device starts from the same weights; the
    # optimiser and the moving average are made after the move, on the model's device.
    model = VideoDiT(**recipe.model).to(device)
    config = TrainConfig(
        steps=recipe.steps,
        batch_size=recipe.batch_size,
        lr=recipe.lr,
        warmup=recipe.warmup,
        attention_modes=recipe.attention_modes,
        seed=recipe.seed,
        ema=recipe.ema,
    )
    optimiser = make_optimiser(model, config)
    ema = make_ema(model, config)
    state_path = workdir / "state.pt"
    state = load_state(state_path, model, optimiser, ema, map_location="cpu") if state_path.exists() else None
    on_cpu = torch.device(device).type == "cpu"
    cpu_budget = 60 * (recipe.cpu_minutes if cpu_minutes is None else cpu_minutes)
    if cpu_minutes is None and not on_cpu:
        cpu_budget = float("inf")
    wall_budget = float("inf") if wall_minutes is None else 60 * wall_minutes
    log_path = workdir / "train_log.jsonl"
    log_path.touch()  # a run that stops before its first logged step still exports a (short) log

    def on_step(state: Any) -> None:
        if state.step % recipe.checkpoint_every == 0 or state.step == config.steps:
            window = state.losses[-recipe.checkpoint_every :]
            entry = {
                "step": state.step,
                "rf_loss": round(sum(r[1] for r in window) / len(window), 5),
                "aux_loss": round(sum(r[2] for r in window) / len(window), 5),
                "cpu_seconds": round(state.cpu_seconds, 1),
                "wall_seconds": round(state.wall_seconds, 1),
                "device": str(device),
            }
            with log_path.open("a") as log:
                log.write(json.dumps(entry) + "\n")
            print(json.dumps(entry), flush=True)
            save_state(state_path, model, optimiser, state, config, ema)

    state = train(
        model,
        config,
        state=state,
        optimiser=optimiser,
        on_step=on_step,
        should_stop=lambda s: s.cpu_seconds >= cpu_budget or time.perf_counter() - wall_started >= wall_budget,
        ema=ema,
    )
    save_state(state_path, model, optimiser, state, config, ema)
    if ema is not None:
        model.load_state_dict(ema.module.state_dict())
    judge = load_judge().to(device)
    metrics: dict[str, Any] = {
        "steps": state.step,
        "cpu_seconds": round(state.cpu_seconds, 1),
        "wall_seconds": round(state.wall_seconds, 1),
        "device": str(device),
    }
    for mode in ("full", "moga", "local"):
        metrics[f"heldout_rf_loss_{mode}"] = round(heldout_loss(model, attention=mode)["mean"], 5)  # type: ignore[arg-type]
        metrics[f"generated_{mode}"] = grade(
            model,
            judge,
            per_class=recipe.eval_clips_per_class,
            steps=recipe.eval_steps,
            guidance=recipe.eval_guidance,
            attention=mode,
        )
        print(mode, metrics[f"heldout_rf_loss_{mode}"], metrics[f"generated_{mode}"], flush=True)
    if target.exists():
        shutil.rmtree(target)
    model.to(device="cpu", dtype=torch.float16).save_pretrained(target)
    shutil.copy2(log_path, target / "train_log.jsonl")
    write_manifest(target, recipe, f"python -m mlcore.zoo train {recipe.name}", metrics)
    return metrics


def build_video_dit_digits(target: Path) -> None:
    """Catalog builder: copy the verified committed checkpoint."""
    from mlcore.zoo.committed import copy_committed

    copy_committed("video-dit-digits", target)


def build_video_judge(target: Path) -> None:
    from mlcore.zoo.committed import copy_committed

    copy_committed("video-judge", target)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m mlcore.zoo")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train a recipe (resumes) and export its checkpoint")
    train.add_argument("name", choices=sorted(RECIPES))
    train.add_argument("--threads", type=int, default=1)
    train.add_argument(
        "--cpu-minutes",
        type=float,
        default=None,
        help="override the DiT's CPU budget (0: export now; on CPU the recipe's budget is the default)",
    )
    train.add_argument(
        "--wall-minutes",
        type=float,
        default=None,
        help="wall-clock budget of this run's DiT training, checked every step (0: export now)",
    )
    train.add_argument("--device", default="cpu", help="torch device to train and evaluate on (cpu, cuda, cuda:1)")
    train.add_argument("--workdir", type=Path, default=None)
    train.add_argument("--out", type=Path, default=None)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    recipe = RECIPES[args.name]
    workdir = args.workdir or ROOT / "var" / "zoo" / recipe.name
    target = args.out or CHECKPOINTS / recipe.name
    if isinstance(recipe, JudgeRecipe):
        train_judge(recipe, target, workdir, device=args.device)
    else:
        train_dit(
            recipe, target, workdir, cpu_minutes=args.cpu_minutes, wall_minutes=args.wall_minutes, device=args.device
        )
    print(f"checkpoint written to {target}")
    return 0
