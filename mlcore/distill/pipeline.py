"""Distil a causal language model into a smaller student with any :class:`~mlcore.distill.amid.LossConfig`.

The training recipe follows the AMiD card (§2 defaults): AdamW, weight decay 0.01, cosine schedule
with a short warm-up, gradient clipping at 1.0. The teacher is frozen and evaluated in fp32; with
``bf16=True`` the student's forward pass and the loss run under bf16 autocast, the setting in which
near-zero teacher probabilities break fragile losses (``fp16=True``: fp16 autocast, without loss
scaling, a harsher setting the benchmark's stability study uses). A step whose loss or gradient norm
is not finite is skipped and counted, never silently repaired.

Stability is also read from the gradient: :func:`gradient_spikes` counts the steps whose pre-clip
gradient norm exceeds a fixed multiple of the run's median, which can fire in any precision (the
clip hides such a step from the weights, not from this count).

Evaluation on held-out windows: forward KL(p‖q) and reverse KL(q‖p) to the teacher per token,
top-1 agreement, the student's perplexity of the text; and on student samples the teacher's NLL
(quality) and distinct-2 (diversity).

The frozen teacher is only ever asked for the logits of token windows, so training and held-out
evaluation take those logits from a :class:`WindowLogits` source: the teacher's forward
(:class:`TeacherLogits`) or logits computed beforehand, e.g. by one layer-by-layer pass over a
teacher larger than memory (:mod:`mlcore.distill.streamed_teacher`).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from mlcore.distill.amid import LossConfig, distillation_loss, kl
from mlcore.train import warmup_cosine

#: Teacher logits are kept for the whole training pool when they fit in this many bytes (fp32).
TEACHER_CACHE_BYTES = 512 * 2**20
#: A step is a gradient spike when its pre-clip norm exceeds this multiple of the run's median norm.
SPIKE_FACTOR = 10.0


def reduced_precision(bf16: bool, fp16: bool) -> torch.dtype | None:
    """The autocast dtype that ``bf16`` / ``fp16`` ask for (bf16 first; None: fp32)."""
    return torch.bfloat16 if bf16 else torch.float16 if fp16 else None


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    steps: int = 400
    batch_size: int = 8
    lr: float = 1e-3
    weight_decay: float = 0.01
    clip: float = 1.0
    warmup_fraction: float = 0.05  #: the warm-up, as a fraction of the steps
    bf16: bool = False
    #: fp16 autocast (no loss scaling): for stability studies; exclusive with ``bf16``.
    fp16: bool = False
    #: Held-out evaluation interval in steps (0: only at the end). No default: the distill job's spec
    #: and the benchmark each give their own.
    eval_every: int
    seed: int = 0

    def __post_init__(self) -> None:
        if self.bf16 and self.fp16:
            raise ValueError("choose one reduced precision: bf16 or fp16, not both")

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        """The autocast dtype of the student's forward pass and the loss (None: fp32)."""
        return reduced_precision(self.bf16, self.fp16)


@dataclass
class DistillResult:
    """Per-step curves and the final metrics of one distillation run."""

    loss: list[tuple[int, float]] = field(default_factory=list)
    grad_norm: list[tuple[int, float]] = field(default_factory=list)
    evals: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    nonfinite_loss_steps: int = 0
    nonfinite_grad_steps: int = 0
    metrics: dict[str, float] = field(default_factory=dict)

    def gradient_statistics(self) -> dict[str, float]:
        norms = [v for _, v in self.grad_norm if math.isfinite(v)]
        if not norms:
            return {"grad_norm_mean": math.nan, "grad_norm_std": math.nan, "grad_norm_max": math.nan}
        return {
            "grad_norm_mean": statistics.fmean(norms),
            "grad_norm_std": statistics.pstdev(norms),
            "grad_norm_max": max(norms),
        }


