"""Run a checkpoint with one decoder layer in memory at a time (sequential, GPTQ-style).

``layer_by_layer(path)`` builds the model on the meta device, loads what lies outside the decoder
layers (embeddings, final norm, head, rotary tables), and gives every decoder layer a pair of
hooks: before its forward the layer is read from the safetensors shards with ``safe_open``
(only its own tensors), after it the layer goes back to the meta device. A forward over a
calibration batch therefore runs the whole batch through layer i before layer i + 1 is read,
with peak memory of one layer plus activations. The model's own forward still does the masks and
position embeddings, so the result matches a full-model pass; adapter hooks work as usual.

On-disk tensors are not always the model's: transformers 5 converts them while loading (renamed
keys, per-expert matrices fused, fused projections split). Each layer's tensors go through the same
conversion, transformers' own code run on that layer's keys only (:mod:`mlcore.hf.conversion`), so a
streamed layer holds exactly what ``from_pretrained`` would have loaded into it.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from mlcore.heap import HeapTrimmer
from mlcore.hf.architectures import HFModelError
from mlcore.hf.checkpoint import apply_sidecar
from mlcore.hf.conversion import CheckpointConversion
from mlcore.hf.loading import checked_config, load_dtype, weight_files


class ShardIndex:
    """Where each tensor of a safetensors checkpoint lives, read lazily with ``safe_open``, and which
    model tensor it feeds (``target``: transformers' renaming and conversion, :mod:`mlcore.hf.conversion`).
    Keys are the on-disk names; keys the model does not use are left out, as ``from_pretrained`` ignores them."""

    def __init__(self, path: Path, conversion: CheckpointConversion) -> None:
        from safetensors import safe_open

        location: dict[str, Path] = {}
        for file in weight_files(path):
            with safe_open(file, framework="pt") as shard:
                location.update(dict.fromkeys(shard.keys(), file))
        self.target = conversion.targets(location)
        self.location = {key: location[key] for key in self.target}

    def read(self, names: list[str]) -> dict[str, Tensor]:
        from safetensors import safe_open

        tensors = {}
        # One tensor per opening: pages of a mapped shard count as resident until it is closed, so
        # reading a whole layer through one mapping would hold the layer twice at its peak.
        for name in names:
            with safe_open(self.location[name], framework="pt") as shard:
                tensors[name] = shard.get_tensor(name)
        return tensors

    def names(self, keep: Callable[[str], bool]) -> list[str]:
        """The on-disk keys whose model tensor's name passes ``keep``."""
        return [key for key, target in self.target.items() if keep(target)]


@contextmanager
def layer_by_layer(
    path: Path, *, dtype: torch.dtype | None = None, device: str | torch.device = "cpu"
) -> Iterator[Any]:
    """Yield the checkpoint's model with its decoder layers materialised one at a time (see the
    module docstring). Hooks added inside the block (e.g. ``adapt(model).capture_routing``) see
    each layer while it is in memory. The model is for forward passes only, in the checkpoint's own
    dtype unless ``dtype`` says otherwise."""
    from transformers import AutoModelForCausalLM

    from mlcore.hf.adapter import adapt

    path = Path(path)
    config = checked_config(path)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=load_dtype(path, dtype))
    model.eval()
    conversion = CheckpointConversion(model)
    shards = ShardIndex(path, conversion)
    layers = _decoder_layers(model)
    _load_outside_layers(model, shards, conversion, device)
    apply_sidecar(adapt(model), path)
    stream = LayerStream(shards, conversion, layers, device)
    with ExitStack() as stack:
        for index, layer in enumerate(layers):
            stack.callback(layer.register_forward_pre_hook(lambda m, a, i=index: stream.load(i)).remove)
            stack.callback(layer.register_forward_hook(lambda m, a, o, i=index: stream.release(i)).remove)
        model.moelab_stream = stream
        stack.callback(delattr, model, "moelab_stream")
        yield model


