"""A teacher larger than memory: its logits from one layer-by-layer pass, stored on disk.

The distillation teacher is frozen and only ever asked for the logits of fixed token windows: the
training pool and the held-out windows. So instead of calling it at every step, one sequential
pass (:func:`mlcore.hf.sequential.run_sequentially`) reads each decoder layer once, runs every
window through it, and the model's own final norm and head give the logits of the last layer's
output; they are written as float32 to one file, read back through a memory map by
:class:`StoredLogits` (a :class:`mlcore.distill.pipeline.WindowLogits`). Training, the held-out
evaluation (forward and reverse KL, top-1 agreement, the teacher's NLL) then never call the
teacher, and the result is the whole-model run's: the same logits in the same float32.

**Why full logits, not top-k.** Every loss of :mod:`mlcore.distill.amid` needs the teacher's
whole distribution: the assistant r mixes p and q token by token over the vocabulary
(log r̃ = logsumexp(log λ + s·log p, log(1 − λ) + s·log q)/s, normalised over the vocabulary),
D_AB sums P^a·Q^b over every token, and even KL(p‖r) weighs every log r(y) by p(y). Top-k logits
with the logsumexp fix p on k tokens but not how the rest of its mass spreads, so none of these
would be exact. The file therefore holds ``windows × seq_len × vocab × 4`` bytes
(:func:`logits_bytes`); above :data:`STORED_LOGITS_BYTES`, or the free space of the job's folder,
the job is refused with that figure and what to lower (:func:`check_storable`).

The student's samples exist only after training: their teacher NLL comes from a second pass
(:func:`score_samples`), one more read of the checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from mlcore.distill.pipeline import sampled_token_nll

if TYPE_CHECKING:
    from mlcore.hf.memory import MemoryNeeds

#: The most a job may store of the teacher's logits on disk (float32).
STORED_LOGITS_BYTES = 32 * 2**30
#: Windows per batch of a pass, as :class:`~mlcore.distill.pipeline.TeacherLogits` and
#: :func:`~mlcore.distill.pipeline.evaluate` batch the teacher held whole (the same shapes give
#: the same float32 logits) ...
PASS_BATCH = 16
#: ... unless one batch's logits would exceed this many bytes.
BATCH_LOGITS_BYTES = 1 << 30
_FLOAT32 = 4


class LogitsTooLarge(ValueError):
    """The teacher's stored logits would exceed the cap or the disk: one sentence with the figures."""


def logits_bytes(windows: int, seq_len: int, vocab: int) -> int:
    """Bytes of the float32 logits of ``windows`` sequences of ``seq_len`` tokens over ``vocab``."""
    return windows * seq_len * vocab * _FLOAT32


def check_storable(windows: int, seq_len: int, vocab: int, *, free: int, cap: int | None = None) -> int:
    """The bytes the stored logits take, or :class:`LogitsTooLarge` when they exceed ``cap``
    (:data:`STORED_LOGITS_BYTES` unless given) or the ``free`` bytes of the disk they go to."""
    cap = STORED_LOGITS_BYTES if cap is None else cap
    size = logits_bytes(windows, seq_len, vocab)
    limit = min(cap, free)
    if size <= limit:
        return size
    where = f"above the {_gb(cap)} a job may store" if cap <= free else f"more than the {_gb(free)} free on the disk"
    fit = limit // logits_bytes(1, seq_len, vocab)
    fits = f"at most {fit:,} sequences of {seq_len} tokens fit" if fit else f"not one sequence of {seq_len} tokens fits"
    raise LogitsTooLarge(
        f"Layer by layer, the teacher's logits of every training and held-out sequence are stored on disk: "
        f"{windows:,} sequences × {seq_len} tokens × {vocab:,} vocabulary × 4 bytes = {_gb(size)}, {where}; "
        f"use fewer training or held-out sequences or shorter ones ({fits}), or load the teacher whole on a "
        "worker with enough memory."
    )


def _gb(n: int) -> str:
    return f"{n / 2**30:.1f} GB" if n >= 2**30 else f"{n / 2**20:.0f} MB"