def gradient_spikes(norms: list[float], factor: float = SPIKE_FACTOR) -> int:
    """The steps whose gradient norm exceeds ``factor`` × the median of the finite norms.

    A measure of instability that fires in fp32 as in any reduced precision: a loss whose gradient is
    well behaved stays within a small multiple of its typical size, an unstable one jumps by an order of
    magnitude. Non-finite norms are not counted here (the skipped-step counts hold them).
    """
    if factor <= 1:
        raise ValueError(f"a spike is a multiple above 1 of the median gradient norm, got {factor}")
    finite = [v for v in norms if math.isfinite(v)]
    if not finite:
        return 0
    threshold = factor * statistics.median(finite)
    return sum(v > threshold for v in finite)


def student_config(teacher_config: Any, *, hidden: int, layers: int, intermediate: int, heads: int) -> Any:
    """A dense Qwen3 causal LM sharing the teacher's vocabulary, special tokens and context length."""
    from transformers import AutoConfig

    if hidden % heads:
        raise ValueError(f"the student's hidden size {hidden} must be divisible by its {heads} attention heads")
    return AutoConfig.for_model(
        "qwen3",
        vocab_size=teacher_config.vocab_size,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=hidden // heads,
        max_position_embeddings=teacher_config.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=teacher_config.bos_token_id,
        eos_token_id=teacher_config.eos_token_id,
        pad_token_id=teacher_config.pad_token_id,
        use_cache=False,
    )


def build_student(config: Any, *, seed: int, device: torch.device | str = "cpu") -> Any:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).to(device)


def parameter_count(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


class SharpenedTeacher(torch.nn.Module):
    """The teacher with logits divided by ``temperature`` < 1: a peaked teacher with many near-zero
    probabilities, the regime in which the card expects AMiD to be more stable than its ends."""

    def __init__(self, teacher: Any, temperature: float) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"the teacher's temperature must be positive, got {temperature}")
        self.teacher, self.temperature = teacher, temperature

    @property
    def config(self) -> Any:
        return self.teacher.config

    def forward(self, input_ids: torch.Tensor) -> Any:
        from transformers.modeling_outputs import CausalLMOutput

        return CausalLMOutput(logits=self.teacher(input_ids=input_ids).logits / self.temperature)


class WindowLogits(Protocol):
    """The frozen teacher's fp32 logits ``[len(index), L, V]`` for rows ``index`` of ``windows``."""

    windows: torch.Tensor

    def __call__(self, index: torch.Tensor) -> torch.Tensor: ...


class TeacherLogits:
    """The frozen teacher's fp32 logits for window ``i`` of a fixed pool, cached when the pool is small."""

    def __init__(self, teacher: Any, windows: torch.Tensor, *, batch_size: int = 16) -> None:
        self.teacher, self.windows = teacher, windows
        vocab = int(teacher.config.vocab_size)
        self.cache: torch.Tensor | None = None
        if windows.numel() * vocab * 4 <= TEACHER_CACHE_BYTES:
            self.cache = torch.cat(
                [self._forward(windows[i : i + batch_size]) for i in range(0, len(windows), batch_size)]
            )

    def _forward(self, ids: torch.Tensor) -> torch.Tensor:
        device = next(self.teacher.parameters()).device
        with torch.inference_mode():
            return self.teacher(input_ids=ids.to(device)).logits.float()

    def __call__(self, index: torch.Tensor) -> torch.Tensor:
        if self.cache is not None:
            return self.cache[index]
        return self._forward(self.windows[index])


def _autocast(dtype: torch.dtype | None, device: torch.device) -> Any:
    return torch.autocast(device_type=device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None)


