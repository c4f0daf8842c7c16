"""Pre-train the base encoder, then fine-tune it with a mixture of LoRA experts (LD-MoLE, section 4
of the method card): the procedures, apart from the networks they train."""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from mlcore.lora_moe.base import EncoderConfig, TinyEncoder
from mlcore.lora_moe.mixture import LoRAMixtureLinear, MixtureConfig, attach_lora_mixture, trainable_parameters
from mlcore.lora_moe.tasks import LENGTH, LEVELS, TaskBatch, level_batch, pretrain_batch
from mlcore.train import warmup_cosine_scheduler


# -- pre-training ------------------------------------------------------------------------------
@dataclass(frozen=True)
class PretrainConfig:
    steps: int = 3000
    batch_size: int = 128
    lr: float = 3e-3
    warmup: int = 100
    weight_decay: float = 0.01
    seed: int = 0


def pretrain_loss(model: TinyEncoder, batch: TaskBatch) -> tuple[Tensor, float]:
    """Per-position cross-entropy on the digit positions, and the token accuracy."""
    logits = model.pretrain_head(model(batch.tokens)[:, 1:])
    loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch.targets.reshape(-1))
    return loss, float((logits.argmax(-1) == batch.targets).float().mean())


def pretrain(
    config: PretrainConfig,
    model_config: EncoderConfig | None = None,
    *,
    model: TinyEncoder | None = None,
    optimizer_state: dict[str, Any] | None = None,
    start_step: int = 0,
    on_step: Callable[[int, float, float, TinyEncoder, torch.optim.Optimizer], None] | None = None,
) -> TinyEncoder:
    """Train the encoder on copy / reverse / prefix sum / sort; ``model`` + ``optimizer_state`` +
    ``start_step`` resume an interrupted run (data are drawn from a generator seeded per step)."""
    torch.manual_seed(config.seed)
    model = model or TinyEncoder(model_config or EncoderConfig())
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    if optimizer_state:
        optimizer.load_state_dict(optimizer_state)
    model.train()
    for step in range(start_step, config.steps):
        warm = min(1.0, (step + 1) / config.warmup)
        cosine = 0.5 * (1 + torch.cos(torch.tensor(torch.pi * step / config.steps)).item())
        for group in optimizer.param_groups:
            group["lr"] = config.lr * warm * (0.05 + 0.95 * cosine)
        generator = torch.Generator().manual_seed(config.seed * 1_000_003 + step)
        loss, accuracy = pretrain_loss(model, pretrain_batch(config.batch_size, generator))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if on_step is not None:
            on_step(step, loss.item(), accuracy, model, optimizer)
    return model.eval()


# -- fine-tuning -------------------------------------------------------------------------------
@dataclass(frozen=True)
class FinetuneConfig:
    steps: int = 400
    batch_size: int = 64
    lr: float = 3e-3
    weight_decay: float = 0.01
    label_smoothing: float = 0.1
    train_examples: int = 4000
    eval_examples: int = 2000
    levels: tuple[int, ...] = LEVELS
    task: str = "majority"
    seed: int = 0


@dataclass
class FinetuneResult:
    accuracy: float
    #: Held-out accuracy per level d (int) or per uploaded group (its name).
    accuracy_by_level: dict[Any, float]
    #: Mean active experts per token, per adapted projection ("0.q", ...) and position.
    active_heatmap: dict[str, list[float]]
    #: How many (token, projection) pairs used 0, 1, 2, … experts.
    active_histogram: list[int]
    mean_active: float
    zero_expert_rate: float
    #: Share of (token, projection) pairs with at most 2 active experts.
    at_most_two_rate: float
    trainable_parameters: int
    seconds: float
    losses: list[tuple[int, float]] = field(default_factory=list)
    mean_lambda: float | None = None

    def metrics(self) -> dict[str, float]:
        out = {
            "accuracy": self.accuracy,
            "mean_active_experts": self.mean_active,
            "zero_expert_rate": self.zero_expert_rate,
            "at_most_two_rate": self.at_most_two_rate,
            "trainable_parameters": float(self.trainable_parameters),
            "seconds": self.seconds,
        }
        out.update({_accuracy_name(d): a for d, a in self.accuracy_by_level.items()})
        if self.mean_lambda is not None:
            out["mean_lambda"] = self.mean_lambda
        return out


def _accuracy_name(group: Any) -> str:
    """``accuracy_d3`` for a level, ``accuracy_<group>`` (a safe slug) for an uploaded group."""
    if isinstance(group, int):
        return f"accuracy_d{group}"
    return "accuracy_" + re.sub(r"[^A-Za-z0-9_.-]+", "_", str(group))[:40]


class Classifier(nn.Module):
    """The adapted base and a fresh classification head on its pooled state (the tiny encoder's
    level token, a language model's last token)."""

    def __init__(self, encoder: nn.Module, classes: int = 2) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = nn.Linear(encoder.hidden_size, classes)

    def forward(self, tokens: Tensor, mask: Tensor | None = None) -> Tensor:
        # The head trains in float32 whatever dtype the frozen base keeps (a bfloat16 checkpoint).
        return self.head(self.encoder.pooled(tokens, mask).to(self.head.weight.dtype))


