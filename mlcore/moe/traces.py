"""Routing traces: which experts every token chose, in one versioned file format.

Compression (MoNE and its baselines), routing analysis and traces uploaded from elsewhere all read
and write this one format. Record a trace from any model built from
:class:`~mlcore.moe.layer.MoELayer` or any Hugging Face MoE model the adapter supports::

    with record_routing(model, logits=True) as recorder:
        for batch in calibration:
            with recorder.batch(batch["attention_mask"]):
                model(**batch)
    recorder.to_trace(TraceMetadata(model="zoo:olmoe-tiny", source="shakespeare")).save("trace.safetensors")

File format, version 1
----------------------
A safetensors file. N is the number of (non-padding) tokens, L the number of MoE layers; for trace
layer l, E_l is its expert count and k_l its slot count.

Tensors:

- ``layers.{l}.expert_ids``      int32   [N, k_l]  the experts each token selected, by slot; −1 marks an
  unused slot (routers whose expert count varies per token, e.g. sparsemax, pad to the widest
  token). Every token has at least one expert and never the same expert twice.
- ``layers.{l}.gate_weights``    float32 [N, k_l]  the weights the experts' outputs were summed with;
  0 in unused slots.
- ``layers.{l}.router_logits``   float32 [N, E_l]  optional (all layers or none): the router's
  scores before its activation.
- ``sequence_lengths``           int64   [S]       tokens are stored sequence after sequence; the
  lengths are positive and sum to N.
- ``token_ids``                  int64   [N]       optional: the input token of each position.

The safetensors header metadata (string → string) holds ``format`` = ``moelab-routing-trace``,
``version`` = ``1`` and ``metadata``, a JSON object:

- ``model`` (str): what produced the trace (a zoo name, library id or description);
- ``source`` (str): the calibration text or a description of it (≤ 1 MB);
- ``layers`` (list[int], length L): the model's index of each traced MoE layer;
- ``num_experts``, ``top_k``, ``shared_experts`` (list[int], length L): routed experts, slots
  (= k_l) and shared experts of each layer;
- ``router`` (str): the router kind (``topk-softmax``, ``sparsemax``, ...), or ``""`` if unknown;
- ``extra`` (object): anything else worth keeping.

Loading validates everything (format, version, names, shapes, dtypes, ids in range, sequence
lengths) and raises :class:`TraceError` with a message that says what is wrong: traces can be
uploaded by users.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from mlcore.moe.layer import MoELayer, moe_layers
from mlcore.moe.observe import TokenMask, observing
from mlcore.moe.routers import Routing

FORMAT = "moelab-routing-trace"
VERSION = 1
MAX_SOURCE_CHARS = 1_000_000


class TraceError(ValueError):
    """A routing trace that cannot be used; the message says what is wrong."""


@dataclass(frozen=True)
class TraceMetadata:
    """What a trace came from. Per-layer lists left empty are filled in by
    :meth:`RoutingRecorder.to_trace` from what it saw."""

    model: str
    source: str = ""
    layers: tuple[int, ...] = ()
    num_experts: tuple[int, ...] = ()
    top_k: tuple[int, ...] = ()
    shared_experts: tuple[int, ...] = ()
    router: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}

    @classmethod
    def from_json(cls, data: Any) -> TraceMetadata:
        if not isinstance(data, dict):
            raise TraceError("trace metadata must be a JSON object")
        unknown = set(data) - {f for f in cls.__dataclass_fields__}
        if unknown:
            raise TraceError(f"trace metadata has unknown fields: {', '.join(sorted(unknown))}")
        for name in ("model", "source", "router"):
            if not isinstance(data.get(name, ""), str):
                raise TraceError(f"trace metadata field {name!r} must be a string")
        lists = {}
        for name in ("layers", "num_experts", "top_k", "shared_experts"):
            value = data.get(name)
            if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
                raise TraceError(f"trace metadata field {name!r} must be a list of integers")
            lists[name] = tuple(value)
        if not isinstance(data.get("extra", {}), dict):
            raise TraceError("trace metadata field 'extra' must be an object")
        if "model" not in data:
            raise TraceError("trace metadata lacks 'model'")
        return cls(
            model=data["model"],
            source=data.get("source", ""),
            router=data.get("router", ""),
            extra=data.get("extra", {}),
            **lists,
        )


@dataclass
class RoutingTrace:
    """A routing trace in memory: per-layer tensors as in the file format above."""

    metadata: TraceMetadata
    expert_ids: list[Tensor]
    gate_weights: list[Tensor]
    sequence_lengths: Tensor
    router_logits: list[Tensor] | None = None
    token_ids: Tensor | None = None

    @property
    def num_layers(self) -> int:
        return len(self.expert_ids)

    @property
    def num_tokens(self) -> int:
        return int(self.sequence_lengths.sum())

    def expert_counts(self, layer: int) -> Tensor:
        """[E_l] int64: how many tokens selected each expert of trace layer ``layer``."""
        ids = self.expert_ids[layer]
        return torch.bincount(ids[ids >= 0].long(), minlength=self.metadata.num_experts[layer])

    def sequences(self) -> Iterator[slice]:
        """The token range of each sequence, in order."""
        start = 0
        for length in self.sequence_lengths.tolist():
            yield slice(start, start + length)
            start += length

    # -- validation --------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise :class:`TraceError` unless every part of the trace is consistent."""
        meta = self.metadata
        num_layers = len(self.expert_ids)
        if num_layers == 0:
            raise TraceError("the trace has no MoE layers")
        for name in ("layers", "num_experts", "top_k", "shared_experts"):
            if len(getattr(meta, name)) != num_layers:
                raise TraceError(f"metadata {name} lists {len(getattr(meta, name))} layers; the trace has {num_layers}")
        if len(set(meta.layers)) != num_layers:
            raise TraceError(f"metadata layers lists a layer twice: {list(meta.layers)}")
        if len(meta.source) > MAX_SOURCE_CHARS:
            raise TraceError(f"metadata source has {len(meta.source)} characters; at most {MAX_SOURCE_CHARS}")
        if len(self.gate_weights) != num_layers:
            raise TraceError(f"{num_layers} layers of expert ids but {len(self.gate_weights)} of gate weights")
        if self.router_logits is not None and len(self.router_logits) != num_layers:
            raise TraceError(f"{num_layers} layers of expert ids but {len(self.router_logits)} of router logits")
        lengths = self.sequence_lengths
        _expect(lengths, "sequence_lengths", torch.int64, 1)
        if len(lengths) == 0 or bool((lengths <= 0).any()):
            raise TraceError("sequence_lengths must list at least one sequence, each of positive length")
        n = int(lengths.sum())
        if self.token_ids is not None:
            _expect(self.token_ids, "token_ids", torch.int64, 1, (n,))
            if bool((self.token_ids < 0).any()):
                raise TraceError("token_ids must be non-negative")
        for l in range(num_layers):
            experts, k = meta.num_experts[l], meta.top_k[l]
            if experts < 1 or k < 1 or k > experts or meta.shared_experts[l] < 0:
                raise TraceError(f"layer {l}: need 1 ≤ top_k ≤ num_experts and shared_experts ≥ 0")
            ids, weights = self.expert_ids[l], self.gate_weights[l]
            _expect(ids, f"layers.{l}.expert_ids", torch.int32, 2, (n, k))
            _expect(weights, f"layers.{l}.gate_weights", torch.float32, 2, (n, k))
            _check_selections(l, ids, weights, experts)
            if self.router_logits is not None:
                logits = self.router_logits[l]
                _expect(logits, f"layers.{l}.router_logits", torch.float32, 2, (n, experts))
                if bool(torch.isnan(logits).any()):
                    raise TraceError(f"layers.{l}.router_logits contains NaN")

    # -- files -------------------------------------------------------------------------------
    def tensors(self) -> dict[str, Tensor]:
        out: dict[str, Tensor] = {"sequence_lengths": self.sequence_lengths}
        for l in range(self.num_layers):
            out[f"layers.{l}.expert_ids"] = self.expert_ids[l]
            out[f"layers.{l}.gate_weights"] = self.gate_weights[l]
            if self.router_logits is not None:
                out[f"layers.{l}.router_logits"] = self.router_logits[l]
        if self.token_ids is not None:
            out["token_ids"] = self.token_ids
        return {name: t.detach().cpu().contiguous() for name, t in out.items()}

    def save(self, path: Path | str) -> Path:
        from safetensors.torch import save_file

        self.validate()
        header = {"format": FORMAT, "version": str(VERSION), "metadata": json.dumps(self.metadata.to_json())}
        save_file(self.tensors(), str(path), metadata=header)
        return Path(path)

    @classmethod
    def load(cls, path: Path | str) -> RoutingTrace:
        """Read and validate a trace file; every problem is a :class:`TraceError`."""
        from safetensors import safe_open

        path = Path(path)
        try:
            with safe_open(str(path), framework="pt") as handle:
                header = handle.metadata() or {}
                meta = _read_header(header)
                names = set(handle.keys())
                num_layers = len(meta.layers)
                expected = _expected_names(
                    num_layers, logits="layers.0.router_logits" in names, tokens="token_ids" in names
                )
                if names != expected:
                    missing, unexpected = sorted(expected - names), sorted(names - expected)
                    raise TraceError(
                        f"the trace's tensors do not match its {num_layers} layers: "
                        f"missing {missing or 'none'}, unexpected {unexpected or 'none'}"
                    )
                tensors = {name: handle.get_tensor(name) for name in sorted(names)}
        except (TraceError, FileNotFoundError):
            raise
        except Exception as exc:  # safetensors reports a damaged file in many ways
            raise TraceError(f"{path.name} is not a readable safetensors routing trace ({exc})") from None
        trace = cls(
            metadata=meta,
            expert_ids=[tensors[f"layers.{l}.expert_ids"] for l in range(num_layers)],
            gate_weights=[tensors[f"layers.{l}.gate_weights"] for l in range(num_layers)],
            sequence_lengths=tensors["sequence_lengths"],
            router_logits=[tensors[f"layers.{l}.router_logits"] for l in range(num_layers)]
            if "layers.0.router_logits" in tensors
            else None,
            token_ids=tensors.get("token_ids"),
        )
        trace.validate()
        return trace


