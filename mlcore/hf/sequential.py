"""The sequential pass: every batch goes through decoder layer i before layer i + 1 is read.

A forward of a streamed model (:func:`mlcore.hf.layerwise.layer_by_layer`) reads every layer once
per batch, so calibrating on B batches reads the checkpoint B times. The sequential pass, as
GPTQ's and llm-compressor's sequential onloading do, turns the loops around: it reads layer i
once, runs all batches through it, keeps their outputs (on disk when they are large) as the
inputs of layer i + 1, and releases it. Peak memory is one layer, the embeddings and head, and
the carried activations; each layer's weights are read once.

What a layer receives besides the hidden states (attention masks per attention type, rotary
tables, position ids) is computed by the model's own forward. A *recording* forward therefore
runs the model with every decoder layer replaced by a stand-in that keeps its call's arguments and
hands its input on; the model's code, not a copy of it, decides what each layer gets. That holds
only where those arguments do not depend on what the layers return, so a second recording, whose
stand-ins hand on a changed copy, must record the same arguments; models where they differ (block
states built from layer outputs, an indexer's top-k handed on) or that call a layer twice per
forward (looped models) are refused. A *replay* forward ends the pass: the last stand-in returns
the carried output, and the model applies its final norm, head and any logit scaling itself.

Hooks on the layers' modules (``MoEAdapter.capture_routing``, ``capture_expert_outputs``) fire as
in a plain forward, once per (layer, batch), layer-major rather than batch-major.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from mlcore.hf.architectures import HFModelError

#: Carried activations above this many bytes go to disk between layers.
SPILL_BYTES = 1 << 30


class _StandIn(nn.Module):
    """Takes a decoder layer's place for one forward of the model. Attribute reads fall through to
    the layer (models read ``attention_type`` or ``layer_type`` off it to choose a mask)."""

    def __init__(self, layer: nn.Module, act: Callable[[Tensor, tuple[Any, ...], dict[str, Any]], Tensor]) -> None:
        super().__init__()
        object.__setattr__(self, "wrapped", layer)
        object.__setattr__(self, "act", act)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(object.__getattribute__(self, "wrapped"), name)

    def forward(self, *args: Any, **kwargs: Any) -> Tensor:
        if args:
            return self.act(args[0], args[1:], kwargs)
        hidden = kwargs.pop("hidden_states")
        return self.act(hidden, (), kwargs)


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    layers = getattr(getattr(model, "model", None), "layers", None)
    if not isinstance(layers, nn.ModuleList) or not len(layers):
        raise HFModelError(
            f"{type(model).__name__} keeps no decoder layers at model.layers; cannot run it layer by layer."
        )
    return layers


@contextmanager
def _stand_ins(layers: nn.ModuleList, make: Callable[[int], Callable[..., Tensor]]) -> Iterator[None]:
    originals = list(layers)
    try:
        for index, layer in enumerate(originals):
            layers[index] = _StandIn(layer, make(index))
        yield
    finally:
        for index, layer in enumerate(originals):
            layers[index] = layer


class LayerCall:
    """One batch's call of one decoder layer: the arguments besides the hidden states."""

    __slots__ = ("args", "kwargs")

    def __init__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.args, self.kwargs = args, kwargs


def record_calls(model: nn.Module, input_ids: Tensor, *, probe: bool = True) -> tuple[Tensor, list[LayerCall]]:
    """The first layer's input (the embeddings as the model computes them) and every layer's call
    arguments, for one batch, from forwards that run no decoder layer.

    Two recording forwards are compared: in one the stand-ins hand on their input, in the other a
    changed copy. Arguments that differ between them are computed from what the layers return
    (block states, an indexer's top-k): a layer's input then depends on the layers before it in a
    way the sequential pass cannot carry, and the model is refused rather than run on wrong inputs.
    That is a property of the model's code, not of a batch: ``probe=False`` skips the comparison."""
    layers = decoder_layers(model)
    first, calls = _record(model, layers, input_ids, changed=False)
    if not probe:
        return first, calls
    _, changed = _record(model, layers, input_ids, changed=True)
    for index, (a, b) in enumerate(zip(calls, changed, strict=True)):
        if not _same((a.args, a.kwargs), (b.args, b.kwargs)):
            raise HFModelError(
                f"{type(model).__name__} gives decoder layer {index} inputs computed from earlier layers' outputs "
                "besides the hidden states; it cannot run layer by layer. Load it whole (enough memory for the "
                "full checkpoint)."
            )
    return first, calls