def _evaluate(
    model: Classifier, adapted: list[tuple[str, LoRAMixtureLinear]], data: TaskBatch, levels: tuple[Any, ...]
) -> dict[str, Any]:
    model.eval()
    with torch.no_grad():
        predictions = model(data.tokens, data.mask).argmax(-1)
    correct = (predictions == data.targets).float()
    shape = data.tokens.shape
    real = torch.ones(shape, dtype=torch.bool) if data.mask is None else data.mask.bool()  # padding is no token
    counts = torch.stack([module.active.reshape(shape) for _, module in adapted])  # [modules, B, N]
    used = counts[:, real]  # [modules, real tokens]
    per_position = real.sum(0).clamp_min(1)
    lams = [module.lam.reshape(shape)[real] for _, module in adapted if module.lam is not None]
    experts = max(module.num_experts for _, module in adapted)
    return {
        "accuracy": float(correct.mean()),
        "by_level": {} if data.levels is None else {d: float(correct[data.levels == d].mean()) for d in levels},
        "heatmap": {name: ((counts[i] * real).sum(0) / per_position).tolist() for i, (name, _) in enumerate(adapted)},
        "histogram": torch.bincount(used.reshape(-1), minlength=experts + 1).tolist(),
        "mean_active": float(used.float().mean()),
        "zero_rate": float((used == 0).float().mean()),
        "at_most_two": float((used <= 2).float().mean()),
        "mean_lambda": float(torch.cat(lams).mean()) if lams else None,
    }


def finetune(
    base: nn.Module,
    mixture: MixtureConfig,
    config: FinetuneConfig,
    *,
    data: tuple[TaskBatch, TaskBatch] | None = None,
    classes: int = 2,
    group_names: tuple[str, ...] | None = None,
    encode: Callable[[TaskBatch], TaskBatch] | None = None,
    on_step: Callable[[int, float], None] | None = None,
) -> FinetuneResult:
    """Fine-tune a copy of ``base`` (frozen; the tiny encoder or :class:`mlcore.lora_moe.hf.HFLoRABase`)
    with LoRA experts and a classification head, then evaluate on held-out examples: the built-in
    task's levels (passed through ``encode`` first, e.g. into prompts for a language model), or
    ``data`` = (train, test) batches of ``classes`` classes from uploaded task data, whose
    ``levels`` are levels, indices into ``group_names``, or absent."""
    started = time.perf_counter()
    torch.manual_seed(config.seed)
    encoder = copy.deepcopy(base)
    if any(d > LENGTH for d in config.levels):
        raise ValueError(f"levels must not exceed the sequence length {LENGTH}")
    adapted = attach_lora_mixture(encoder, mixture)
    model = Classifier(encoder, classes)
    if data is None:
        train = level_batch(
            config.task, config.train_examples, torch.Generator().manual_seed(10_000 + config.seed), config.levels
        )
        test = level_batch(
            config.task, config.eval_examples, torch.Generator().manual_seed(20_000 + config.seed), config.levels
        )
        if encode is not None:
            train, test = encode(train), encode(test)
        levels: tuple[Any, ...] = config.levels
    else:
        train, test = data
        levels = () if test.levels is None else tuple(sorted(set(test.levels.tolist())))
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    schedule = warmup_cosine_scheduler(
        optimizer, steps=config.steps, warmup_steps=max(1, int(0.1 * config.steps)), floor=0.05
    )
    order = torch.Generator().manual_seed(config.seed)
    losses: list[tuple[int, float]] = []
    model.train()
    for step in range(config.steps):
        index = torch.randint(0, len(train.targets), (config.batch_size,), generator=order)
        logits = model(train.tokens[index], None if train.mask is None else train.mask[index])
        loss = nn.functional.cross_entropy(logits, train.targets[index], label_smoothing=config.label_smoothing)
        loss = loss + sum((module.aux_loss for _, module in adapted), torch.zeros(()))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        schedule.step()
        losses.append((step, loss.item()))
        if on_step is not None:
            on_step(step, losses[-1][1])
    ev = _evaluate(model, adapted, test, levels)
    if group_names is not None:
        ev["by_level"] = {group_names[i]: a for i, a in ev["by_level"].items()}
    return FinetuneResult(
        accuracy=ev["accuracy"],
        accuracy_by_level=ev["by_level"],
        active_heatmap=ev["heatmap"],
        active_histogram=ev["histogram"],
        mean_active=ev["mean_active"],
        zero_expert_rate=ev["zero_rate"],
        at_most_two_rate=ev["at_most_two"],
        trainable_parameters=trainable_parameters(model),
        seconds=time.perf_counter() - started,
        losses=losses,
        mean_lambda=ev["mean_lambda"],
    )
