"""What the worker checks before a library item becomes usable, and the card it writes.

Django-free. Archives are unpacked with :func:`mlcore.jobs.sniff.unpack` (no links, no paths
outside the target, caps on size and compression ratio), then checked as a job's upload is, with
the same sentences (:func:`mlcore.uploads.check_tree`: links and pickles anywhere refused, every
safetensors header sound). Then each kind goes through the loader its jobs use (:data:`CHECKS`): Hugging Face
checkpoints through :func:`mlcore.hf.loading.checked_config` (safetensors only, no remote code,
a supported MoE architecture), segmenters, video DiTs, markers and VAEs through their
``load``/``from_pretrained``, traces through ``RoutingTrace.load``, and so on. Loaders import
torch, so only the worker calls :func:`card_for`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlcore import uploads
from mlcore.jobs import sniff
from mlcore.jobs.runner import scrub_paths
from mlcore.jobs.spec import JobError
from mlcore.uploads import files_of, relative_name, safetensors_parameters

ARCHIVES = ("zip", "tar")
#: Files whose records a text card counts, by sniffed format.
TEXT_FORMATS = ("txt", "csv", "json")
MAX_SOURCES = 20


def unpack_item(blob: Path, target: Path) -> Path:
    """A directory holding the item: an archive unpacked safely, a single file in a folder of its own."""
    fmt = sniff.sniff(blob)
    if fmt in ARCHIVES:
        sniff.unpack(blob, target)
        children = list(target.iterdir())
        # An archive of one folder ("my-model/config.json, ...") is that folder.
        return children[0] if len(children) == 1 and children[0].is_dir() else target
    target.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(blob, target / blob.name)
    return target


def check_tree(root: Path) -> None:
    """Refuse links anywhere in an item (a registered path could point a job at any file on the worker)."""
    uploads.check_links(root)


def tree_sha256(root: Path) -> str:
    """The content address of a directory: sha256 over its files' relative paths and sha256s."""
    digest = hashlib.sha256()
    for path in files_of(root):
        with path.open("rb") as f:
            file_digest = hashlib.file_digest(f, "sha256").hexdigest()
        digest.update(f"{path.relative_to(root).as_posix() if root.is_dir() else path.name}\0{file_digest}\n".encode())
    return digest.hexdigest()


def hf_moe_card(root: Path) -> dict[str, Any]:
    """Architecture, parameter count, layers, experts per layer and top-k of an HF MoE checkpoint."""
    from mlcore.hf.architectures import arch_spec
    from mlcore.hf.loading import checked_config, weight_files

    config = checked_config(root)
    spec = arch_spec(config.model_type)
    return {
        "architecture": spec.title,
        "model_type": config.model_type,
        "parameters": sum(safetensors_parameters(p) for p in weight_files(root)),
        "layers": getattr(config, "num_hidden_layers", None),
        "hidden_size": getattr(config, "hidden_size", None),
        "experts_per_layer": getattr(config, spec.experts_field, None),
        "top_k": getattr(config, "num_experts_per_tok", None),
    }


def hf_lm_card(root: Path) -> dict[str, Any]:
    """A dense Hugging Face causal LM (e.g. a distilled student): the same safety checks as an MoE
    checkpoint (local, safetensors only, no remote code) for any model type transformers ships."""
    from transformers import AutoConfig

    from mlcore.hf.loading import weight_files

    config_file = root / "config.json"
    if not config_file.is_file():
        raise JobError("The item has no config.json: upload the folder save_pretrained wrote.")
    if "auto_map" in json.loads(config_file.read_text(encoding="utf-8")):
        raise JobError("config.json asks for remote code (auto_map), which MoE Lab never runs.")
    if not weight_files(root):
        raise JobError("The item has no safetensors weights; convert the checkpoint to safetensors.")
    config = AutoConfig.from_pretrained(root, trust_remote_code=False, local_files_only=True)
    return {
        "architecture": (getattr(config, "architectures", None) or [config.model_type])[0],
        "model_type": config.model_type,
        "parameters": sum(safetensors_parameters(p) for p in weight_files(root)),
        "layers": getattr(config, "num_hidden_layers", None),
        "hidden_size": getattr(config, "hidden_size", None),
    }


