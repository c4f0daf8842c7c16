"""What running a checkpoint costs in memory, whole or layer by layer, read from its safetensors
headers before any weight is: the choice between the two, and the refusal when neither fits.

Whole, the model holds every tensor (in the dtype it is loaded in: float16 is read as float32,
see :func:`mlcore.hf.loading.load_dtype`). Layer by layer (:mod:`mlcore.hf.sequential`), it holds
what lies outside the decoder layers (embeddings, head), the largest decoder layer twice (a layer
being written is serialised whole before it reaches the disk), and the carried activations of every
window. Both need working memory for one batch and :data:`RUNTIME_BYTES` for Python, torch and the
allocator's slack on top; ``bench/results/scale.md`` compares the estimate with measured peaks.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlcore.hf.architectures import HFModelError

LOAD_MODES = ("auto", "whole", "layer-by-layer")
#: Of the memory free when a job starts, the share a plan may take (the rest: the worker, the OS,
#: allocator slack).
USABLE_SHARE = 0.8
#: The interpreter, torch's libraries and the heap's slack, whatever the model.
RUNTIME_BYTES = 1 << 30
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


@dataclass(frozen=True)
class MemoryNeeds:
    """Bytes a run needs in each mode (see the module docstring)."""

    whole: int
    layer_by_layer: int
    #: All the weights, those outside the decoder layers and the largest decoder layer, for the log.
    weights: int
    outside: int
    largest_layer: int

    def log_line(self, mode: str) -> str:
        """What a job logs once it has chosen ``mode``: both modes' needs."""
        return (
            f"loading {mode}: about {self.whole / 2**20:,.0f} MB whole, {self.layer_by_layer / 2**20:,.0f} MB layer "
            "by layer (weights, carried activations and one batch)"
        )


def memory_needs(path: Path, *, load_bytes: int, activations: int, working: int, whole_copies: int = 1) -> MemoryNeeds:
    """The needs of the checkpoint at ``path`` loaded at ``load_bytes`` per element, carrying
    ``activations`` bytes between layers and ``working`` bytes for one batch; a job that holds
    ``whole_copies`` copies of the weights at once (the original and an edited copy) says so."""
    from mlcore.hf.checkpoint import stored_tensors

    per_layer: dict[int, int] = defaultdict(int)
    outside = 0
    for tensor in stored_tensors(path):
        # Integer and boolean tensors keep their size; floating weights take the load dtype's.
        nbytes = tensor.numel * load_bytes if tensor.dtype.startswith(("F", "BF")) else tensor.nbytes
        match = _LAYER.search(tensor.name)
        if match is None:
            outside += nbytes
        else:
            per_layer[int(match[1])] += nbytes
    _widen_compact_layers(path, per_layer)
    largest = max(per_layer.values(), default=0)
    return MemoryNeeds(
        whole=(outside + sum(per_layer.values())) * whole_copies + working + RUNTIME_BYTES,
        layer_by_layer=outside + 2 * largest + activations + working + RUNTIME_BYTES,
        weights=outside + sum(per_layer.values()),
        outside=outside,
        largest_layer=largest,
    )


def _widen_compact_layers(path: Path, per_layer: dict[int, int]) -> None:
    """A compact MoNE checkpoint stores K of a layer's E experts and loads them widened back to E:
    count such a layer at E / K times its stored bytes (its non-expert weights too, an overcount)."""
    import json

    from mlcore.hf.checkpoint import STORED_FIELD
    from mlcore.hf.families import EXPERT_COUNT_FIELDS

    raw = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    total = next((raw[f] for f in EXPERT_COUNT_FIELDS if isinstance(raw.get(f), int) and raw[f] > 0), None)
    for layer, kept in (raw.get(STORED_FIELD) or {}).items():
        if total and isinstance(kept, int) and 0 < kept < total:
            per_layer[int(layer)] = per_layer[int(layer)] * total // kept


def available_bytes(device: Any = "cpu") -> int:
    """Memory free now on ``device``: the GPU's free memory, or the machine's available RAM."""
    import torch

    if str(device).startswith("cuda") and torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    import psutil

    return int(psutil.virtual_memory().available)