def distill(
    teacher: Any,
    student: Any,
    train_windows: torch.Tensor,
    heldout_windows: torch.Tensor,
    loss_config: LossConfig,
    config: TrainConfig,
    *,
    on_step: Callable[[int, DistillResult], None] | None = None,
    targets: WindowLogits | None = None,
    heldout_targets: WindowLogits | None = None,
) -> DistillResult:
    """Train ``student`` towards ``teacher`` on ``train_windows`` (``[N, L]`` token ids) and evaluate it.

    ``on_step(step, result)`` runs after every step (progress, cancellation: it may raise);
    ``targets`` gives the teacher's logits of ``train_windows`` (reused across runs, or stored by a
    layer-by-layer pass), ``heldout_targets`` those of ``heldout_windows``. With both given the
    teacher itself is never called and may be ``None`` (a teacher larger than memory).
    """
    device = next(student.parameters()).device
    if teacher is None and (targets is None or heldout_targets is None):
        raise ValueError("without a teacher, give its logits of both the training and the held-out windows")
    if teacher is not None:
        teacher.eval()
    generator = torch.Generator().manual_seed(config.seed)
    if targets is None:
        targets = TeacherLogits(teacher, train_windows)
    _check_windows(targets, train_windows, "targets", "train_windows")
    if heldout_targets is not None:
        _check_windows(heldout_targets, heldout_windows, "heldout_targets", "heldout_windows")
    optimizer = torch.optim.AdamW(student.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    result = DistillResult()
    order = torch.empty(0, dtype=torch.long)
    warmup_steps = max(1, round(config.warmup_fraction * config.steps))
    for step in range(config.steps):
        if len(order) < config.batch_size:
            order = torch.cat([order, torch.randperm(len(train_windows), generator=generator)])
        index, order = order[: config.batch_size], order[config.batch_size :]
        ids = train_windows[index].to(device)
        # The schedule follows the step count, so a skipped (non-finite) step still advances it.
        for group in optimizer.param_groups:
            group["lr"] = config.lr * warmup_cosine(step, steps=config.steps, warmup_steps=warmup_steps)
        student.train()
        with _autocast(config.autocast_dtype, device):
            logits = student(input_ids=ids).logits
            teacher_logits = targets(index).to(device=device, dtype=logits.dtype)
            loss = distillation_loss(logits, teacher_logits, loss_config, progress=step / max(1, config.steps - 1))
        optimizer.zero_grad(set_to_none=True)
        value = float(loss.detach())
        result.loss.append((step, value))
        if not math.isfinite(value):
            result.nonfinite_loss_steps += 1
            result.grad_norm.append((step, math.nan))
        else:
            loss.backward()
            norm = float(torch.nn.utils.clip_grad_norm_(student.parameters(), config.clip))
            result.grad_norm.append((step, norm))
            if math.isfinite(norm):
                optimizer.step()
            else:
                result.nonfinite_grad_steps += 1
        if config.eval_every and (step + 1) % config.eval_every == 0 and step + 1 < config.steps:
            held_out = evaluate(
                teacher, student, heldout_windows, bf16=config.bf16, fp16=config.fp16, targets=heldout_targets
            )
            result.evals.append((step + 1, held_out))
        if on_step is not None:
            on_step(step, result)
    final = evaluate(teacher, student, heldout_windows, bf16=config.bf16, fp16=config.fp16, targets=heldout_targets)
    result.evals.append((config.steps, final))
    result.metrics = {
        **final,
        **result.gradient_statistics(),
        "nonfinite_loss_steps": float(result.nonfinite_loss_steps),
        "nonfinite_grad_steps": float(result.nonfinite_grad_steps),
    }
    return result


def _check_windows(targets: WindowLogits, windows: torch.Tensor, name: str, windows_name: str) -> None:
    if targets.windows is not windows:
        raise ValueError(f"`{name}` holds the teacher's logits of other windows; build it from `{windows_name}`")


def evaluate(
    teacher: Any,
    student: Any,
    windows: torch.Tensor,
    *,
    bf16: bool = False,
    fp16: bool = False,
    batch_size: int = 16,
    targets: WindowLogits | None = None,
) -> dict[str, float]:
    """Per-token forward KL(p‖q), reverse KL(q‖p), top-1 agreement and both models' NLL of the text.

    The teacher's logits come from ``targets`` (its logits of ``windows``) when given, else from
    its forward; ``teacher`` may then be ``None``."""
    device = next(student.parameters()).device
    if targets is not None:
        _check_windows(targets, windows, "targets", "windows")
    elif teacher is None:
        raise ValueError("evaluating without a teacher needs its logits of the windows (`targets`)")
    student.eval()
    sums = {"forward_kl": 0.0, "reverse_kl": 0.0, "top1_agreement": 0.0, "student_nll": 0.0, "teacher_nll": 0.0}
    count = 0
    with torch.inference_mode():
        for start in range(0, len(windows), batch_size):
            ids = windows[start : start + batch_size].to(device)
            with _autocast(reduced_precision(bf16, fp16), device):
                q_logits = student(input_ids=ids).logits
            if targets is None:
                p_logits = teacher(input_ids=ids).logits.float()
            else:
                p_logits = targets(torch.arange(start, start + len(ids))).to(device)
            log_p, log_q = p_logits.log_softmax(-1), q_logits.float().log_softmax(-1)
            next_ids = ids[:, 1:].unsqueeze(-1)
            sums["forward_kl"] += float(kl(log_p, log_q).sum())
            sums["reverse_kl"] += float(kl(log_q, log_p).sum())
            sums["top1_agreement"] += float((log_p.argmax(-1) == log_q.argmax(-1)).sum())
            sums["student_nll"] -= float(log_q[:, :-1].gather(-1, next_ids).sum())
            sums["teacher_nll"] -= float(log_p[:, :-1].gather(-1, next_ids).sum())
            count += ids.numel()
    tokens, predicted = count, count - len(windows)
    out = {name: value / (predicted if name.endswith("_nll") else tokens) for name, value in sums.items()}
    out["student_ppl"] = math.exp(min(out["student_nll"], 50.0))
    out["teacher_ppl"] = math.exp(min(out["teacher_nll"], 50.0))
    return out


def sample_student(student: Any, prompts: torch.Tensor, *, new_tokens: int = 32, seed: int = 0) -> torch.Tensor:
    """``prompts`` (``[N, P]``) followed by ``new_tokens`` ancestral samples of the student: ``[N, P + new]``."""
    device = next(student.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    student.eval()
    ids = prompts.to(device)
    with torch.inference_mode():
        for _ in range(new_tokens):
            probs = student(input_ids=ids).logits[:, -1].float().softmax(-1)
            ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], dim=1)
    return ids