def _one_or_all(values: list[Any]) -> Any:
    distinct = sorted(set(values), key=str)
    return distinct[0] if len(distinct) == 1 else distinct


def torch_model_card(architecture: str, *models: Any) -> dict[str, Any]:
    """Parameters of the loaded modules and, for those built from ``MoELayer``, their MoE layout."""
    from mlcore.moe.layer import moe_layers

    layers = [layer for model in models for layer in moe_layers(model)]
    card: dict[str, Any] = {
        "architecture": architecture,
        "parameters": sum(p.numel() for model in models for p in model.parameters()),
    }
    if layers:
        card["moe_layers"] = len(layers)
        card["experts_per_layer"] = _one_or_all([layer.num_experts for layer in layers])
        card["top_k"] = _one_or_all([getattr(layer.router, "top_k", None) for layer in layers])
    return card


def _pointcloud_segmenter(root: Path) -> dict[str, Any]:
    from mlcore.pointcloud.pipeline import load_segmenter

    model, config = load_segmenter(root)
    return {**torch_model_card("PTv3-lite point-cloud segmenter", model), "classes": len(config["labels"])}


def _video_dit(root: Path) -> dict[str, Any]:
    from mlcore.video.dit import VideoDiT

    if not (root / "config.json").is_file():
        raise JobError("config.json is missing; a video-dit is a folder saved by VideoDiT.save_pretrained.")
    model = VideoDiT.from_pretrained(root)
    config = model.config
    architecture = f"Video DiT ({config.attention} attention, {config.ffn} FFN)"
    return {**torch_model_card(architecture, model), "frames": config.sample_frames, "resolution": config.sample_size}


def _watermark_markers(root: Path) -> dict[str, Any]:
    from mlcore.watermark.pipeline import load_bundle

    bundle = load_bundle(root)
    parts = [bundle.generator.vae, bundle.markers, bundle.extractor]
    parts += [part for part in (bundle.generator.unet, bundle.independent_vae) if part is not None]
    card = torch_model_card("MOLM markers and extractor on a diffusers VAE", *parts)
    return {**card, "bits": bundle.markers.num_bits}


def _diffusers_vae(root: Path) -> dict[str, Any]:
    from mlcore.watermark.generator import load_vae

    return torch_model_card("diffusers AutoencoderKL", load_vae(root))


def _diffusers_generator(root: Path) -> dict[str, Any]:
    from mlcore.watermark.generator import load_generator

    generator = load_generator(root)
    if generator.unet is None:
        return torch_model_card("diffusers AutoencoderKL (no UNet)", generator.vae)
    return torch_model_card("diffusers AutoencoderKL + UNet2DModel", generator.vae, generator.unet)


def _tiny_encoder(root: Path) -> dict[str, Any]:
    from mlcore.lora.base import TinyEncoder

    return torch_model_card("tiny encoder (LoRA base)", TinyEncoder.load(root))


def _moe_task_classifier(root: Path) -> dict[str, Any]:
    from mlcore.routing.model import MoEClassifier

    if not (root / "config.json").is_file() or not (root / "model.safetensors").is_file():
        raise JobError("A moe-task-classifier is a folder with config.json and model.safetensors.")
    return torch_model_card("MoE task classifier", MoEClassifier.load(root))


def _text(root: Path) -> dict[str, Any]:
    """Records are non-empty lines; every file must be text (a binary file is not a corpus)."""
    records = 0
    for path in files_of(root):
        fmt = sniff.sniff(path)
        if fmt not in TEXT_FORMATS:
            found = f"a {fmt} file" if fmt else "binary data"
            name = relative_name(path, root)
            raise JobError(f"{name} is {found}, not text; a text dataset holds .txt, .jsonl or .csv.")
        with path.open("rb") as f:
            records += sum(1 for line in f if line.strip())
    return {"records": records}