def choose_load(mode: str, needs: MemoryNeeds, available: int, *, streamable: bool) -> str:
    """``"whole"`` or ``"layer-by-layer"`` for the requested ``mode`` (one of :data:`LOAD_MODES`),
    or an :class:`HFModelError` that says what each mode needs and what to do."""
    usable = int(available * USABLE_SHARE)
    if mode not in LOAD_MODES:
        raise HFModelError(f"Unknown load mode {mode!r}; choose one of {', '.join(LOAD_MODES)}.")
    if mode == "whole" or (mode == "auto" and (needs.whole <= usable or not streamable)):
        if needs.whole <= usable:
            return "whole"
        streaming = (
            f"; layer by layer it needs {_gb(needs.layer_by_layer)} (choose load 'layer-by-layer')"
            if streamable and needs.layer_by_layer <= usable
            else ""
        )
        raise HFModelError(
            f"The model needs about {_gb(needs.whole)} of memory whole and this worker has {_gb(usable)} to give"
            f"{streaming}; use a worker with more memory, or fewer or shorter sequences."
        )
    if not streamable:
        raise HFModelError(
            "This model family cannot run layer by layer (see docs/hf-support.md, layer_by_layer_load); "
            "choose load 'whole' on a worker with enough memory for the full checkpoint."
        )
    if needs.layer_by_layer <= usable:
        return "layer-by-layer"
    raise HFModelError(
        f"Even layer by layer the model needs about {_gb(needs.layer_by_layer)} (embeddings and head "
        f"{_gb(needs.outside)}, the largest layer {_gb(needs.largest_layer)}, the rest activations) and this "
        f"worker has {_gb(usable)} to give; use fewer or shorter sequences, or a worker with more memory."
    )


def _gb(n: int) -> str:
    return f"{n / 2**30:.1f} GB" if n >= 2**30 else f"{n / 2**20:.0f} MB"


def plan_load(
    path: Path,
    mode: str,
    *,
    device: Any,
    tokens: int,
    batch_tokens: int,
    available: int | None = None,
    whole_copies: int = 1,
) -> tuple[str, MemoryNeeds]:
    """The load mode for running ``tokens`` tokens (``batch_tokens`` at a time) through the
    checkpoint at ``path`` on ``device``, and what it needs; refuses as :func:`choose_load` does."""
    from mlcore.hf.checkpoint import base_model_type
    from mlcore.hf.support import GAPS

    raw, needs = _needs(path, tokens=tokens, batch_tokens=batch_tokens, whole_copies=whole_copies)
    streamable = "layer_by_layer_load" not in GAPS.get(base_model_type(raw), {})
    free = available_bytes(device) if available is None else available
    return choose_load(mode, needs, free, streamable=streamable), needs


def check_whole_fits(path: Path, *, device: Any, what: str, batch_tokens: int, available: int | None = None) -> None:
    """Refuse, before any weight is read, a kind that holds the whole model (it trains through it)
    when the model cannot fit this worker: one sentence with both figures, not an out-of-memory kill."""
    _, needs = _needs(path, tokens=0, batch_tokens=batch_tokens, whole_copies=1)
    usable = int((available_bytes(device) if available is None else available) * USABLE_SHARE)
    if needs.whole > usable:
        raise HFModelError(
            f"{what} holds the whole model in memory: about {_gb(needs.whole)}, and this worker has {_gb(usable)} to "
            "give; use a worker with more memory (this kind does not run layer by layer)."
        )


def _needs(path: Path, *, tokens: int, batch_tokens: int, whole_copies: int) -> tuple[dict[str, Any], MemoryNeeds]:
    """The config and the needs of running ``tokens`` tokens, ``batch_tokens`` at a time.

    Carried activations are one hidden vector per token in the load dtype (``hc_mult`` of them where
    the model keeps several residual streams, HY-V4), plus what a layer hands the next besides them
    (a DSA indexer's top-k: ``index_topk`` int64 ids per token, GLM-MoE-DSA and HY-V4); a batch's
    working memory is taken as 24 hidden vectors per token in float32 (attention, the experts'
    gate/up outputs for top-k, logits of the last position), a bound that holds for the families tested."""
    import json

    from mlcore.hf.loading import load_dtype

    raw = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    text = raw.get("text_config") or {}

    def field(name: str) -> int:
        return int(raw.get(name) or text.get(name) or 0)

    hidden = field("hidden_size")
    element = load_dtype(path).itemsize
    carried = max(1, field("hc_mult")) * hidden * element + field("index_topk") * 8
    needs = memory_needs(
        path,
        load_bytes=element,
        activations=tokens * carried,
        working=batch_tokens * hidden * 4 * 24,
        whole_copies=whole_copies,
    )
    return raw, needs