def pass_batch(seq_len: int, vocab: int) -> int:
    """Windows per batch of a pass: :data:`PASS_BATCH`, fewer where their logits would exceed
    :data:`BATCH_LOGITS_BYTES`."""
    return max(1, min(PASS_BATCH, BATCH_LOGITS_BYTES // logits_bytes(1, seq_len, vocab)))


def plan_teacher_load(
    folder: Path,
    mode: str,
    *,
    device: Any,
    windows: int,
    seq_len: int,
    batch_size: int,
    vocab: int,
    available: int | None = None,
) -> tuple[str, MemoryNeeds]:
    """Whole or layer by layer for a teacher run over ``windows`` sequences of ``seq_len`` tokens
    (:func:`mlcore.hf.memory.plan_load`; refuses as it does). A batch is the larger of a training
    batch and a pass's; layer by layer, every window's activations are carried between layers."""
    from mlcore.hf.memory import plan_load

    batch_tokens = max(batch_size, pass_batch(seq_len, vocab)) * seq_len
    return plan_load(
        folder, mode, device=device, tokens=windows * seq_len, batch_tokens=batch_tokens, available=available
    )


class StoredLogits:
    """The teacher's float32 logits of ``windows``, rows ``first …`` of a ``[rows, L, V]`` file
    read through a memory map (a :class:`~mlcore.distill.pipeline.WindowLogits`)."""

    def __init__(self, path: Path, windows: torch.Tensor, *, first: int, rows: int, vocab: int) -> None:
        self.path, self.windows = Path(path), windows
        whole = np.memmap(path, dtype=np.float32, mode="r", shape=(rows, windows.shape[1], vocab))
        self.array = whole[first : first + len(windows)]

    def __call__(self, index: torch.Tensor) -> torch.Tensor:
        # Fancy indexing reads the rows into a fresh in-memory array.
        return torch.from_numpy(self.array[index.cpu().numpy()])

    @property
    def nbytes(self) -> int:
        return int(self.array.nbytes)


def _teacher_logits(output: Any, temperature: float) -> torch.Tensor:
    """float32 logits as the whole-model path computes them (:class:`~mlcore.distill.pipeline.SharpenedTeacher`
    divides in the model's dtype, then :class:`~mlcore.distill.pipeline.TeacherLogits` casts)."""
    logits = output.logits if temperature == 1.0 else output.logits / temperature
    return logits.float()


def store_teacher_logits(
    model: Any,
    window_sets: Sequence[torch.Tensor],
    path: Path,
    *,
    batch_size: int = PASS_BATCH,
    temperature: float = 1.0,
    on_layer: Callable[[int, int], Any] | None = None,
    spill_dir: Path | None = None,
    resume_dir: Path | None = None,
    on_resume: Callable[[int, int], Any] | None = None,
) -> list[StoredLogits]:
    """Run every window of ``window_sets`` (``[N_i, L]`` each, one ``L``) through ``model`` in one
    sequential pass and store their float32 logits (divided by ``temperature``) at ``path``; one
    ``resume_dir`` keeps the pass's progress after every layer (the logits are written after the
    last one, so the pass has no other state), and a call after a killed one continues there. One
    :class:`StoredLogits` per set, in order. Batches never straddle two sets, so each set is
    batched as the whole-model path batches it."""
    from mlcore.hf.sequential import run_sequentially

    lengths = {int(w.shape[1]) for w in window_sets}
    if len(lengths) != 1:
        raise ValueError(f"the window sets have different lengths {sorted(lengths)}; one file holds one length")
    (seq_len,) = lengths
    batches: list[torch.Tensor] = []
    starts: list[int] = []
    firsts: list[int] = []
    rows = 0
    for windows in window_sets:
        firsts.append(rows)
        for start in range(0, len(windows), batch_size):
            batches.append(windows[start : start + batch_size])
            starts.append(rows + start)
        rows += len(windows)
    vocab: list[int] = []
    with open(path, "wb") as file:

        def on_output(b: int, output: Any) -> None:
            logits = _teacher_logits(output, temperature).cpu().contiguous()
            if not vocab:
                vocab.append(int(logits.shape[-1]))
            file.seek(starts[b] * logits_bytes(1, seq_len, vocab[0]))
            file.write(memoryview(logits.numpy()))

        checkpoint = None
        if resume_dir is not None:
            from mlcore.hf.sequential import PassCheckpoint, batches_key

            checkpoint = PassCheckpoint(
                resume_dir,
                batches_key(model, batches),
                save_state=lambda path: None,
                load_state=lambda path: None,
                on_resume=on_resume,
            )
        run_sequentially(
            model, batches, on_layer=on_layer, on_output=on_output, spill_dir=spill_dir, checkpoint=checkpoint
        )
    return [
        StoredLogits(path, windows, first=first, rows=rows, vocab=vocab[0])
        for windows, first in zip(window_sets, firsts, strict=True)
    ]


def score_samples(
    model: Any,
    ids: torch.Tensor,
    start: int,
    *,
    batch_size: int = PASS_BATCH,
    temperature: float = 1.0,
    on_layer: Callable[[int, int], Any] | None = None,
    spill_dir: Path | None = None,
) -> torch.Tensor:
    """The teacher's NLL ``[N, T − start]`` of the tokens from ``start`` on of ``ids`` (``[N, T]``,
    the student's samples after their prompts), from one sequential pass over ``model``; only the
    NLLs are kept, never a batch's logits past its own."""
    from mlcore.hf.sequential import run_sequentially

    batches = [ids[first : first + batch_size].cpu() for first in range(0, len(ids), batch_size)]
    nll: dict[int, torch.Tensor] = {}

    def on_output(b: int, output: Any) -> None:
        nll[b] = sampled_token_nll(_teacher_logits(output, temperature), batches[b], start).cpu()

    run_sequentially(model, batches, on_layer=on_layer, on_output=on_output, spill_dir=spill_dir)
    return torch.cat([nll[b] for b in range(len(batches))])
