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
states built from layer outputs) or that call a layer twice per forward (looped models) are
refused. A *replay* forward ends the pass: the last stand-in returns the carried output, and the
model applies its final norm, head and any logit scaling itself.

Some layers return more than their hidden states, and the model's loop hands those extra values
to the next layer unchanged (GLM-MoE-DSA and HY-V4 return their DSA indexer's top-k, which a
layer with a shared indexer reuses as ``prev_topk_indices``). When the plain recording fails, the
pass runs layer 0 for real and reads off what a layer returns: a tuple (hidden, x_1, ..., x_n).
The remaining layers are then recorded with stand-ins that return a tuple of that length, whose
extra values are markers (:class:`Carried`); a marker that reaches layer i + 1's arguments as is
stands for layer i's real value, which the pass carries per batch beside the hidden states and
puts in the marker's place. Any other use of a marker (arithmetic, a marker of an older layer, a
layer returning another structure) is refused, so the replayed calls are exactly the model's loop.

Hooks on the layers' modules (``MoEAdapter.capture_routing``, ``capture_expert_outputs``) fire as
in a plain forward, once per (layer, batch), layer-major rather than batch-major.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
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

    def __init__(self, layer: nn.Module, act: Callable[[Tensor, tuple[Any, ...], dict[str, Any]], Any]) -> None:
        super().__init__()
        object.__setattr__(self, "wrapped", layer)
        object.__setattr__(self, "act", act)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(object.__getattribute__(self, "wrapped"), name)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
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
def _stand_ins(layers: nn.ModuleList, make: Callable[[int], Callable[..., Any]]) -> Iterator[None]:
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


@dataclass(frozen=True)
class Carried:
    """Stands, in a recorded call, for the ``position``-th value decoder layer ``layer`` returned
    (position 0 being its hidden states): the sequential pass puts the real value there."""

    layer: int
    position: int


class _DependsOnOutputs(HFModelError):
    """The plain recording found a layer's inputs depending on what the layers before it return."""


class _Stop(Exception):
    """Ends a recording forward once layer 0's call is recorded."""


def record_calls(model: nn.Module, input_ids: Tensor, *, probe: bool = True) -> tuple[Tensor, list[LayerCall]]:
    """The first layer's input (the embeddings as the model computes them) and every layer's call
    arguments, for one batch, from forwards that run no decoder layer.

    Two recording forwards are compared: in one the stand-ins hand on their input, in the other a
    changed copy. Arguments that differ between them are computed from what the layers return
    (block states, an indexer's top-k): a layer's input then depends on the layers before it in a
    way this recording cannot carry, and the model is refused rather than run on wrong inputs
    (:func:`run_sequentially` then tries carrying the layers' extra return values). That is a
    property of the model's code, not of a batch: ``probe=False`` skips the comparison."""
    return _recorded(model, input_ids, probe=probe, returns=1)


def _recorded(model: nn.Module, input_ids: Tensor, *, probe: bool, returns: int) -> tuple[Tensor, list[LayerCall]]:
    """``record_calls`` with stand-ins that return ``returns`` values (1: the hidden states alone;
    more: a tuple of the hidden states and :class:`Carried` markers)."""
    layers = decoder_layers(model)
    first, calls = _record(model, layers, input_ids, changed=False, returns=returns)
    if not probe:
        return first, calls
    _, changed = _record(model, layers, input_ids, changed=True, returns=returns)
    for index, (a, b) in enumerate(zip(calls, changed, strict=True)):
        if not _same((a.args, a.kwargs), (b.args, b.kwargs)):
            raise _DependsOnOutputs(
                f"{type(model).__name__} gives decoder layer {index} inputs computed from earlier layers' outputs "
                "besides the hidden states; it cannot run layer by layer. Load it whole (enough memory for the "
                "full checkpoint)."
            )
    return first, calls