def _expected_names(num_layers: int, *, logits: bool, tokens: bool) -> set[str]:
    names = {"sequence_lengths"}
    for l in range(num_layers):
        names |= {f"layers.{l}.expert_ids", f"layers.{l}.gate_weights"}
        if logits:
            names.add(f"layers.{l}.router_logits")
    if tokens:
        names.add("token_ids")
    return names


def _read_header(header: Mapping[str, str]) -> TraceMetadata:
    if header.get("format") != FORMAT:
        raise TraceError(f"not a MoE Lab routing trace (format {header.get('format')!r}, expected {FORMAT!r})")
    try:
        version = int(header.get("version", ""))
    except ValueError:
        raise TraceError(f"the trace's version {header.get('version')!r} is not a number") from None
    if version > VERSION:
        raise TraceError(f"the trace has format version {version}; this MoE Lab reads up to {VERSION}: upgrade it")
    if version < 1:
        raise TraceError(f"unknown trace format version {version}")
    try:
        data = json.loads(header.get("metadata", ""))
    except json.JSONDecodeError as exc:
        raise TraceError(f"the trace's metadata is not valid JSON ({exc.msg})") from None
    return TraceMetadata.from_json(data)


def _expect(t: Tensor, name: str, dtype: torch.dtype, dims: int, shape: tuple[int, ...] | None = None) -> None:
    if t.dtype != dtype:
        raise TraceError(
            f"{name} must be {str(dtype).removeprefix('torch.')}, got {str(t.dtype).removeprefix('torch.')}"
        )
    if t.dim() != dims or (shape is not None and tuple(t.shape) != shape):
        want = list(shape) if shape is not None else f"{dims} dimensions"
        raise TraceError(f"{name} has shape {list(t.shape)}, expected {want}")


