"""The sidecar: the adapter's edits that a stock config cannot hold, kept next to a checkpoint.

Router masks of the softmax routers and novices of bias-free experts are stored in
``moelab_experts.safetensors`` (loading, which re-applies it, is in :mod:`mlcore.hf.loading`):

    layers.{i}.masked          bool[E]     experts taken out of routing in decoder layer i
    layers.{i}.novice_ids      int64[n]    experts replaced by constants
    layers.{i}.novice_vectors  float[n, H] their constant outputs c_e
    layers.{i}.kept            int64[K]    the experts whose weights the shards store, slot by slot

Masks and novices that the stock checkpoint already carries (GPT-OSS, DeepSeek-V3 biases) are
recorded there too, so the sidecar always lists every edit.

**Compact layout (sidecar version 2).** A novice's weights compute nothing (its output is c_e),
so they are not stored: in a layer with novices the shards hold only the K = E − n kept experts,
in the family's own on-disk layout (fused ``gate_up_proj`` [K, 2I, H], GraniteMoE's
``input_linear.weight`` [K, 2I, H], per-expert keys ``experts.{j}.*`` with j = 0..K−1, ...), because
they are written by the family's own state dict (``save_pretrained`` reverts transformers'
conversion; see :mod:`mlcore.hf.novices` for the state-dict hook that drops the rows). Slot j holds
expert ``kept[j]``; ``kept`` is ascending. The router keeps all E rows (novices are still routed)
and the config's expert count stays E; ``config.json`` gives ``moelab_stored_experts`` (decoder
layer → K) and ``moelab_experts_modules`` (decoder layer → experts module), which a loader needs
before any weight is read, to give each experts module its stored shapes. The file then meets
issue #21's bound: non-expert bytes + kept-expert bytes + the novice vectors (plus the ids).
Checkpoints written before (version 1, every expert stored with the novices' rows zeroed, no
``kept``) load as they always did.

Loading the compact layout: MoE Lab (:func:`mlcore.hf.loading.load_model`) builds the model with
room for the K stored experts only, lets ``from_pretrained`` fill them, then widens each experts
tensor back to E rows with zeros for the novices (the adapter and every job read stacked
[E, ...] experts beside an [E, H] router): the file is compact, memory after loading is the full
model's, as before (peak: the full model plus one [K, ...] tensor). A layer streamed on its own
(:mod:`mlcore.hf.layerwise`) is widened the same way when it is read. The shipped code (below)
keeps the model compact in memory: only the kept experts are ever allocated, and each novice slot
of the router's top-k goes to slot 0 with gate 0 (no contribution) while its constant is added.

A checkpoint whose edits live only in the sidecar would load silently *wrong* in stock tools
(novices as zero experts, masked experts routed again), and a compact one would not match its
config's shapes. Its config.json is therefore marked: ``model_type`` becomes ``moelab-sidecar``
(no library knows it, so ``AutoModelForCausalLM`` and others fail loudly) and
``moelab_base_model_type`` keeps the real type, which :func:`mlcore.hf.loading.checked_config`
reads back (MoE Lab never runs the shipped code). When the sidecar-only edits are novices (every
family, GPT-OSS included: its stock biases could hold c_e, but only with every expert's weights
stored), the checkpoint also ships ``modeling_moelab_sidecar.py`` with an ``auto_map``, so
``from_pretrained(..., trust_remote_code=True)`` computes exactly this model in stock transformers.
For tools that run no remote code, export the model with the novices removed
(``MoEAdapter.save_without_novices``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from mlcore.hf.architectures import HFModelError
from mlcore.hf.novices import FULL_LAYOUT, stored_experts

if TYPE_CHECKING:
    from mlcore.hf.adapter import MoEAdapter

SIDECAR = "moelab_experts.safetensors"
_SIDECAR_FORMAT = "moelab-hf-experts"
#: The model_type of a checkpoint that needs its sidecar; no library ships it, so stock loads fail.
SIDECAR_MODEL_TYPE = "moelab-sidecar"
BASE_TYPE_FIELD = "moelab_base_model_type"
REMOTE_CODE = "modeling_moelab_sidecar.py"
#: config.json fields of a marked checkpoint: decoder layer → experts module name, and → experts stored.
MODULES_FIELD = "moelab_experts_modules"
STORED_FIELD = "moelab_stored_experts"


def weight_files(path: Path) -> list[Path]:
    """The checkpoint's safetensors shards (the sidecar is not one)."""
    return sorted(p for p in Path(path).glob("*.safetensors") if p.name != SIDECAR)


