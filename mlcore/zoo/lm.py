"""Train a zoo MoE language model from its recipe, resumably, and export a commit-ready checkpoint.

Training: AdamW with linear warm-up and cosine decay; each batch draws random windows from the
train split of every source in turn (equal shares, so the small documentation corpus is not
drowned by the other two); loss = next-token cross-entropy + ``balance_coef`` × the mean over
layers of the per-layer Switch balance loss  E · Σ_e f_e · P_e  (Fedus et al. 2022, eq. 4).

The work directory holds ``state.pt`` (model, optimiser, sampler and RNG state) every
``checkpoint_every`` steps, so an interrupted run resumes where it stopped and ends bit-identical
to an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlcore.data.textset import source_splits
from mlcore.train import warmup_cosine
from mlcore.zoo.recipes import LMRecipe
from mlcore.zoo.tokenizer import EOS, load_hf_tokenizer, save_hf_tokenizer, train_bpe

if TYPE_CHECKING:
    import torch

#: Characters of each source's train split the tokenizer sees: enough for 2K merges, seconds to train.
TOKENIZER_SAMPLE_CHARS = 2_000_000
ROOT = Path(__file__).resolve().parents[2]
CHECKPOINTS = Path(__file__).resolve().parent / "checkpoints"
#: Checkpoints trained under another seed than the recipe's (``train NAME --seed N``): robustness
#: studies only, never committed (var/ is ignored).
SEED_CHECKPOINTS = ROOT / "var" / "zoo-seeds"


def _sample(blocks: list[str], limit: int) -> list[str]:
    out, total = [], 0
    for block in blocks:
        if total >= limit:
            break
        out.append(block)
        total += len(block)
    return out


def per_layer_balance_loss(router_logits: tuple[torch.Tensor, ...], top_k: int) -> torch.Tensor:
    """Mean over layers of E · Σ_e f_e · P_e, with f_e the share of top-k slots given to expert e
    and P_e its mean router probability, both over this batch's tokens *in that layer*."""
    import torch

    losses = []
    for logits in router_logits:
        probs = torch.softmax(logits.float(), dim=-1)
        num_experts = probs.shape[-1]
        chosen = torch.topk(probs, top_k, dim=-1).indices
        f = (
            torch.zeros(num_experts, device=probs.device).scatter_add_(
                0, chosen.reshape(-1), torch.ones(chosen.numel(), device=probs.device)
            )
            / chosen.numel()
        )
        losses.append(num_experts * (f * probs.mean(dim=0)).sum())
    return torch.stack(losses).mean()


def build_model(recipe: LMRecipe, *, seed: int | None = None) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(recipe.seed if seed is None else seed)
    model = AutoModelForCausalLM.from_config(recipe.hf_config(), dtype=torch.float32)
    # grouped_mm runs the fused [E, ...] expert tensors ~2.5x faster than the per-expert loop on a CPU.
    model.set_experts_implementation("grouped_mm")
    return model


def _encode_sources(tokenizer: Any, splits: dict[str, list[str]]) -> list[torch.Tensor]:
    import torch

    streams = []
    for blocks in splits.values():
        ids: list[int] = []
        for encoded in tokenizer.backend_tokenizer.encode_batch(blocks, add_special_tokens=False):
            ids.extend(encoded.ids)
            ids.append(tokenizer.convert_tokens_to_ids(EOS))
        streams.append(torch.tensor(ids, dtype=torch.long))
    return streams


def _batch(streams: list[torch.Tensor], recipe: LMRecipe, generator: torch.Generator) -> torch.Tensor:
    import torch

    rows = []
    for row in range(recipe.batch_size):
        stream = streams[row % len(streams)]
        start = int(torch.randint(0, len(stream) - recipe.context, (1,), generator=generator))
        rows.append(stream[start : start + recipe.context])
    return torch.stack(rows)


def prepare_tokenizer(recipe: LMRecipe, workdir: Path, splits: dict[str, list[str]]) -> Any:
    folder = workdir / "tokenizer"
    if not (folder / "tokenizer.json").exists():
        texts = [block for blocks in splits.values() for block in _sample(blocks, TOKENIZER_SAMPLE_CHARS)]
        save_hf_tokenizer(train_bpe(texts, vocab_size=recipe.vocab_size), folder, model_max_length=recipe.context)
    return load_hf_tokenizer(folder)


