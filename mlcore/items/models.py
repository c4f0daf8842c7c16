"""The model kinds: each one's declaration and its check, the loader that kind's jobs use.

Hugging Face checkpoints go through :func:`mlcore.hf.loading.checked_config` (safetensors only, no
remote code, a supported MoE architecture); segmenters, video DiTs, markers and VAEs through their
``load`` / ``from_pretrained``. Loaders import torch, so each check imports its own when it runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlcore.errors import JobError
from mlcore.items.cards import torch_model_card
from mlcore.items.kind import ItemKind
from mlcore.uploads import safetensors_parameters

#: A model is a folder, uploaded as an archive of it.
FOLDER = ("zip", "tar")


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
    from mlcore.lora_moe.base import TinyEncoder

    return torch_model_card("tiny encoder (LoRA base)", TinyEncoder.load(root))


def _moe_task_classifier(root: Path) -> dict[str, Any]:
    from mlcore.roma.model import MoEClassifier

    if not (root / "config.json").is_file() or not (root / "model.safetensors").is_file():
        raise JobError("A moe-task-classifier is a folder with config.json and model.safetensors.")
    return torch_model_card("MoE task classifier", MoEClassifier.load(root))


HF_MOE_LM = ItemKind(
    name="hf-moe-lm",
    category="model",
    title="Hugging Face MoE causal LM",
    summary="A save_pretrained folder of a supported MoE architecture, safetensors weights, no remote code.",
    formats=FOLDER,
    check=hf_moe_card,
)
HF_LM = ItemKind(
    name="hf-lm",
    category="model",
    title="Hugging Face causal LM",
    summary="A dense causal LM (e.g. a distilled student) that transformers ships, safetensors weights.",
    formats=FOLDER,
    check=hf_lm_card,
)
DIFFUSERS_VAE = ItemKind(
    name="diffusers-vae",
    category="model",
    title="diffusers VAE",
    summary="An AutoencoderKL folder, the latent space MOLM markers are trained on.",
    formats=FOLDER,
    check=_diffusers_vae,
)
DIFFUSERS_GENERATOR = ItemKind(
    name="diffusers-generator",
    category="model",
    title="diffusers generator",
    summary="An AutoencoderKL with an optional UNet2DModel and scheduler: the images a watermark marks.",
    formats=FOLDER,
    check=_diffusers_generator,
)
WATERMARK_MARKERS = ItemKind(
    name="watermark-markers",
    category="model",
    title="MOLM watermark markers",
    summary="A generator with trained markers and extractor (what watermark-train registers).",
    formats=FOLDER,
    check=_watermark_markers,
)
POINTCLOUD_SEGMENTER = ItemKind(
    name="pointcloud-segmenter",
    category="model",
    title="Point-cloud segmenter",
    summary="A PTv3-lite or Point-MoE segmenter folder (what pointcloud-train registers).",
    formats=FOLDER,
    check=_pointcloud_segmenter,
)
VIDEO_DIT = ItemKind(
    name="video-dit",
    category="model",
    title="Video DiT",
    summary="A folder saved by VideoDiT.save_pretrained (what video-train registers).",
    formats=FOLDER,
    check=_video_dit,
)
TINY_ENCODER = ItemKind(
    name="tiny-encoder",
    category="model",
    title="Tiny encoder",
    summary="The small encoder LD-MoLE fine-tunes with LoRA experts.",
    formats=FOLDER,
    check=_tiny_encoder,
)
MOE_TASK_CLASSIFIER = ItemKind(
    name="moe-task-classifier",
    category="model",
    title="MoE task classifier",
    summary="A folder with config.json and model.safetensors (what router-align registers).",
    formats=FOLDER,
    check=_moe_task_classifier,
)
#: Built in only (the zoo's video judge that grades generated clips): no job takes one as input.
VIDEO_CLASSIFIER = ItemKind(
    name="video-classifier",
    category="model",
    title="Video clip classifier",
    summary="The zoo's judge of generated clips; built in, not kept in team libraries.",
    formats=(),
)