def sampled_token_nll(teacher_logits: torch.Tensor, ids: torch.Tensor, start: int) -> torch.Tensor:
    """The teacher's NLL ``[N, T − start]`` of each token from position ``start`` on, given its
    logits ``[N, T, V]`` of the whole sequences ``ids``."""
    log_p = teacher_logits.float().log_softmax(-1)
    sampled = ids[:, start:].to(log_p.device)
    return -log_p[:, start - 1 : -1].gather(-1, sampled.unsqueeze(-1)).squeeze(-1)


def sample_metrics(nll: torch.Tensor, sampled: torch.Tensor) -> dict[str, float]:
    """The teacher's mean NLL of the sampled tokens and distinct-2 (unique bigrams / bigrams)."""
    bigrams = [pair for row in sampled.tolist() for pair in itertools.pairwise(row)]
    return {"sample_teacher_nll": float(nll.mean()), "distinct_2": len(set(bigrams)) / max(1, len(bigrams))}


def sample_quality(
    teacher: Any, student: Any, prompts: torch.Tensor, *, new_tokens: int = 32, seed: int = 0
) -> dict[str, float]:
    """Ancestral samples of the student after ``prompts`` (``[N, P]``): the teacher's mean NLL of the
    sampled tokens (lower = the teacher finds them plausible) and distinct-2 (unique bigrams / bigrams)."""
    ids = sample_student(student, prompts, new_tokens=new_tokens, seed=seed)
    with torch.inference_mode():
        logits = teacher(input_ids=ids).logits.float()
    start = prompts.shape[1]
    return sample_metrics(sampled_token_nll(logits, ids, start), ids[:, start:])