class LayerStream:
    """The decoder layers of a streamed model and where their tensors live. A layer is read when a
    forward reaches it and goes back to the meta device after it, unless it is held (``hold``):
    the sequential pass (:mod:`mlcore.hf.sequential`) holds one layer while every batch goes through it."""

    def __init__(
        self, shards: ShardIndex, conversion: CheckpointConversion, layers: nn.ModuleList, device: str | torch.device
    ) -> None:
        self.shards, self.conversion, self.layers, self.device = shards, conversion, layers, device
        self.held: set[int] = set()
        # Layer after layer of the same shapes leaves the C heap fragmented; give it back as it grows.
        self.trim = HeapTrimmer(slack=2**28)

    def load(self, index: int) -> None:
        layer = self.layers[index]
        if not any(p.is_meta for p in layer.parameters()):
            return
        prefix = f"model.layers.{index}."
        converted = self.conversion.convert(self.shards.read(self.shards.names(lambda n: n.startswith(prefix))))
        self.conversion.check_within(converted, prefix)
        _assign(layer, {name[len(prefix) :]: t for name, t in converted.items()}, self.device, strict=True)

    def release(self, index: int) -> None:
        if index not in self.held:
            self.layers[index].to("meta")
            self.trim()

    @contextmanager
    def hold(self, index: int) -> Iterator[nn.Module]:
        """Layer ``index`` in memory for the whole block, then released."""
        self.load(index)
        self.held.add(index)
        try:
            yield self.layers[index]
        finally:
            self.held.discard(index)
            self.release(index)


def _decoder_layers(model: nn.Module) -> nn.ModuleList:
    layers = getattr(getattr(model, "model", None), "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise HFModelError(f"{type(model).__name__} keeps no decoder layers at model.layers; cannot load per layer.")
    return layers


def _load_outside_layers(
    model: nn.Module, shards: ShardIndex, conversion: CheckpointConversion, device: str | torch.device
) -> None:
    state = conversion.convert(shards.read(shards.names(lambda name: not name.startswith("model.layers."))))
    _assign(model, state, device, strict=False)
    if getattr(model.config, "tie_word_embeddings", False):
        model.get_output_embeddings().weight = model.get_input_embeddings().weight
    # Rotary tables are non-persistent buffers computed from the config: rebuild them for real.
    # Other non-persistent buffers (Gemma 4's embedding scale) come from the model's own weight
    # initialisation, as they do in ``from_pretrained``.
    for name, module in list(model.named_modules()):
        if name.startswith("model.layers.") or not any(b.is_meta for b in module.buffers(recurse=False)):
            continue
        parent, _, attr = name.rpartition(".")
        if "config" in inspect.signature(type(module).__init__).parameters:
            with torch.device(device):
                setattr(model.get_submodule(parent), attr, type(module)(config=model.config))
        else:
            _initialise_buffers(model, module, device)
    outside = [n for n, t in model.state_dict().items() if t.is_meta and not n.startswith("model.layers.")]
    if outside:
        raise HFModelError(f"Checkpoint lacks {', '.join(outside[:3])}; it does not match its config.")


def _initialise_buffers(model: nn.Module, module: nn.Module, device: str | torch.device) -> None:
    """Fill ``module``'s meta buffers as the model's ``_init_weights`` computes them, on a shallow copy
    whose parameters are on the meta device: the loaded ones are neither re-initialised nor copied
    (an embedding can be gigabytes)."""
    real = copy.copy(module)
    real._parameters = {name: None if p is None else p.to("meta") for name, p in module._parameters.items()}
    real._buffers = {
        name: None if b is None else torch.empty_like(b, device=device) if b.is_meta else b
        for name, b in module._buffers.items()
    }
    with torch.no_grad():
        model._init_weights(real)  # type: ignore[operator]
    for name, buffer in list(module.named_buffers(recurse=False)):
        if buffer.is_meta:
            module._buffers[name] = real._buffers[name]


def _assign(module: nn.Module, state: dict[str, Tensor], device: str | torch.device, *, strict: bool) -> None:
    expected = module.state_dict()
    missing = [name for name in state if name not in expected]
    if missing:
        raise HFModelError(f"Checkpoint tensors {', '.join(missing[:3])} do not fit {type(module).__name__}.")
    misshapen = [
        f"{n} {list(t.shape)} (needs {list(expected[n].shape)})"
        for n, t in state.items()
        if t.shape != expected[n].shape
    ]
    if misshapen:
        raise HFModelError(
            f"Checkpoint tensors {', '.join(misshapen[:3])} do not fit {type(module).__name__}; the checkpoint is "
            "incomplete or belongs to another configuration."
        )
    # Keep each tensor's dtype as the model declares it (fp32 routers stay fp32 in a bf16 model).
    cast = {name: tensor.to(device=device, dtype=expected[name].dtype) for name, tensor in state.items()}
    module.load_state_dict(cast, strict=strict, assign=True)