@dataclass(frozen=True)
class StoredTensor:
    """One tensor of a checkpoint as its safetensors header describes it (no data is read)."""

    name: str
    dtype: str  #: safetensors' name: "BF16", "F32", "I64", ...
    numel: int
    nbytes: int


def stored_tensors(path: Path) -> Iterator[StoredTensor]:
    """Every weight tensor of the checkpoint at ``path``, from the shards' headers."""
    from mlcore.uploads import safetensors_header

    for file in weight_files(path):
        for name, entry in safetensors_header(file).items():
            if name == "__metadata__" or not isinstance(entry, dict):
                continue
            start, end = entry.get("data_offsets", (0, 0))
            numel = math.prod(int(n) for n in entry.get("shape", []))
            yield StoredTensor(name, str(entry.get("dtype")), numel, int(end) - int(start))


def needs_sidecar(adapter: MoEAdapter) -> bool:
    """Whether some edit lives only in the sidecar (stock weights alone would compute something
    else, or, in the compact layout, not load at all)."""
    native_novices = all(hasattr(info.experts, "down_proj_bias") for info in adapter.layers)
    return bool(_hook_masks(adapter) or compact_layers(adapter) or (adapter.novices and not native_novices))


def compact_layers(adapter: MoEAdapter) -> dict[int, Tensor]:
    """Decoder layer → the ids of the experts its checkpoint stores, for the layers stored compact."""
    found = {info.index: stored_experts(info.experts) for info in adapter.layers}
    return {index: kept for index, kept in found.items() if kept is not None}


def _hook_masks(adapter: MoEAdapter) -> bool:
    """Masks that live in a router hook (sidecar) rather than in a stock selection bias."""
    in_weights = adapter.spec.selection_bias is not None or adapter.spec.router_rule == "selection_bias"
    return bool(adapter.masks) and not in_weights


