"""Run a checkpoint with one decoder layer in memory at a time (sequential, GPTQ-style).

``layer_by_layer(path)`` builds the model on the meta device, loads what lies outside the decoder
layers (embeddings, final norm, head, rotary tables), and gives every decoder layer a pair of
hooks: before its forward the layer is read from the safetensors shards with ``safe_open``
(only its own tensors), after it the layer goes back to the meta device. A forward over a
calibration batch therefore runs the whole batch through layer i before layer i + 1 is read,
with peak memory of one layer plus activations. The model's own forward still does the masks and
position embeddings, so the result matches a full-model pass; adapter hooks work as usual.

Checkpoints saved by transformers 5.x keep the original per-expert tensors
(``experts.{e}.gate_proj.weight``, Mixtral's ``block_sparse_moe.experts.{e}.w1.weight``), which
``from_pretrained`` fuses on load; ``fused_layer_state`` does the same fusion for one layer,
mirroring ``transformers.conversion_mapping`` for the supported model types.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from mlcore.heap import HeapTrimmer
from mlcore.hf.architectures import HFModelError
from mlcore.hf.checkpoint import apply_sidecar
from mlcore.hf.loading import checked_config, load_dtype, weight_files

_PER_EXPERT = re.compile(
    r"^(?P<prefix>.*\.experts)\.(?P<expert>\d+)\.(?P<proj>w1|w2|w3|gate_proj|up_proj|down_proj)\.weight$"
)
_GATE, _UP, _DOWN = ("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj")


class ShardIndex:
    """Where each tensor of a safetensors checkpoint lives, read lazily with ``safe_open``, under the
    model's own names (``rename`` maps an on-disk key to the module's, as transformers' loader does)."""

    def __init__(self, path: Path, rename: Callable[[str], str] = str) -> None:
        from safetensors import safe_open

        self.location: dict[str, Path] = {}
        self.disk_name: dict[str, str] = {}
        for file in weight_files(path):
            with safe_open(file, framework="pt") as shard:
                for key in shard.keys():  # noqa: SIM118 - safe_open is not iterable
                    name = rename(key)
                    self.location[name], self.disk_name[name] = file, key

    def read(self, names: list[str]) -> dict[str, Tensor]:
        from safetensors import safe_open

        tensors = {}
        # One tensor per opening: pages of a mapped shard count as resident until it is closed, so
        # reading a whole layer through one mapping would hold the layer twice at its peak.
        for name in names:
            with safe_open(self.location[name], framework="pt") as shard:
                tensors[name] = shard.get_tensor(self.disk_name[name])
        return tensors

    def names(self, keep: Callable[[str], bool]) -> list[str]:
        return [name for name in self.location if keep(name)]


def fused_layer_state(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Fuse per-expert MLP tensors into ``gate_up_proj[E, 2I, H]`` (gate rows, then up rows) and
    ``down_proj[E, H, I]``, and rename Mixtral's ``block_sparse_moe`` to ``mlp``."""
    fused: dict[str, Tensor] = {}
    experts: dict[str, dict[tuple[str, int], Tensor]] = defaultdict(dict)
    for name, tensor in state.items():
        name = re.sub(r"(^|\.)block_sparse_moe\.", r"\1mlp.", name)
        match = _PER_EXPERT.match(name)
        if match is None:
            fused[name] = tensor
        else:
            experts[match["prefix"]][(match["proj"], int(match["expert"]))] = tensor
    for prefix, parts in experts.items():
        count = 1 + max(expert for _, expert in parts)
        gate, up, down = (_stacked(parts, names, count) for names in (_GATE, _UP, _DOWN))
        fused[f"{prefix}.gate_up_proj"] = torch.cat([gate, up], dim=1)
        fused[f"{prefix}.down_proj"] = down
    return fused


def _stacked(parts: dict[tuple[str, int], Tensor], names: tuple[str, ...], count: int) -> Tensor:
    """[E, ...] from one projection's per-expert tensors, whichever naming the checkpoint uses."""
    missing = [e for e in range(count) if not any((n, e) in parts for n in names)]
    if missing:
        raise HFModelError(f"Checkpoint lacks {names[-1]} of experts {missing[:5]}; it is incomplete.")
    return torch.stack([next(parts[(n, e)] for n in names if (n, e) in parts) for e in range(count)])


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
    shards = ShardIndex(path, _renamer(model))
    layers = _decoder_layers(model)
    _load_outside_layers(model, shards, device)
    apply_sidecar(adapt(model), path)
    stream = LayerStream(shards, layers, device)
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

    def __init__(self, shards: ShardIndex, layers: nn.ModuleList, device: str | torch.device) -> None:
        self.shards, self.layers, self.device = shards, layers, device
        self.held: set[int] = set()
        # Layer after layer of the same shapes leaves the C heap fragmented; give it back as it grows.
        self.trim = HeapTrimmer(slack=2**28)

    def load(self, index: int) -> None:
        layer = self.layers[index]
        if not any(p.is_meta for p in layer.parameters()):
            return
        prefix = f"model.layers.{index}."
        names = self.shards.names(lambda name: name.startswith(prefix))
        state = fused_layer_state({name[len(prefix) :]: t for name, t in self.shards.read(names).items()})
        _assign(layer, state, self.device, strict=True)

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


def _renamer(model: nn.Module) -> Callable[[str], str]:
    """transformers' own key renamings for this model (on-disk names that differ from module names);
    per-expert fusion is ``fused_layer_state``'s job."""
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightRenaming, apply_renamings

    renamings = [t for t in get_model_conversion_mapping(model) if isinstance(t, WeightRenaming)]
    return lambda key: apply_renamings(key, renamings)


def _decoder_layers(model: nn.Module) -> nn.ModuleList:
    layers = getattr(getattr(model, "model", None), "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise HFModelError(f"{type(model).__name__} keeps no decoder layers at model.layers; cannot load per layer.")
    return layers


def _load_outside_layers(model: nn.Module, shards: ShardIndex, device: str | torch.device) -> None:
    state = shards.read(shards.names(lambda name: not name.startswith("model.layers.")))
    _assign(model, state, device, strict=False)
    if getattr(model.config, "tie_word_embeddings", False):
        model.get_output_embeddings().weight = model.get_input_embeddings().weight
    # Rotary tables are non-persistent buffers computed from the config: rebuild them for real.
    for name, module in list(model.named_modules()):
        if name.startswith("model.layers.") or not any(b.is_meta for b in module.buffers(recurse=False)):
            continue
        parent, _, attr = name.rpartition(".")
        with torch.device(device):
            setattr(model.get_submodule(parent), attr, type(module)(config=model.config))
    outside = [n for n, t in model.state_dict().items() if t.is_meta and not n.startswith("model.layers.")]
    if outside:
        raise HFModelError(f"Checkpoint lacks {', '.join(outside[:3])}; it does not match its config.")


def _assign(module: nn.Module, state: dict[str, Tensor], device: str | torch.device, *, strict: bool) -> None:
    expected = module.state_dict()
    missing = [name for name in state if name not in expected]
    if missing:
        raise HFModelError(f"Checkpoint tensors {', '.join(missing[:3])} do not fit {type(module).__name__}.")
    # Keep each tensor's dtype as the model declares it (fp32 routers stay fp32 in a bf16 model).
    cast = {name: tensor.to(device=device, dtype=expected[name].dtype) for name, tensor in state.items()}
    module.load_state_dict(cast, strict=strict, assign=True)
