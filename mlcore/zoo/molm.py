"""The ``molm-tiny`` zoo recipe: a tiny latent-diffusion generator and its MOLM markers + extractor.

``python -m mlcore.zoo.molm train [--stage STAGE]`` runs (resuming each stage from
``var/zoo/molm-tiny/STAGE/state.pt``):

1. ``vae`` — AutoencoderKL (32×32 ↔ 4×8×8) on seeded crops of the offline photos;
2. ``ae2`` — an *independently trained* autoencoder (other seed, other widths) for the
   regeneration attack (WAVES), never seen by the markers;
3. ``unet`` — a class-unconditional latent UNet2DModel (DDPM) on the VAE's latents;
4. ``molm`` — the markers and the extractor (:func:`mlcore.watermark.train.train_molm`);
5. ``export`` — fp16 safetensors + configs + ``card.json`` + ``train_log.jsonl`` + ``manifest.json``
   (sha256 of every file) into ``mlcore/zoo/checkpoints/molm/``.

Every stage's budget is a step count fixed here, so the recipe is data, not a judgement call.

Where and how long it runs is not part of the recipe (:class:`Runtime`): ``--device cuda`` trains
every stage there (the same batches, keys and distortions as on the CPU; checkpoints are always
saved from CPU tensors, so a run resumes on any device), ``--bf16`` autocasts the forward passes,
and ``--wall-minutes M`` is one wall-clock deadline for the whole command, checked before every
step of every stage: when it passes, the running stage saves its ``state.pt`` and the command
exits with status 3 — run it again to resume. ``--steps`` / ``--batch-size`` override the MOLM
stage's (longer, larger runs on a GPU) and the exported card records them; ``--out`` exports
elsewhere. Every log line carries the device and the seconds since the command started
(``wall_seconds``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# Not "checkpoints/molm-tiny": tests/mlcore/zoo/test_committed.py loads every checkpoints/<item name>/ as an LM.
CHECKPOINT = Path(__file__).resolve().parent / "checkpoints" / "molm"
STAGES = ("vae", "ae2", "unet", "molm", "export")


@dataclass(frozen=True)
class MolmRecipe:
    name: str = "molm-tiny"
    seed: int = 0
    vae_steps: int = 200
    vae_lr: float = 2e-3
    ae2_steps: int = 80
    ae2_widths: tuple[int, ...] = (16, 16, 32)
    unet_steps: int = 250
    unet_lr: float = 1e-3
    unet_pool: int = 8192
    batch_size: int = 16
    molm: dict[str, Any] = field(
        default_factory=lambda: {
            "num_adapters": 8,
            "rank": 8,
            "steps": 4000,
            # The fix for chance-level training: a content-independent bias shift per adapter (W1's weight-only adapters
            # gave every image its own, uncorrelated perturbation per bit: chance after 2,400 steps)
            # and the extractor's matched-filter read-out. λ turns on early: at λ = 0 the markers
            # only grow (10 dB in W1's run), which the imperceptibility loss then has to undo.
            "init_scale": 0.05,
            "shift_scale": 0.5,
            "linear_readout": True,
            "key_only_fraction": 0.1,
            "ramp_fraction": 0.4,
            "lr_extractor": 2e-3,
            "lam": 2.0,  # 1.0 over 1,800 steps gave 0.83 bits at 23.9 dB; 2.0 over 4,000: 0.96 at 25.1 dB
            "batch_size": 16,
            "eval_every": 50,
        }
    )


RECIPE = MolmRecipe()
COMMAND = "python -m mlcore.zoo.molm train"
EXIT_OUT_OF_TIME = 3


@dataclass(frozen=True)
class Runtime:
    """Where and for how long a recipe run trains — not part of the recipe (the same steps on any device)."""

    device: str = "cpu"
    bf16: bool = False
    deadline: float | None = None  # a time.perf_counter() instant; None: no wall-clock budget
    started: float = field(default_factory=time.perf_counter)

    def loop_options(self) -> dict[str, Any]:
        """The keyword arguments every training loop takes (mlcore.watermark.pretrain / train)."""
        return {"device": self.device, "bf16": self.bf16, "deadline": self.deadline}


def _logger(path: Path, runtime: Runtime | None = None) -> Any:
    path.parent.mkdir(parents=True, exist_ok=True)
    runtime = runtime or Runtime()

    def log(row: dict[str, Any]) -> None:
        row = {**row, "device": runtime.device, "wall_seconds": round(time.perf_counter() - runtime.started, 1)}
        print(json.dumps(row), flush=True)
        with path.open("a") as handle:
            handle.write(json.dumps(row) + "\n")

    return log


def _done(folder: Path) -> bool:
    return (folder / "config.json").is_file() or (folder / "vae" / "config.json").is_file()


def stage_vae(workdir: Path, recipe: MolmRecipe = RECIPE, runtime: Runtime | None = None) -> None:
    from mlcore.watermark.generator import tiny_vae
    from mlcore.watermark.pretrain import LoopConfig, train_vae

    if _done(workdir / "vae"):
        return
    runtime = runtime or Runtime()
    vae = train_vae(
        tiny_vae(seed=recipe.seed),
        workdir / "vae-state",
        LoopConfig(steps=recipe.vae_steps, lr=recipe.vae_lr, batch_size=recipe.batch_size, seed=recipe.seed, warmup=15),
        log=_logger(workdir / "train_log.jsonl", runtime),
        **runtime.loop_options(),
    )
    vae.to("cpu").save_pretrained(workdir / "vae")


def stage_ae2(workdir: Path, recipe: MolmRecipe = RECIPE, runtime: Runtime | None = None) -> None:
    from mlcore.watermark.generator import tiny_vae
    from mlcore.watermark.pretrain import LoopConfig, train_vae

    if _done(workdir / "ae2"):
        return
    runtime = runtime or Runtime()
    vae = train_vae(
        tiny_vae(seed=recipe.seed + 1, block_out_channels=recipe.ae2_widths),
        workdir / "ae2-state",
        LoopConfig(
            steps=recipe.ae2_steps, lr=recipe.vae_lr, batch_size=recipe.batch_size, seed=recipe.seed + 7, warmup=10
        ),
        log=_logger(workdir / "train_log.jsonl", runtime),
        stage="ae2",
        **runtime.loop_options(),
    )
    vae.to("cpu").save_pretrained(workdir / "ae2")


def stage_unet(workdir: Path, recipe: MolmRecipe = RECIPE, runtime: Runtime | None = None) -> None:
    from diffusers import DDIMScheduler

    from mlcore.watermark.generator import load_vae, tiny_unet
    from mlcore.watermark.pretrain import LoopConfig, encode_pool, train_unet

    if (workdir / "unet" / "config.json").is_file():
        return
    runtime = runtime or Runtime()
    vae = load_vae(workdir / "vae").to(runtime.device)
    latents = encode_pool(vae, recipe.unet_pool, seed=recipe.seed + 99)
    unet = train_unet(
        tiny_unet(seed=recipe.seed),
        latents,
        vae.config.scaling_factor,
        workdir / "unet-state",
        LoopConfig(
            steps=recipe.unet_steps, lr=recipe.unet_lr, batch_size=32, seed=recipe.seed, warmup=20, log_every=25
        ),
        log=_logger(workdir / "train_log.jsonl", runtime),
        **runtime.loop_options(),
    )
    unet.to("cpu").save_pretrained(workdir / "unet")
    DDIMScheduler(num_train_timesteps=1000, beta_schedule="squaredcos_cap_v2", clip_sample=False).save_pretrained(
        workdir / "scheduler"
    )


def stage_molm(workdir: Path, recipe: MolmRecipe = RECIPE, runtime: Runtime | None = None) -> None:
    from mlcore.watermark.generator import load_generator
    from mlcore.watermark.train import MolmConfig, save_molm, train_molm

    if (workdir / "molm" / "extractor" / "config.json").is_file():
        return
    runtime = runtime or Runtime()
    generator = load_generator(workdir)
    result = train_molm(
        generator,
        MolmConfig(**recipe.molm, seed=recipe.seed),
        workdir=workdir / "molm-state",
        log=_logger(workdir / "train_log.jsonl", runtime),
        **runtime.loop_options(),
    )
    save_molm(result, workdir / "molm")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def command_for(recipe: MolmRecipe) -> str:
    """The command that retrains ``recipe``: the plain one plus the MOLM overrides that differ from :data:`RECIPE`."""
    flags = [
        f"--{flag} {recipe.molm[key]}"
        for key, flag in (("steps", "steps"), ("batch_size", "batch-size"))
        if recipe.molm.get(key) != RECIPE.molm.get(key)
    ]
    return " ".join([COMMAND, *flags])


def stage_export(workdir: Path, recipe: MolmRecipe = RECIPE, target: Path = CHECKPOINT) -> None:
    """fp16 copies of every model (half the bytes; loaded back as fp32) + card + log + manifest.

    The manifest's command stays the plain one (what ``build_molm_tiny`` tells a user to run); the
    card's ``recipe.command`` carries any ``--steps`` / ``--batch-size`` override.
    """
    import torch
    from diffusers import AutoencoderKL, UNet2DModel

    from mlcore.uploads import forget_source_paths
    from mlcore.watermark.extractor import Extractor
    from mlcore.watermark.markers import Markers

    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for name, cls, source in (
        ("vae", AutoencoderKL, workdir / "vae"),
        ("ae2", AutoencoderKL, workdir / "ae2"),
        ("unet", UNet2DModel, workdir / "unet"),
        ("extractor", Extractor, workdir / "molm" / "extractor"),
        ("markers", Markers, workdir / "molm" / "markers"),
    ):
        cls.from_pretrained(source, torch_dtype=torch.float32).to(torch.float16).save_pretrained(target / name)
    shutil.copytree(workdir / "scheduler", target / "scheduler")
    forget_source_paths(target)  # diffusers records the training folder, a path of this machine
    card = json.loads((workdir / "molm" / "card.json").read_text())
    card["recipe"] = {**asdict(recipe), "command": command_for(recipe)}
    (target / "card.json").write_text(json.dumps(card, indent=1))
    shutil.copy2(workdir / "train_log.jsonl", target / "train_log.jsonl")
    files = {str(p.relative_to(target)): _sha256(p) for p in sorted(target.rglob("*")) if p.is_file()}
    manifest = {"name": recipe.name, "command": COMMAND, "files": files}
    (target / "manifest.json").write_text(json.dumps(manifest, indent=1))


def verify(folder: Path = CHECKPOINT) -> dict[str, Any]:
    manifest = json.loads((folder / "manifest.json").read_text())
    for name, digest in manifest["files"].items():
        path = folder / name
        if not path.is_file() or _sha256(path) != digest:
            label = manifest.get("name", folder.name)
            raise ValueError(f"{label}: {name} is missing or altered; retrain with `{manifest['command']}`")
    return manifest


def copy_markers_folder(name: str, folder: Path, command: str, target: Path) -> None:
    """Zoo builder of a committed markers folder: verified against its manifest, then copied
    (``extractor/``, ``markers/``, ``vae/``, ``unet/``, ...); a :class:`JobError` names ``command`` otherwise."""
    from mlcore.errors import JobError

    if not (folder / "manifest.json").is_file():
        raise JobError(f"The zoo has no checkpoint for {name!r}; train it with `{command}`.")
    try:
        manifest = verify(folder)
    except ValueError as exc:
        raise JobError(str(exc)) from None
    for file in manifest["files"]:
        (target / file).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(folder / file, target / file)


def build_molm_tiny(target: Path) -> None:
    """Zoo builder: the verified committed checkpoint, copied."""
    copy_markers_folder("molm-tiny", CHECKPOINT, "python -m mlcore.zoo.molm train", target)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m mlcore.zoo.molm")
    parser.add_argument("command", choices=("train",))
    parser.add_argument("--stage", choices=(*STAGES, "all"), default="all")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--workdir", type=Path, default=ROOT / "var" / "zoo" / RECIPE.name)
    parser.add_argument("--device", default="cpu", help="torch device for every stage (cpu, cuda, cuda:1, ...)")
    parser.add_argument(
        "--wall-minutes",
        type=float,
        default=None,
        help="wall-clock budget for the whole command, checked before every step; exit 3 (state saved) when spent",
    )
    parser.add_argument("--steps", type=int, default=None, help=f"MOLM stage steps (recipe: {RECIPE.molm['steps']})")
    parser.add_argument(
        "--batch-size", type=int, default=None, help=f"MOLM stage batch size (recipe: {RECIPE.molm['batch_size']})"
    )
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast for the forward passes (off: float32)")
    parser.add_argument(
        "--out", type=Path, default=CHECKPOINT, help="where the export stage writes (default: the zoo's checkpoint)"
    )
    args = parser.parse_args(argv)
    for name in ("steps", "batch_size"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.wall_minutes is not None and args.wall_minutes < 0:
        parser.error("--wall-minutes cannot be negative")
    return args


def recipe_for(args: argparse.Namespace) -> MolmRecipe:
    """:data:`RECIPE` with the command line's MOLM overrides."""
    overrides = {k: v for k, v in (("steps", args.steps), ("batch_size", args.batch_size)) if v is not None}
    return replace(RECIPE, molm={**RECIPE.molm, **overrides}) if overrides else RECIPE


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter()  # the budget counts the imports too: the device tool's clock does
    import torch

    from mlcore.watermark.pretrain import WallBudgetSpent

    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"--device {args.device}: this torch sees no CUDA device", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    deadline = None if args.wall_minutes is None else started + 60 * args.wall_minutes
    runtime = Runtime(device=str(device), bf16=args.bf16, deadline=deadline, started=started)
    recipe = recipe_for(args)
    stages = STAGES if args.stage == "all" else (args.stage,)
    for stage in stages:
        try:
            if stage == "export":
                stage_export(args.workdir, recipe, args.out)
            else:
                trainers = {"vae": stage_vae, "ae2": stage_ae2, "unet": stage_unet, "molm": stage_molm}
                trainers[stage](args.workdir, recipe, runtime)
        except WallBudgetSpent as spent:
            _logger(args.workdir / "train_log.jsonl", runtime)(
                {"stage": spent.stage, "stopped": "wall budget", "step": spent.step, "of": spent.steps}
            )
            print(f"{spent} (the same command continues from the saved state)", file=sys.stderr)
            return EXIT_OUT_OF_TIME
    return 0


if __name__ == "__main__":
    sys.exit(main())
