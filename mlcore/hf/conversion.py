"""transformers' own checkpoint conversion, run on part of a checkpoint (one decoder layer at a time).

transformers 5 does not load a checkpoint's tensors as they are stored: ``from_pretrained`` passes
the whole state dict through the model's weight conversion mapping
(``transformers.conversion_mapping.get_model_conversion_mapping``). ``WeightRenaming``\\ s rename
on-disk keys (``backbone.`` → ``model.``, ``block_sparse_moe.input_linear.weight`` →
``block_sparse_moe.experts.gate_up_proj``); a ``WeightConverter`` gathers several on-disk tensors
into one model tensor or splits one into several, through its ``ConversionOps``: per-expert
matrices stacked (``MergeModulelist``) and gate and up joined (``Concatenate``), q/k/v convolutions
concatenated, a fused ``query_key_value`` or ``in_proj`` split to the model's shapes (``Split``,
``Chunk``), transposes. ``convert_and_load_state_dict_in_model`` does this over the whole model at
once.

:class:`CheckpointConversion` runs the same code over any subset of the keys. ``targets`` names,
before any tensor is read, the model tensor each on-disk key feeds, by transformers' own
``rename_source_key`` over all keys in transformers' order (some renamings depend on the keys seen
before them); a layer's on-disk keys are those whose target lies in ``model.layers.{i}.``.
``convert`` groups the given tensors per target exactly as transformers does (a fresh copy of the
matching converter per target, sources in natural key order so expert 10 follows expert 9, each
tensor cast first to its target's dtype) and calls the converters' own ``convert``; nothing here
reimplements an operation. All on-disk keys that feed one model tensor are read together, so a
layer converts alone when every converter's targets lie in that layer (checked on the produced
names by :meth:`CheckpointConversion.check_within`; shapes are checked when the layer is assigned).
"""

from __future__ import annotations

from collections.abc import Iterable
from copy import deepcopy
from typing import Any

from torch import Tensor, nn

from mlcore.hf.architectures import HFModelError


class CheckpointConversion:
    """The conversion mapping of ``model`` (a meta-device instance is enough), for partial state dicts."""

    def __init__(self, model: nn.Module) -> None:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightConverter, WeightRenaming

        self.model = model
        mapping = get_model_conversion_mapping(model)
        self.renamings = [t for t in mapping if isinstance(t, WeightRenaming)]
        self.converters = [t for t in mapping if isinstance(t, WeightConverter)]
        self.by_pattern = {pattern: c for c in self.converters for pattern in c.source_patterns}
        # Names, dtypes and shapes only: on the meta device this holds no memory.
        self.expected: dict[str, Tensor] = model.state_dict()
        #: on-disk key → (model tensor it feeds, the converter's source pattern, or None for a rename)
        self.plan: dict[str, tuple[str, str | None]] = {}

    def targets(self, keys: Iterable[str]) -> dict[str, str]:
        """On-disk key → the model tensor it feeds (a converter's first target), for every key the model
        uses; unused keys are left out, as transformers reports them unexpected. Call once with all
        keys of the checkpoint: renamings may depend on the keys before them."""
        from transformers.core_model_loading import dot_natural_key, rename_source_key

        prefix, expected = getattr(self.model, "base_model_prefix", None), self.expected
        for key in sorted(keys, key=dot_natural_key):
            target, pattern = rename_source_key(key, self.renamings, self.converters, prefix, expected)
            if target not in expected and key in expected:
                # transformers' own fallback: a renaming meant for another name (DeepSeek-V4's
                # ``.norm.`` → ``.kv_norm.`` also matches ``model.norm.``) does not apply here.
                target, pattern = rename_source_key(key, [], [], base_model_prefix=prefix, meta_state_dict=expected)
            if target in expected:
                self.plan[key] = (target, pattern)
        return {key: target for key, (target, _) in self.plan.items()}

    def convert(self, tensors: dict[str, Tensor]) -> dict[str, Tensor]:
        """Model tensor name → tensor, from on-disk key → tensor (keys ``targets`` has seen), by the
        converters' own operations, as ``from_pretrained`` would load them. ``tensors`` is consumed:
        each group's sources are dropped once converted, so the peak is the read tensors plus one
        converter's output, not two copies of the layer."""
        from transformers.core_model_loading import WeightRenaming, dot_natural_key

        groups: dict[str, Any] = {}
        for key in sorted(tensors, key=dot_natural_key):
            target, pattern = self.plan[key]
            if pattern is None:
                transform, pattern = groups.setdefault(target, WeightRenaming(key, target)), key
            else:
                transform = groups.setdefault(target, deepcopy(self.by_pattern[pattern]))
            # transformers casts each source to its target's dtype before converting (a no-op when equal).
            transform.add_tensor(target, key, pattern, tensors.pop(key).to(self.expected[target].dtype))
        converted: dict[str, Tensor] = {}
        for first in list(groups):
            transform = groups.pop(first)
            try:
                produced = transform.convert(first, model=self.model, config=self.model.config)
            except Exception as exc:
                raise HFModelError(
                    f"transformers' conversion of the checkpoint tensors for {first} failed "
                    f"({type(exc).__name__}: {exc}); the checkpoint is incomplete or does not match its config."
                ) from exc
            for name, value in produced.items():
                converted[name] = value[0] if isinstance(value, list) else value
        return converted

    @staticmethod
    def check_within(converted: dict[str, Tensor], prefix: str) -> None:
        """Refuse tensors a layer's conversion produced for another part of the model: a converter
        whose sources span layers cannot run one layer at a time."""
        strays = [name for name in converted if not name.startswith(prefix)]
        if strays:
            raise HFModelError(
                f"Converting the checkpoint's {prefix.rstrip('.')} produced {', '.join(strays[:3])}: this model's "
                "weight conversion joins tensors of several layers, so it cannot load layer by layer."
            )
