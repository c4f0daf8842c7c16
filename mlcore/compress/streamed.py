"""A compression plan carried out on a checkpoint larger than memory, one decoder layer at a time.

:func:`write_compressed` streams the source checkpoint with
:func:`mlcore.hf.layerwise.layer_by_layer`: each decoder layer is read, gets its part of the plan
(novices, merged weights, removal as :meth:`MoEAdapter.removal` decided for the whole model), is
written to a shard of its own and released. The weights outside the layers (embeddings, final
norm, head) go to one more shard, with the safetensors index, the updated config (expert counts,
``norm_topk_prob`` after REAP, the job's ``moelab_compression``) and the sidecar of masks and
novices, exactly what :meth:`MoEAdapter.save` writes for a model in memory, so
``mlcore.hf.load_model`` and stock transformers read both alike. Peak memory: one layer and the
weights outside the layers.

The tensors are those ``save_pretrained`` writes for the same model: each layer's state dict (a
layer with novices gives only its kept experts, :mod:`mlcore.hf.novices`), with transformers'
weight conversion reverted on it, so the shards hold the family's own on-disk layout (per-expert
keys where the family stores them so) and the compact MoNE layout of :mod:`mlcore.hf.checkpoint`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from mlcore.compress.plan import CompressionPlan, apply_to_layer, finish_plan, removal_of
from mlcore.hf.novices import FULL_LAYOUT

INDEX = "model.safetensors.index.json"


def write_compressed(
    source: Path,
    plan: CompressionPlan,
    target: Path,
    *,
    config_fields: dict[str, Any] | None = None,
    on_layer: Callable[[int, int], Any] | None = None,
) -> None:
    """Write ``source`` with ``plan`` applied to the new folder ``target`` (module docstring)."""
    from safetensors.torch import save_file

    from mlcore.hf import adapt, layer_by_layer
    from mlcore.hf.checkpoint import write_sidecar

    target = Path(target)
    target.mkdir(parents=True, exist_ok=False)
    with layer_by_layer(source) as model:
        adapter = adapt(model)
        how = removal_of(adapter, plan)
        counts = {info.num_experts for info in adapter.layers}
        moe = {info.index for info in adapter.layers}
        stream = model.moelab_stream
        weight_map: dict[str, str] = {}
        total = 0
        for index in range(len(stream.layers)):
            with stream.hold(index) as layer, torch.no_grad():
                if index in moe:
                    apply_to_layer(adapter, plan, index, how)
                state = on_disk(model, {f"model.layers.{index}.{name}": t for name, t in layer.state_dict().items()})
                if index in moe:
                    # Written in the compact layout: the sidecar (written last) lists its kept experts.
                    adapter.layer(index).experts.__dict__.pop(FULL_LAYOUT, None)
                file = f"model-layer-{index:05d}.safetensors"
                save_file(state, target / file, metadata={"format": "pt"})
                weight_map.update(dict.fromkeys(state, file))
                total += sum(t.numel() * t.element_size() for t in state.values())
            if on_layer is not None:
                on_layer(index + 1, len(stream.layers))
        outside = on_disk(
            model, _unshared({n: t for n, t in model.state_dict().items() if not n.startswith("model.layers.")})
        )
        save_file(outside, target / "model-outside.safetensors", metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(outside, "model-outside.safetensors"))
        total += sum(t.numel() * t.element_size() for t in outside.values())
        (target / INDEX).write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1, sort_keys=True)
        )
        finish_plan(adapter, plan, how, counts)
        for name, value in (config_fields or {}).items():
            setattr(model.config, name, value)
        model.config.save_pretrained(target)
        # Masks and novices are attributes of the routers and experts modules, not tensors of the
        # layers, so they outlive each layer's release and the sidecar sees every one.
        write_sidecar(adapter, target)


def on_disk(model: Any, state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Part of ``model``'s state dict under the names and layout its family stores on disk, as
    ``save_pretrained`` writes it (transformers' weight conversion reverted; it runs per key group,
    which transformers itself relies on to save offloaded models shard by shard)."""
    from transformers.core_model_loading import revert_weight_conversion

    return {name: t.contiguous() for name, t in revert_weight_conversion(model, state).items()}


def _unshared(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Drop tensors that share memory with one kept before (a head tied to the embeddings):
    safetensors stores each once, and loading ties them again."""
    seen: set[int] = set()
    kept = {}
    for name, tensor in state.items():
        pointer = tensor.untyped_storage().data_ptr()
        if pointer in seen:
            continue
        seen.add(pointer)
        kept[name] = tensor.contiguous()
    return kept