def _images(root: Path) -> dict[str, Any]:
    """Every file named like an image must decode as one; records are the images."""
    from PIL import Image

    from mlcore.watermark.verification import IMAGE_SUFFIXES, image_files

    images = image_files([root])
    if not images:
        raise JobError(f"The item holds no images ({', '.join(IMAGE_SUFFIXES)}).")
    for path in images:
        try:
            with Image.open(path) as image:
                image.verify()
        except Exception as exc:  # PIL raises many types (incl. DecompressionBombError) for bad files
            raise JobError(f"{relative_name(path, root)} is not a readable image ({type(exc).__name__}).") from None
    return {"records": len(images)}


def _pointclouds(root: Path) -> dict[str, Any]:
    from mlcore.jobs.pointcloud_segment import CLOUD_SUFFIXES
    from mlcore.pointcloud.io import read_cloud

    # Found by name, as the jobs that take a scene find them.
    clouds = [p for p in files_of(root) if p.suffix.lower() in CLOUD_SUFFIXES]
    if not clouds:
        raise JobError(f"The item holds no point clouds ({', '.join(CLOUD_SUFFIXES)}).")
    points = sum(len(read_cloud(path).xyz) for path in clouds)
    return {"records": len(clouds), "points": points}


def _graphs(root: Path) -> dict[str, Any]:
    from mlcore.data.graphs import read_graphs

    graphset = read_graphs(root)  # what graph jobs read: graphs.json in the item's folder
    return {"records": len(graphset.graphs), "classes": graphset.num_classes}


def _routing_trace(root: Path) -> dict[str, Any]:
    from mlcore.moe.traces import RoutingTrace

    paths = [p for p in files_of(root) if sniff.sniff(p) == "safetensors"]
    if not paths:
        raise JobError("The item holds no routing trace (a moelab-routing-trace safetensors file).")
    traces = [RoutingTrace.load(path) for path in paths]
    meta = traces[0].metadata
    return {
        "records": sum(trace.num_tokens for trace in traces),
        "model": meta.model,
        "layers": len(meta.layers),
        "experts_per_layer": _one_or_all(list(meta.num_experts)),
        "top_k": _one_or_all(list(meta.top_k)),
    }


#: Per kind, the check a worker runs before the item is usable: the loader the kind's jobs use,
#: so an item that is ``ready`` is one those jobs can open. Each returns the kind's card fields.
CHECKS: dict[str, Callable[[Path], dict[str, Any]]] = {
    "hf-moe-lm": hf_moe_card,
    "hf-lm": hf_lm_card,
    "diffusers-vae": _diffusers_vae,
    "diffusers-generator": _diffusers_generator,
    "watermark-markers": _watermark_markers,
    "pointcloud-segmenter": _pointcloud_segmenter,
    "video-dit": _video_dit,
    "tiny-encoder": _tiny_encoder,
    "moe-task-classifier": _moe_task_classifier,
    "text": _text,
    "images": _images,
    "pointclouds": _pointclouds,
    "graphs": _graphs,
    "routing-trace": _routing_trace,
}


def _run_check(kind: str, root: Path) -> dict[str, Any]:
    """The kind's check, with every loader failure turned into one line for the user."""
    try:
        return CHECKS[kind](root)
    except JobError:
        raise
    except (ValueError, OSError, RuntimeError, KeyError, TypeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise JobError(f"It does not load as a {kind} item: {first[:300]}") from None


def card_for(kind: str, category: str, root: Path) -> dict[str, Any]:
    """Validate ``root`` as an item of ``kind`` and describe it; raises ``JobError`` with what to fix."""
    check_tree(root)
    files = files_of(root)
    if not files:
        raise JobError("The item holds no files.")
    # Before any loader runs (some, diffusers' from_pretrained, would fall back to unpickling a .bin):
    # what a job's upload gets too, so both refuse the same content with the same sentence.
    uploads.check_tree(root)
    card: dict[str, Any] = {"files": len(files), "bytes": sum(p.stat().st_size for p in files)}
    try:
        card |= _run_check(kind, root)
    except JobError as exc:
        # The worker's scratch path means nothing to the user; the rest of the message does.
        message = str(exc).replace(f"{root}: ", "").replace(f"{root}/", "").replace(str(root), root.name)
        raise JobError(scrub_paths(message)) from None
    if category == "dataset":
        card["sources"] = [relative_name(p, root) for p in files[:MAX_SOURCES]]
    return card
