"""The zoo's ``lora-base-tiny``: the frozen base encoder LD-MoLE's experts adapt.

Train (resumable, ``var/zoo/lora-base-tiny/state.pt``) and export the commit-ready checkpoint to
``mlcore/zoo/checkpoints/lora-base-tiny/`` with::

    python -m mlcore.zoo train lora-base-tiny

The checkpoint is fp32 safetensors + ``config.json``, the training log and a manifest holding
every file's sha256 (the format :func:`mlcore.zoo.lm.verify_manifest` checks).
"""

from __future__ import annotations

import argparse
import json
import shutil
from dataclasses import asdict
from pathlib import Path

NAME = "lora-base-tiny"
COMMAND = f"python -m mlcore.zoo train {NAME}"
ROOT = Path(__file__).resolve().parents[2]
CHECKPOINT = ROOT / "mlcore" / "zoo" / "checkpoints" / NAME


def train(workdir: Path, target: Path, *, threads: int = 1) -> Path:
    import torch

    from mlcore.lora_moe.base import EncoderConfig, TinyEncoder
    from mlcore.lora_moe.pipeline import PretrainConfig, pretrain, pretrain_loss
    from mlcore.lora_moe.tasks import pretrain_batch
    from mlcore.zoo.lm import sha256_of

    torch.set_num_threads(threads)
    config, model_config = PretrainConfig(), EncoderConfig()
    workdir.mkdir(parents=True, exist_ok=True)
    state_path, log_path = workdir / "state.pt", workdir / "train_log.jsonl"
    model, optimizer_state, start = TinyEncoder(model_config), None, 0
    if state_path.exists():
        state = torch.load(state_path, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer_state, start = state["optimizer"], state["step"]
        print(f"resuming at step {start}", flush=True)
    window: list[tuple[float, float]] = []

    def on_step(step: int, loss: float, accuracy: float, m: TinyEncoder, optimizer: torch.optim.Optimizer) -> None:
        window.append((loss, accuracy))
        if (step + 1) % 100 == 0:
            row = {"step": step + 1, "loss": sum(w[0] for w in window) / len(window)}
            row["token_accuracy"] = sum(w[1] for w in window) / len(window)
            window.clear()
            with log_path.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
        if (step + 1) % 250 == 0:
            state = {"model": m.state_dict(), "optimizer": optimizer.state_dict(), "step": step + 1}
            torch.save(state, state_path)

    model = pretrain(config, model=model, optimizer_state=optimizer_state, start_step=start, on_step=on_step)
    with torch.no_grad():
        metrics: dict[str, float] = {}
        from mlcore.lora_moe.tasks import PRETRAIN_TASKS, TASK_TOKEN

        batch = pretrain_batch(4000, torch.Generator().manual_seed(999))
        for task in PRETRAIN_TASKS:
            rows = batch.tokens[:, 0] == TASK_TOKEN[task]
            sub = type(batch)(batch.tokens[rows], batch.targets[rows])
            metrics[f"token_accuracy_{task}"] = round(pretrain_loss(model, sub)[1], 4)
    print(json.dumps(metrics), flush=True)
    if target.exists():
        shutil.rmtree(target)
    model.save(target)
    shutil.copy2(log_path, target / "train_log.jsonl")
    recipe = {"pretrain": asdict(config), "model": asdict(model_config), "tasks": list(PRETRAIN_TASKS)}
    (target / "RECIPE.md").write_text(
        f"# {NAME}\n\nTiny pre-LN encoder pre-trained on copy, reverse, prefix sum mod 10 and sort of 8 digits "
        f"(the base model LD-MoLE's LoRA experts adapt).\n\nReproduce with:\n\n    {COMMAND}\n\n```json\n"
        + json.dumps(recipe, indent=1)
        + "\n```\n"
    )
    files = {p.name: sha256_of(p) for p in sorted(target.iterdir()) if p.is_file()}
    manifest = {"name": NAME, "command": COMMAND, "recipe": recipe, "metrics": metrics, "files": files}
    (target / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return target


def build_lora_base_tiny(target: Path) -> None:
    """The zoo builder: copy the verified committed checkpoint."""
    from mlcore.zoo.committed import copy_committed

    copy_committed(NAME, target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mlcore.zoo")
    sub = parser.add_subparsers(dest="command", required=True)
    cmd = sub.add_parser("train", help=f"train {NAME} (resumes) and export its checkpoint")
    cmd.add_argument("name", choices=[NAME])
    cmd.add_argument("--threads", type=int, default=1)
    cmd.add_argument("--workdir", type=Path, default=ROOT / "var" / "zoo" / NAME)
    cmd.add_argument("--out", type=Path, default=CHECKPOINT)
    args = parser.parse_args(argv)
    print(f"checkpoint written to {train(args.workdir, args.out, threads=args.threads)}")
    return 0