def mark_config(
    path: Path,
    base_model_type: str,
    modules: dict[str, str] | None = None,
    *,
    stored: dict[str, int] | None = None,
    ship_code: bool = True,
) -> None:
    """Make stock loaders refuse the checkpoint at ``path`` unless they run its shipped code (see
    the module docstring). ``modules`` (decoder layer → experts module name) and ``stored``
    (decoder layer → experts stored, compact layers only) go into the config; the code ships when
    ``modules`` is given and ``ship_code`` is true."""
    import json

    file = Path(path) / "config.json"
    raw = json.loads(file.read_text(encoding="utf-8"))
    raw[BASE_TYPE_FIELD] = base_model_type
    raw["model_type"] = SIDECAR_MODEL_TYPE
    for field in (MODULES_FIELD, STORED_FIELD, "auto_map"):
        raw.pop(field, None)
    if modules is not None:
        raw[MODULES_FIELD] = modules
    if stored:
        raw[STORED_FIELD] = stored
    if modules is not None and ship_code:
        template = (Path(__file__).parent / "shipped" / REMOTE_CODE).read_text(encoding="utf-8")
        code = template.replace('BASE_MODEL_TYPE = "mixtral"', f"BASE_MODEL_TYPE = {base_model_type!r}", 1)
        (Path(path) / REMOTE_CODE).write_text(code, encoding="utf-8")
        stem = REMOTE_CODE.removesuffix(".py")
        raw["auto_map"] = {
            "AutoConfig": f"{stem}.MoELabSidecarConfig",
            "AutoModelForCausalLM": f"{stem}.MoELabSidecarForCausalLM",
        }
        raw["architectures"] = ["MoELabSidecarForCausalLM"]
    raw["moelab_note"] = (
        "Experts of this checkpoint were replaced by constant novices or masked, which MoE Lab's loader "
        "(mlcore.hf.load_model) applies, and stock transformers only with trust_remote_code=True where "
        f"{REMOTE_CODE} is shipped; without them it would compute a different model"
        + (
            f". The novices' weights are not stored: the layers in {STORED_FIELD} hold only the experts that "
            f"{SIDECAR} lists as 'kept'"
            if stored
            else ""
        )
        + ". Use the export without novices for other tools."
    )
    file.write_text(json.dumps(raw, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def base_model_type(raw: dict) -> str:
    """The real model_type of a config.json (unmarked, or marked by ``mark_config``)."""
    if raw.get("model_type") == SIDECAR_MODEL_TYPE:
        return str(raw.get(BASE_TYPE_FIELD))
    return str(raw.get("model_type"))


def write_sidecar(adapter: MoEAdapter, path: Path) -> None:
    """Write the sidecar of ``adapter``'s edits next to the weights just written at ``path`` (by
    ``save_pretrained`` or :func:`mlcore.compress.streamed.write_compressed`), and mark the config."""
    from safetensors.torch import save_file

    tensors = {}
    for index, masked in adapter.masks.items():
        tensors[f"layers.{index}.masked"] = masked.cpu()
    for index, vectors in adapter.novices.items():
        ids = sorted(vectors)
        tensors[f"layers.{index}.novice_ids"] = torch.tensor(ids, dtype=torch.int64)
        tensors[f"layers.{index}.novice_vectors"] = torch.stack([vectors[e].cpu() for e in ids])
    stored = compact_layers(adapter)
    for index, kept in stored.items():
        tensors[f"layers.{index}.kept"] = kept.to(torch.int64)
    target = Path(path) / SIDECAR
    if not tensors:
        target.unlink(missing_ok=True)
        return
    if needs_sidecar(adapter):
        mark_config(
            path,
            adapter.model.config.model_type,
            {str(i.index): f"{i.name}.{_child_name(i)}" for i in adapter.layers},
            stored={str(index): int(kept.numel()) for index, kept in stored.items()},
            # The shipped code applies novices, never hook masks: with those, MoE Lab alone loads it.
            ship_code=not _hook_masks(adapter),
        )
    metadata = {"format": _SIDECAR_FORMAT, "version": "2", "model_type": adapter.arch}
    save_file({name: t.contiguous() for name, t in tensors.items()}, target, metadata=metadata)


def apply_sidecar(adapter: MoEAdapter, path: Path) -> None:
    """Re-apply the masks and novices recorded next to a checkpoint (nothing if there is none).
    A layer without ``kept`` ids (version 1) stores every expert: a streamed model reads it so."""
    from safetensors import safe_open

    target = Path(path) / SIDECAR
    if not target.is_file():
        return
    with safe_open(target, framework="pt") as sidecar:
        metadata = sidecar.metadata() or {}
        if metadata.get("format") != _SIDECAR_FORMAT or metadata.get("model_type") != adapter.arch:
            raise HFModelError(f"{target.name}: not a MoE Lab expert sidecar for a {adapter.arch} model; remove it.")
        names = set(sidecar.keys())
        for info in adapter.layers:
            prefix = f"layers.{info.index}."
            if prefix + "masked" in names:
                masked = sidecar.get_tensor(prefix + "masked")
                adapter.mask_experts({info.index: (~masked).nonzero().flatten().tolist()})
            if prefix + "novice_ids" in names:
                ids = sidecar.get_tensor(prefix + "novice_ids").tolist()
                vectors = sidecar.get_tensor(prefix + "novice_vectors")
                adapter.replace_with_novices({info.index: dict(zip(ids, vectors))})
                if prefix + "kept" not in names:
                    setattr(info.experts, FULL_LAYOUT, True)
            if prefix + "kept" in names:
                kept = sidecar.get_tensor(prefix + "kept")
                if not torch.equal(kept, _kept_of(stored_experts(info.experts), info.num_experts)):
                    raise HFModelError(
                        f"{target.name}: layer {info.index} stores experts {kept.tolist()}, which are not the "
                        "experts that are not novices; the checkpoint is damaged. Re-save it."
                    )


def _kept_of(kept: Tensor | None, num_experts: int) -> Tensor:
    return torch.arange(num_experts) if kept is None else kept.to(torch.int64)


def stored_layout(path: Path) -> dict[str, tuple[Tensor, int]]:
    """Experts module name → (ids of the experts stored, slot by slot; E) for each layer a compact
    checkpoint stores compact; empty for a checkpoint in the full layout. Read from config.json and
    the sidecar, before any weight, and checked against each other."""
    import json

    from safetensors import safe_open

    raw = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    stored = raw.get(STORED_FIELD) or {}
    if not stored:
        return {}
    modules = raw.get(MODULES_FIELD) or {}
    target = Path(path) / SIDECAR
    if not target.is_file() or set(stored) - set(modules):
        raise HFModelError(
            f"config.json says some layers store only their kept experts, but {SIDECAR} or the experts modules "
            "are missing; the checkpoint is incomplete. Copy the whole folder."
        )
    layout = {}
    with safe_open(target, framework="pt") as sidecar:
        names = set(sidecar.keys())
        for layer, count in stored.items():
            prefix = f"layers.{layer}."
            if prefix + "kept" not in names or prefix + "novice_ids" not in names:
                raise HFModelError(f"{SIDECAR} lacks the stored experts of layer {layer}; re-save the checkpoint.")
            kept = sidecar.get_tensor(prefix + "kept").to(torch.int64)
            novices = sidecar.get_slice(prefix + "novice_ids").get_shape()[0]
            if kept.numel() != int(count):
                raise HFModelError(
                    f"Layer {layer}: config.json says {count} experts are stored, {SIDECAR} lists {kept.numel()}; "
                    "the checkpoint is damaged. Re-save it."
                )
            layout[str(modules[layer])] = (kept, kept.numel() + int(novices))
    return layout


def _child_name(info: object) -> str:
    block = info.block.block  # type: ignore[attr-defined]
    return next(name for name, module in block.named_children() if module is info.experts)  # type: ignore[attr-defined]


#: Files beside the weights that serving needs and ``save_pretrained`` may not rewrite.
COMPANIONS = (
    "generation_config.json",
    "chat_template.jinja",
    "chat_template.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
)


def copy_companions(source: Path, target: Path) -> list[str]:
    """Copy the tokenizer, chat template and generation config of ``source`` that ``target`` lacks."""
    import shutil

    copied = []
    for name in COMPANIONS:
        if (Path(source) / name).is_file() and not (Path(target) / name).exists():
            shutil.copyfile(Path(source) / name, Path(target) / name)
            copied.append(name)
    return copied


_TORCH_DTYPES = {"F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64"}


def store_in_source_dtypes(source: Path, target: Path) -> str | None:
    """Rewrite the checkpoint at ``target`` (saved from a model computed in float32) in the dtypes
    ``source`` stores: each floating tensor as its same-named source tensor, a new one (a sliced
    router keeps its name; GPT-OSS biases gain novices) and the sidecar's novice vectors in the
    source's main dtype; ``config.json`` says so. Returns that dtype's name, or ``None`` when the
    source is float32 and nothing changes.

    float16 checkpoints are computed in float32 (:func:`mlcore.hf.loading.load_dtype`); written
    back as computed they would double in size. Values first stored in float16 come back exactly;
    a job makes its own new values (novice vectors, merged weights) float16-exact before it
    evaluates them (:func:`mlcore.compress.plan.rounded`), so the file holds what was evaluated."""
    import json

    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    from mlcore.hf.inputs import checkpoint_dtype
    from mlcore.uploads import safetensors_header

    main = checkpoint_dtype({file.name: safetensors_header(file) for file in weight_files(source)})
    if main in (None, "F32", "F64"):
        return None
    stored = {tensor.name: tensor.dtype for tensor in stored_tensors(source)}
    for file in [*weight_files(target), Path(target) / SIDECAR]:
        if not file.is_file():
            continue
        with safe_open(file, framework="pt") as shard:
            metadata = shard.metadata()
            tensors = {name: shard.get_tensor(name) for name in shard.keys()}  # noqa: SIM118 - not iterable
        changed = False
        for name, tensor in tensors.items():
            if tensor.dtype != torch.float32:
                continue
            want = getattr(torch, _TORCH_DTYPES.get(stored.get(name, main), "float32"))
            if want != torch.float32:
                tensors[name] = tensor.to(want)
                changed = True
        if changed:
            save_file(tensors, file, metadata=metadata)
    config = Path(target) / "config.json"
    raw = json.loads(config.read_text(encoding="utf-8"))
    for field in ("torch_dtype", "dtype"):
        if field in raw:
            raw[field] = _TORCH_DTYPES[main]
    config.write_text(json.dumps(raw, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return _TORCH_DTYPES[main]