def _record(
    model: nn.Module, layers: nn.ModuleList, input_ids: Tensor, *, changed: bool
) -> tuple[Tensor, list[LayerCall]]:
    calls: dict[int, LayerCall] = {}
    first: list[Tensor] = []

    def make(index: int) -> Callable[..., Tensor]:
        def act(hidden: Tensor, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Tensor:
            if index in calls:
                raise HFModelError(
                    f"{type(model).__name__} calls decoder layer {index} more than once per forward (a looped "
                    "model); it cannot run layer by layer. Load it whole (enough memory for the full checkpoint)."
                )
            calls[index] = LayerCall(args, kwargs)
            if index == 0:
                first.append(hidden)
            return hidden * 2 + 1 if changed else hidden

        return act

    with _stand_ins(layers, make), torch.inference_mode():
        try:
            model(input_ids=input_ids, use_cache=False, **_last_logits_only(model))
        except HFModelError:
            raise
        except (ValueError, TypeError, RuntimeError) as exc:
            # The model's loop wanted more from a layer than its hidden states (DSA indexers hand
            # their top-k to the next layer): what a layer gets then depends on the layer before.
            first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise HFModelError(
                f"{type(model).__name__} passes more than hidden states from one decoder layer to the next "
                f"({first_line}); it cannot run layer by layer. Load it whole (enough memory for the full checkpoint)."
            ) from None
    if len(calls) != len(layers) or not first:
        missing = sorted(set(range(len(layers))) - set(calls))
        raise HFModelError(
            f"{type(model).__name__}'s forward skipped decoder layers {missing[:5]}; it cannot run layer by layer."
        )
    return first[0], [calls[i] for i in range(len(layers))]


def _last_logits_only(model: nn.Module) -> dict[str, Any]:
    """Ask for the last position's logits only, where the model's forward takes that: the head of a
    150k-token vocabulary would otherwise cost more than the recording itself."""
    import inspect

    parameters = inspect.signature(model.forward).parameters
    return {"logits_to_keep": 1} if "logits_to_keep" in parameters else {}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        return a.shape == b.shape and bool(torch.equal(a, b))
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b)


class Activations:
    """The carried hidden states, one tensor per batch: in memory, or in files under a temporary
    folder when they would exceed ``spill_bytes`` (the folder goes when the pass ends).

    With a :class:`PassCheckpoint` they always live in its folder, in two slots: layer i reads the
    slot layer i − 1 wrote and writes the other, so the inputs of the first unfinished layer are on
    disk, whole, whenever the process dies."""

    def __init__(
        self,
        stack: ExitStack,
        total_bytes: int,
        spill_bytes: int,
        spill_dir: Path | None,
        checkpoint: PassCheckpoint | None = None,
        slot: int = 0,
    ) -> None:
        self.memory: dict[int, Tensor] = {}
        self.folder: Path | None = None
        self.checkpoint, self.slot = checkpoint, slot
        if checkpoint is not None:
            for name in ("acts-0", "acts-1"):
                (checkpoint.folder / name).mkdir(parents=True, exist_ok=True)
        elif total_bytes > spill_bytes:
            self.folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="moelab-acts-", dir=spill_dir)))

    def _file(self, batch: int, slot: int) -> Path:
        if self.checkpoint is not None:
            return self.checkpoint.folder / f"acts-{slot}" / f"{batch}.pt"
        assert self.folder is not None
        return self.folder / f"{batch}.pt"

    def put(self, batch: int, hidden: Tensor) -> None:
        """The output of the layer now running (with a checkpoint: into the slot it does not read)."""
        if self.folder is None and self.checkpoint is None:
            self.memory[batch] = hidden
        else:
            torch.save(hidden.cpu(), self._file(batch, 1 - self.slot))

    def get(self, batch: int, device: torch.device) -> Tensor:
        if self.folder is None and self.checkpoint is None:
            return self.memory[batch]
        return torch.load(self._file(batch, self.slot), weights_only=True).to(device)

    def flip(self) -> None:
        """A layer has run every batch: its outputs are the next layer's inputs."""
        if self.checkpoint is not None:
            self.slot = 1 - self.slot