def _record(
    model: nn.Module,
    layers: nn.ModuleList,
    input_ids: Tensor,
    *,
    changed: bool,
    returns: int = 1,
    first_only: bool = False,
) -> tuple[Tensor, list[LayerCall]]:
    calls: dict[int, LayerCall] = {}
    first: list[Tensor] = []

    def make(index: int) -> Callable[..., Any]:
        def act(hidden: Tensor, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            if index in calls:
                raise HFModelError(
                    f"{type(model).__name__} calls decoder layer {index} more than once per forward (a looped "
                    "model); it cannot run layer by layer. Load it whole (enough memory for the full checkpoint)."
                )
            calls[index] = LayerCall(args, kwargs)
            if index == 0:
                first.append(hidden)
                if first_only:
                    raise _Stop
            out = hidden * 2 + 1 if changed else hidden
            return _returned(index, out, returns)

        return act

    with _stand_ins(layers, make), torch.inference_mode():
        try:
            model(input_ids=input_ids, use_cache=False, **_last_logits_only(model))
        except _Stop:
            return first[0], [calls[0]]
        except HFModelError:
            raise
        except (ValueError, TypeError, RuntimeError, AttributeError, IndexError) as exc:
            # The model's loop wanted more from a layer than its hidden states (DSA indexers hand
            # their top-k to the next layer), or did more with a carried value than hand it on.
            first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise _DependsOnOutputs(
                f"{type(model).__name__} passes more than hidden states from one decoder layer to the next "
                f"({first_line}); it cannot run layer by layer. Load it whole (enough memory for the full checkpoint)."
            ) from None
    if len(calls) != len(layers) or not first:
        missing = sorted(set(range(len(layers))) - set(calls))
        raise HFModelError(
            f"{type(model).__name__}'s forward skipped decoder layers {missing[:5]}; it cannot run layer by layer."
        )
    return first[0], [calls[i] for i in range(len(layers))]


def _returned(index: int, hidden: Tensor, returns: int) -> Any:
    """What a stand-in for layer ``index`` returns: the hidden states, or the tuple a real layer returns
    with a marker for each extra value."""
    if returns == 1:
        return hidden
    return (hidden, *(Carried(index, position) for position in range(1, returns)))


def _record_carrying(
    model: nn.Module, batches: Sequence[Tensor], device: torch.device, returns: int
) -> list[list[LayerCall]]:
    """Every batch's calls of every layer, recorded with stand-ins that return ``returns`` values;
    refused unless each extra value reaches only the next layer, as is."""
    calls = [_recorded(model, ids.to(device), probe=b == 0, returns=returns)[1] for b, ids in enumerate(batches)]
    for layer_calls in calls:
        for index, call in enumerate(layer_calls):
            for marker in _markers((call.args, call.kwargs)):
                if marker.layer != index - 1 or not 0 < marker.position < returns:
                    raise HFModelError(
                        f"{type(model).__name__} hands decoder layer {index} value {marker.position} of what layer "
                        f"{marker.layer} returned; the sequential pass carries only the previous layer's values. "
                        "Load it whole (enough memory for the full checkpoint)."
                    )
    return calls


def _markers(value: Any) -> Iterator[Carried]:
    if isinstance(value, Carried):
        yield value
    elif isinstance(value, tuple | list):
        for item in value:
            yield from _markers(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _markers(item)


def _filled(value: Any, extras: tuple[Any, ...]) -> Any:
    """``value`` with every :class:`Carried` marker replaced by the previous layer's real value."""
    if isinstance(value, Carried):
        return extras[value.position - 1]
    if isinstance(value, tuple | list):
        return type(value)(_filled(item, extras) for item in value)
    if isinstance(value, dict):
        return {key: _filled(item, extras) for key, item in value.items()}
    return value


def _moved(value: Any, device: torch.device | str) -> Any:
    if isinstance(value, Tensor):
        return value.to(device)
    if isinstance(value, tuple | list):
        return type(value)(_moved(item, device) for item in value)
    return value


def _last_logits_only(model: nn.Module) -> dict[str, Any]:
    """Ask for the last position's logits only, where the model's forward takes that: the head of a
    150k-token vocabulary would otherwise cost more than the recording itself."""
    import inspect

    parameters = inspect.signature(model.forward).parameters
    return {"logits_to_keep": 1} if "logits_to_keep" in parameters else {}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, Carried) or isinstance(b, Carried):
        return a == b
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
        self.memory: dict[int, Any] = {}
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

    def put(self, batch: int, hidden: Any) -> None:
        """The output of the layer now running (with a checkpoint: into the slot it does not read):
        the hidden states, or (hidden states, the extra values a layer returned)."""
        if self.folder is None and self.checkpoint is None:
            self.memory[batch] = hidden
        else:
            torch.save(_moved(hidden, "cpu"), self._file(batch, 1 - self.slot))

    def get(self, batch: int, device: torch.device) -> Any:
        if self.folder is None and self.checkpoint is None:
            return self.memory[batch]
        return _moved(torch.load(self._file(batch, self.slot), weights_only=True), device)

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
    by another pass is ignored and overwritten. A live pass holds an exclusive ``flock`` on the
    folder (the kernel drops it when the process dies, however it dies), so a second pass of the same
    job running at the same time (a double submission) runs without it instead of mixing its
    progress with the first's."""

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
        self._lock: int | None = None

    def resume(self, total: int) -> tuple[int, int] | None:
        """(layers done, slot of their output), having loaded the caller's state; (0, 0) to start
        afresh; ``None`` when another live pass holds the folder."""
        import fcntl
        import json
        import os

        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        self._lock = fd
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

    def release(self) -> None:
        import os

        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

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
        plain_refusal: HFModelError | None = None
        try:
            for b, ids in enumerate(batches):
                hidden, layer_calls = record_calls(model, ids.to(device), probe=b == 0)
                first.append(hidden)
                calls.append(layer_calls)
        except _DependsOnOutputs as refusal:
            # Perhaps the layers return more than hidden states: layer 0's calls now, the others once
            # layer 0 has shown what a layer returns (module docstring).
            plain_refusal = refusal
            first.clear()
            calls = []
            for ids in batches:
                hidden, layer_calls = _record(model, layers, ids.to(device), changed=False, first_only=True)
                first.append(hidden)
                calls.append(layer_calls)
        carrying = plain_refusal is not None
        total = sum(h.numel() * h.element_size() for h in first)
        done, slot = 0, 0
        if checkpoint is not None:
            stack.callback(checkpoint.release)
            resumed = checkpoint.resume(len(layers))
            if resumed is None:  # the same pass runs elsewhere now: keep nothing rather than mix
                checkpoint = None
            else:
                done, slot = resumed
        carried = Activations(stack, total, spill_bytes, spill_dir, checkpoint, slot)
        if not done:
            for b, hidden in enumerate(first):
                carried.put(b, (hidden, ()) if carrying else hidden)
            carried.flip()
        first.clear()
        returns: int | None = None
        if carrying and done:
            returns = 1 + len(carried.get(0, device)[1])
            calls = _record_carrying(model, batches, device, returns)
        for index in range(done, len(layers)):
            with stream.hold(index) if stream is not None else _nothing():
                layer = layers[index]
                for b in range(len(batches)):
                    if before_batch is not None:
                        before_batch(b)
                    call = calls[b][index]
                    if not carrying:
                        out = layer(carried.get(b, device), *call.args, **call.kwargs)
                        if not isinstance(out, Tensor):
                            raise HFModelError(
                                f"{type(layer).__name__} returns {type(out).__name__}, not the hidden states; "
                                "this model cannot run layer by layer."
                            )
                        carried.put(b, out)
                        continue
                    hidden, extras = carried.get(b, device)
                    out = layer(hidden, *_filled(call.args, extras), **_filled(call.kwargs, extras))
                    if returns is None:
                        if not isinstance(out, tuple) or len(out) < 2:
                            # Layer 0 returns its hidden states alone: the plain refusal stands.
                            raise plain_refusal  # type: ignore[misc]
                        returns = len(out)
                    if not (isinstance(out, tuple) and len(out) == returns and isinstance(out[0], Tensor)):
                        raise HFModelError(
                            f"Decoder layer {index} ({type(layer).__name__}) returns {type(out).__name__}, not "
                            f"{returns} values as layer 0 does; this model cannot run layer by layer."
                        )
                    carried.put(b, (out[0], tuple(out[1:])))
            carried.flip()
            if carrying and index == 0 and returns is not None:
                calls = _record_carrying(model, batches, device, returns)
            if checkpoint is not None:
                checkpoint.commit(index + 1, carried.slot)
            if on_layer is not None:
                on_layer(index + 1, len(layers))
        if on_output is None:
            return
        last = len(layers) - 1
        for b, ids in enumerate(batches):
            final = carried.get(b, device)

            def make(index: int, final: Any = final) -> Callable[..., Any]:
                if not carrying:
                    return lambda hidden, args, kwargs: final if index == last else hidden
                # The last stand-in returns the last layer's real values, the others markers.
                return lambda hidden, args, kwargs: (
                    (final[0], *final[1]) if index == last else _returned(index, hidden, returns or 1)
                )

            with _stand_ins(layers, make):
                on_output(b, model(input_ids=ids.to(device), use_cache=False))


@contextmanager
def _nothing() -> Iterator[None]:
    yield