def _check_selections(layer: int, ids: Tensor, weights: Tensor, num_experts: int) -> None:
    if bool(((ids < -1) | (ids >= num_experts)).any()):
        bad = ids[(ids < -1) | (ids >= num_experts)][0]
        raise TraceError(f"layers.{layer}.expert_ids holds {int(bad)}; ids must be in [0, {num_experts}) or −1")
    if not bool(torch.isfinite(weights).all()):
        raise TraceError(f"layers.{layer}.gate_weights must be finite")
    unused = ids < 0
    if bool((weights[unused] != 0).any()):
        raise TraceError(f"layers.{layer}: unused slots (id −1) must have gate weight 0")
    if len(ids) and bool(unused.all(dim=1).any()):
        raise TraceError(f"layers.{layer}: every token needs at least one expert")
    ordered = torch.sort(ids, dim=1).values
    if bool(((ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)).any()):
        raise TraceError(f"layers.{layer}: a token selects the same expert twice")


# ---------------------------------------------------------------------------------------- recording


@dataclass
class _LayerLayout:
    num_experts: int
    shared_experts: int
    router: str = ""


class RoutingRecorder(TokenMask):
    """Collects routing decisions during forwards; :meth:`to_trace` turns them into a trace.

    ``record(layer, expert_ids[T, k], gate_weights[T, k], router_logits[T, E] | None)`` is called
    once per layer and forward, by :func:`record_routing`'s hooks or by the Hugging Face adapter.
    Expert ids of −1 mark unused slots. Copies go to the CPU at once (int32 / float32).

    Sequence boundaries: wrap each forward of a padded batch in ``with recorder.batch(mask):``
    (padding rows are dropped and each row of the mask is one sequence), or call
    :meth:`mark_sequence_end` after the forward of each single sequence. Tokens recorded after the
    last boundary form one final sequence.
    """

    def __init__(self, *, logits: bool = False) -> None:
        super().__init__()
        self.logits = logits
        self._ids: dict[int, list[Tensor]] = defaultdict(list)
        self._weights: dict[int, list[Tensor]] = defaultdict(list)
        self._logits: dict[int, list[Tensor]] = defaultdict(list)
        self._tokens: dict[int, int] = defaultdict(int)
        self._boundaries: list[int] = []
        self._layouts: dict[int, _LayerLayout] = {}

    def state_dict(self) -> dict[str, Any]:
        """What has been recorded (plain dicts and lists of tensors), for a pass that may be continued."""
        return {
            "ids": dict(self._ids),
            "weights": dict(self._weights),
            "logits": dict(self._logits),
            "tokens": dict(self._tokens),
            "boundaries": list(self._boundaries),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue after what ``state`` recorded (the layers' descriptions are the caller's)."""
        for name in ("ids", "weights", "logits", "tokens"):
            target = getattr(self, f"_{name}")
            target.clear()
            target.update(state[name])
        self._boundaries = list(state["boundaries"])

    def describe_layer(self, layer: int, *, num_experts: int, shared_experts: int = 0, router: str = "") -> None:
        """Tell the recorder a layer's shape, so :meth:`to_trace` can fill the metadata (the slot
        count k_l is read from the recorded ids)."""
        self._layouts[layer] = _LayerLayout(num_experts, shared_experts, router)

    def record(self, layer: int, expert_ids: Tensor, gate_weights: Tensor, router_logits: Tensor | None = None) -> None:
        if expert_ids.dim() != 2 or gate_weights.shape != expert_ids.shape:
            raise ValueError(
                f"record() needs expert_ids and gate_weights of the same shape [T, k], got "
                f"{tuple(expert_ids.shape)} and {tuple(gate_weights.shape)}"
            )
        keep = self.keep(len(expert_ids))
        if keep is not None:
            keep = keep.to(expert_ids.device)
            expert_ids, gate_weights = expert_ids[keep], gate_weights[keep]
        self._ids[layer].append(expert_ids.detach().to("cpu", torch.int32))
        self._weights[layer].append(gate_weights.detach().to("cpu", torch.float32))
        self._tokens[layer] += len(expert_ids)
        if self.logits:
            if router_logits is None:
                raise ValueError("record_routing(logits=True) needs router_logits for every layer")
            if keep is not None:
                router_logits = router_logits[keep.to(router_logits.device)]
            self._logits[layer].append(router_logits.detach().to("cpu", torch.float32))

    def record_routing(self, layer: int, routing: Routing) -> None:
        """Record a :class:`~mlcore.moe.routers.Routing` (inactive slots become −1 with weight 0)."""
        ids, weights = routing.expert_ids, routing.gate_weights
        if routing.active is not None:
            ids = torch.where(routing.active, ids, -1)
            weights = torch.where(routing.active, weights, 0)
        self.record(layer, ids, weights, routing.logits if self.logits else None)

    def mark_sequence_end(self) -> None:
        """Close the current sequence at the tokens recorded so far (every layer must agree)."""
        total = self._common_token_count()
        if total == (self._boundaries[-1] if self._boundaries else 0):
            raise ValueError("mark_sequence_end() with no tokens recorded since the last boundary")
        self._boundaries.append(total)

    def close_sequences(self, lengths: list[int]) -> None:
        """Close sequences of these lengths over the tokens recorded since the last boundary: for a
        pass that records every batch layer by layer (``mlcore.hf.sequential``), where the batches'
        ends are known only when every layer has run."""
        self._batch_done(lengths)

    def _batch_done(self, lengths: list[int]) -> None:
        start = self._boundaries[-1] if self._boundaries else 0
        for length in lengths:
            start += length
            self._boundaries.append(start)
        if self._tokens and start != self._common_token_count():
            raise ValueError(
                f"the batch's mask has {start} real tokens but the layers recorded {self._common_token_count()}"
            )

    def _common_token_count(self) -> int:
        counts = set(self._tokens.values())
        if len(counts) > 1:
            raise ValueError(f"layers recorded different numbers of tokens: {dict(self._tokens)}")
        return counts.pop() if counts else 0

    def to_trace(self, metadata: TraceMetadata) -> RoutingTrace:
        """The recorded routing as a validated trace; empty per-layer metadata is filled in."""
        if not self._ids:
            raise ValueError("nothing was recorded: run the model inside record_routing() first")
        total = self._common_token_count()
        lengths = [b - a for a, b in zip([0, *self._boundaries], self._boundaries)]
        done = self._boundaries[-1] if self._boundaries else 0
        if total > done:
            lengths.append(total - done)
        keys = sorted(self._ids)
        ids = [_pad_cat(self._ids[k], -1) for k in keys]
        weights = [_pad_cat(self._weights[k], 0) for k in keys]
        logits = [torch.cat(self._logits[k]) for k in keys] if self.logits else None
        layouts = [self._layouts.get(k) for k in keys]

        def filled(given: tuple[int, ...], name: str, derive: Any) -> tuple[int, ...]:
            if given:
                return given
            values = [derive(i, layout) for i, layout in enumerate(layouts)]
            if any(v is None for v in values):
                raise ValueError(f"TraceMetadata.{name} is needed: the recorder cannot tell it for these layers")
            return tuple(values)

        meta = replace(
            metadata,
            layers=metadata.layers or tuple(keys),
            top_k=filled(metadata.top_k, "top_k", lambda i, _: ids[i].shape[1]),
            num_experts=filled(
                metadata.num_experts,
                "num_experts",
                lambda i, lay: lay.num_experts if lay else (logits[i].shape[1] if logits else None),
            ),
            shared_experts=filled(
                metadata.shared_experts, "shared_experts", lambda _, lay: lay.shared_experts if lay else None
            ),
            router=metadata.router or "/".join(sorted({lay.router for lay in layouts if lay and lay.router})),
        )
        trace = RoutingTrace(meta, ids, weights, torch.tensor(lengths, dtype=torch.int64), logits)
        try:
            trace.validate()
        except TraceError as exc:
            raise ValueError(f"the recorded routing does not make a valid trace: {exc}") from None
        return trace


def _pad_cat(chunks: list[Tensor], fill: float) -> Tensor:
    """Concatenate [T_i, k_i] chunks, padding narrower ones on the right (variable-k routers)."""
    width = max(c.shape[1] for c in chunks)
    padded = [
        torch.nn.functional.pad(c, (0, width - c.shape[1]), value=fill) if c.shape[1] < width else c for c in chunks
    ]
    return torch.cat(padded)


@contextmanager
def record_routing(model: nn.Module, *, logits: bool = False) -> Iterator[RoutingRecorder]:
    """Record every MoE layer's routing while the block runs.

    Models containing :class:`~mlcore.moe.layer.MoELayer` modules are observed directly (layer
    index = order in ``model.modules()``); any other model goes through the Hugging Face adapter
    (:func:`mlcore.hf.adapt`), which calls :meth:`RoutingRecorder.record`.
    """
    recorder = RoutingRecorder(logits=logits)
    layers = moe_layers(model)
    if not layers:
        from mlcore.hf import adapt

        adapter = adapt(model)
        for info in adapter.layers:
            recorder.describe_layer(
                info.index,
                num_experts=info.num_experts,
                shared_experts=info.num_shared_experts,
                router=f"hf-{adapter.arch}",
            )
        with adapter.capture_routing(recorder.record, logits=logits):
            yield recorder
        return
    for index, layer in enumerate(layers):
        recorder.describe_layer(
            index,
            num_experts=layer.num_experts,
            shared_experts=layer.num_shared_experts,
            router=layer.router.kind,
        )

    def on_forward(index: int, layer: MoELayer, x: Tensor, routing: Routing) -> None:
        recorder.record_routing(index, routing)

    with observing(model, on_forward):
        yield recorder