class PassCheckpoint:
    """What lets a sequential pass whose process dies (a killed worker, an OOM kill) continue from
    its first unfinished layer instead of layer 0, bit for bit as if it had not stopped.

    After each layer the pass commits, in this order: the carried activations (already in a slot of
    ``folder``), the caller's accumulated state (``save_state(path)``, e.g. calibration statistics)
    and last ``progress.json`` (written to a temporary name and renamed, so it is never half
    written) naming the layers done and the slot holding their output. A commit that dies half way
    leaves the previous one in force. ``key`` names the pass (the model and batches): a folder left
    by another pass is ignored and overwritten."""

    def __init__(
        self,
        folder: Path,
        key: str,
        *,
        save_state: Callable[[Path], Any],
        load_state: Callable[[Path], Any],
        on_resume: Callable[[int, int], Any] | None = None,
    ) -> None:
        self.folder, self.key = Path(folder), key
        self.save_state, self.load_state, self.on_resume = save_state, load_state, on_resume

    def resume(self, total: int) -> tuple[int, int]:
        """(layers done, slot of their output), having loaded the caller's state; (0, 0) to start afresh."""
        import json

        try:
            progress = json.loads((self.folder / "progress.json").read_text())
        except (OSError, ValueError):
            return 0, 0
        if progress.get("key") != self.key or not isinstance(progress.get("layers"), int):
            return 0, 0
        self.load_state(self.folder / f"state-{progress['slot']}.pt")
        if self.on_resume is not None:
            self.on_resume(progress["layers"], total)
        return progress["layers"], progress["slot"]

    def commit(self, layers: int, slot: int) -> None:
        import json
        import os

        self.save_state(self.folder / f"state-{slot}.pt")
        temporary = self.folder / "progress.json.tmp"
        temporary.write_text(json.dumps({"key": self.key, "layers": layers, "slot": slot}))
        os.replace(temporary, self.folder / "progress.json")


def batches_key(model: nn.Module, batches: Sequence[Tensor]) -> str:
    """A name for a pass over ``batches`` through ``model``: its config and every token id."""
    import hashlib

    config = {k: v for k, v in model.config.to_dict().items() if not k.startswith("_")}  # not where it was read from
    digest = hashlib.sha256(repr(sorted(config.items(), key=str)).encode())
    for ids in batches:
        digest.update(repr(tuple(ids.shape)).encode())
        digest.update(ids.detach().cpu().to(torch.int64).numpy().tobytes())
    return digest.hexdigest()


def run_sequentially(
    model: nn.Module,
    batches: Sequence[Tensor],
    *,
    on_layer: Callable[[int, int], Any] | None = None,
    before_batch: Callable[[int], Any] | None = None,
    on_output: Callable[[int, Any], Any] | None = None,
    spill_bytes: int = SPILL_BYTES,
    spill_dir: Path | None = None,
    checkpoint: PassCheckpoint | None = None,
) -> None:
    """Run ``batches`` (token ids, [B, L] each) through ``model`` layer-major (module docstring).

    ``before_batch(b)`` is called before each batch enters a layer (hooks that need the batch's
    position use it), ``on_layer(done, total)`` after each layer, and ``on_output(b, output)``
    with the model's own output (logits) for each batch when given; without it, the pass stops
    after the last layer. A model from ``layer_by_layer`` reads each layer once; a model in memory
    runs the same way. With ``checkpoint`` the pass commits after every layer and starts from the
    first layer its folder does not hold (:class:`PassCheckpoint`); ``on_layer`` then reports only
    the layers this call runs."""
    layers = decoder_layers(model)
    stream = getattr(model, "moelab_stream", None)
    device = next(p.device for p in model.parameters() if not p.is_meta)
    with ExitStack() as stack, torch.inference_mode():
        calls: list[list[LayerCall]] = []
        first: list[Tensor] = []
        for b, ids in enumerate(batches):
            hidden, layer_calls = record_calls(model, ids.to(device), probe=b == 0)
            first.append(hidden)
            calls.append(layer_calls)
        total = sum(h.numel() * h.element_size() for h in first)
        done, slot = checkpoint.resume(len(layers)) if checkpoint is not None else (0, 0)
        carried = Activations(stack, total, spill_bytes, spill_dir, checkpoint, slot)
        if not done:
            for b, hidden in enumerate(first):
                carried.put(b, hidden)
            carried.flip()
        first.clear()
        for index in range(done, len(layers)):
            with stream.hold(index) if stream is not None else _nothing():
                layer = layers[index]
                for b in range(len(batches)):
                    if before_batch is not None:
                        before_batch(b)
                    call = calls[b][index]
                    out = layer(carried.get(b, device), *call.args, **call.kwargs)
                    if not isinstance(out, Tensor):
                        raise HFModelError(
                            f"{type(layer).__name__} returns {type(out).__name__}, not the hidden states; "
                            "this model cannot run layer by layer."
                        )
                    carried.put(b, out)
            carried.flip()
            if checkpoint is not None:
                checkpoint.commit(index + 1, carried.slot)
            if on_layer is not None:
                on_layer(index + 1, len(layers))
        if on_output is None:
            return
        last = len(layers) - 1
        for b, ids in enumerate(batches):
            final = carried.get(b, device)

            def make(index: int, final: Tensor = final) -> Callable[..., Tensor]:
                return lambda hidden, args, kwargs: final if index == last else hidden

            with _stand_ins(layers, make):
                on_output(b, model(input_ids=ids.to(device), use_cache=False))


@contextmanager
def _nothing() -> Iterator[None]:
    yield