def train(recipe: LMRecipe, workdir: Path, *, steps: int | None = None, log: Any = print) -> tuple[Any, Any]:
    """Train (or resume) ``recipe`` in ``workdir``; return ``(model, tokenizer)``.

    ``steps`` overrides the recipe's step count (tests); the schedule still spans the recipe's steps.
    """
    import torch

    workdir.mkdir(parents=True, exist_ok=True)
    total = recipe.steps if steps is None else steps
    splits = source_splits(recipe.sources, "train")
    tokenizer = prepare_tokenizer(recipe, workdir, splits)
    streams = _encode_sources(tokenizer, splits)
    model = build_model(recipe)
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay, betas=(0.9, 0.95))
    generator = torch.Generator().manual_seed(recipe.seed)
    start = 0
    state_path, log_path = workdir / "state.pt", workdir / "train_log.jsonl"
    if state_path.exists():
        state = torch.load(state_path, weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        generator.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])
        start = state["step"]
        log(f"resuming {recipe.name} at step {start}")
    model.train()
    began = time.perf_counter()
    for step in range(start, total):
        for group in optimizer.param_groups:
            group["lr"] = recipe.lr * warmup_cosine(step, steps=recipe.steps, warmup_steps=recipe.warmup, floor=0.1)
        batch = _batch(streams, recipe, generator)
        out = model(input_ids=batch, output_router_logits=True)
        ce = torch.nn.functional.cross_entropy(
            out.logits[:, :-1].reshape(-1, out.logits.shape[-1]), batch[:, 1:].reshape(-1)
        )
        balance = per_layer_balance_loss(out.router_logits, recipe.top_k)
        loss = ce + recipe.balance_coef * balance
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        done = step + 1
        if done % 10 == 0 or done == total:
            record = {"step": done, "ce": round(ce.item(), 4), "balance": round(balance.item(), 4)}
            record["lr"] = round(optimizer.param_groups[0]["lr"], 6)
            record["seconds"] = round(time.perf_counter() - began, 1)
            with log_path.open("a") as f:
                f.write(json.dumps(record) + "\n")
            log(json.dumps(record))
        if done % recipe.checkpoint_every == 0 or done == total:
            state = {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "generator": generator.get_state(),
                "torch_rng": torch.get_rng_state(),
                "step": done,
            }
            torch.save(state, state_path.with_suffix(".tmp"))
            state_path.with_suffix(".tmp").replace(state_path)
    model.eval()
    return model, tokenizer


def checkpoint_folder(recipe: LMRecipe) -> Path:
    """Where ``recipe``'s checkpoint lives: the committed folder under the recipe's own seed,
    ``var/zoo-seeds/NAME-sSEED`` under any other."""
    if recipe.run_name == recipe.name:
        return CHECKPOINTS / recipe.name
    return SEED_CHECKPOINTS / recipe.run_name


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def export(
    model: Any,
    tokenizer: Any,
    recipe: LMRecipe,
    target: Path,
    *,
    workdir: Path,
    command: str,
    metrics: dict[str, Any],
) -> Path:
    """Write the commit-ready checkpoint: fp16 safetensors, config, tokenizer, training log,
    the recipe command and a manifest with every file's sha256."""
    import torch
    import transformers

    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    half = model.to(torch.float16)
    half.save_pretrained(target)
    model.to(torch.float32)
    tokenizer.save_pretrained(target)
    if (workdir / "train_log.jsonl").exists():
        shutil.copy2(workdir / "train_log.jsonl", target / "train_log.jsonl")
    (target / "RECIPE.md").write_text(
        f"# {recipe.title}\n\nReproduce with:\n\n    {command}\n\nRecipe:\n\n```json\n"
        + json.dumps(recipe.describe(), indent=1)
        + "\n```\n"
    )
    files = {p.name: sha256_of(p) for p in sorted(target.iterdir()) if p.is_file()}
    manifest = {
        "name": recipe.name,
        "title": recipe.title,
        "command": command,
        "recipe": recipe.describe(),
        "metrics": metrics,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "files": files,
    }
    (target / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return target


def verify_manifest(folder: Path) -> dict[str, Any]:
    """Check every file the manifest lists against its sha256; raise ``ValueError`` on a mismatch."""
    manifest = json.loads((folder / "manifest.json").read_text())
    for name, digest in manifest["files"].items():
        path = folder / name
        if not path.is_file():
            raise ValueError(f"{folder.name}: {name} is missing; retrain with `{manifest['command']}`")
        if sha256_of(path) != digest:
            raise ValueError(f"{folder.name}: {name} does not match its sha256; retrain with `{manifest['command']}`")
    return manifest
