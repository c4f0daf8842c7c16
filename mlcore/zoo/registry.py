"""The zoo's models, by name. Later issues add their trained models here."""

from __future__ import annotations

from mlcore.catalog import BuiltinItem

MODELS: tuple[BuiltinItem, ...] = (
    BuiltinItem(
        name="moe-lm-tiny",
        kind="hf-moe-lm",
        title="Tiny Qwen3-MoE language model",
        description=(
            "Qwen3MoeForCausalLM, d=128, 4 layers, 16 experts top-2, expert FFN 256, context 128, byte-level BPE "
            "(2048); trained on Shakespeare, Python docs and Python source (python -m mlcore.zoo train moe-lm-tiny)."
        ),
        builder="mlcore.zoo.committed:build_moe_lm_tiny",
        card={"architecture": "qwen3_moe", "experts": 16, "top_k": 2, "recipe": "moe-lm-tiny"},
        stamp="mlcore/zoo/checkpoints/moe-lm-tiny/manifest.json",
    ),
    BuiltinItem(
        name="moe-lm-olmoe",
        kind="hf-moe-lm",
        title="Tiny OLMoE language model",
        description=(
            "OlmoeForCausalLM, d=96, 4 layers, 32 experts top-4, expert FFN 128, context 128, byte-level BPE "
            "(2048); same corpora (python -m mlcore.zoo train moe-lm-olmoe)."
        ),
        builder="mlcore.zoo.committed:build_moe_lm_olmoe",
        card={"architecture": "olmoe", "experts": 32, "top_k": 4, "recipe": "moe-lm-olmoe"},
        stamp="mlcore/zoo/checkpoints/moe-lm-olmoe/manifest.json",
    ),
    BuiltinItem(
        name="lora-base-tiny",
        kind="tiny-encoder",
        title="Tiny encoder for LoRA-expert fine-tuning",
        description=(
            "Pre-LN Transformer encoder, d=64, 2 layers, 4 heads, FFN 128, pre-trained on copy, reverse, prefix sum "
            "and sort of 8 digits; the frozen base of lora-moe-finetune (python -m mlcore.zoo train lora-base-tiny)."
        ),
        builder="mlcore.zoo.lora_base:build_lora_base_tiny",
        card={"architecture": "lora-tiny-encoder", "recipe": "lora-base-tiny"},
        stamp="mlcore/zoo/checkpoints/lora-base-tiny/manifest.json",
    ),
    BuiltinItem(
        name="molm-tiny",
        kind="watermark-markers",
        title="Tiny latent-diffusion generator with MOLM markers (48-bit keys)",
        description=(
            "AutoencoderKL (32×32 ↔ 4×8×8) + latent UNet2DModel (DDIM) trained on offline photo crops, MOLM "
            "markers (P=8 LoRA adapters on each of the decoder's 16 ResNet convolutions, 48 bits) and the extractor "
            "(python -m mlcore.zoo.molm train)."
        ),
        builder="mlcore.zoo.molm:build_molm_tiny",
        card={"num_bits": 48, "P": 8, "image_size": 32, "recipe": "molm-tiny"},
        stamp="mlcore/zoo/checkpoints/molm/manifest.json",
    ),
    BuiltinItem(
        name="molm-photo",
        kind="watermark-markers",
        title="MOLM markers for photos (48-bit keys, secret phase)",
        description=(
            "molm-tiny's generator with MOLM markers (its LoRA adapters without the bias shift) and an extractor "
            "trained together on residual-marked photos; each mark is laid at a secret phase of the tile grid, so "
            "averaging marked images forges nothing (python -m mlcore.zoo train molm-photo)."
        ),
        builder="mlcore.zoo.molm_photo:build_molm_photo",
        card={"num_bits": 48, "P": 8, "image_size": 32, "recipe": "molm-photo"},
        stamp="mlcore/zoo/checkpoints/molm-photo/manifest.json",
    ),
    BuiltinItem(
        name="molm-photo-tiles",
        kind="watermark-markers",
        title="MOLM markers for photos (48-bit keys, per-tile keys from the content)",
        description=(
            "molm-photo's markers and extractor, unchanged, marking every tile of a fixed grid with the key "
            "flipped by the tile's own content and reading it back by undoing those flips (spread spectrum): "
            "reads better than the secret phase, and averaging marked photos forges it rarely, except a forger who "
            "pastes their mean, content and all (bench/results/watermark-forgery.md; molm-photo-parity resists him)."
        ),
        builder="mlcore.zoo.molm_photo:build_molm_photo_tiles",
        card={"num_bits": 48, "P": 8, "image_size": 32, "recipe": "molm-photo"},
        stamp="mlcore/zoo/checkpoints/molm-photo/manifest.json",
        # The seed the builder writes (mlcore.zoo.molm_photo.TILE_KEY_SEED): a new seed rebuilds the item.
        salt="tile keys 20261206",
    ),
    BuiltinItem(
        name="molm-photo-parity",
        kind="watermark-markers",
        title="MOLM markers for photos (48-bit keys, per-tile keys from folded projections)",
        description=(
            "molm-photo-tiles with each tile's flips taken from folded projections of its content, so a forger "
            "who pastes the mean of marked photos onto another no longer steers the reader's flips "
            "(bench/results/watermark-forgery.md); watermark-embed's default."
        ),
        builder="mlcore.zoo.molm_photo:build_molm_photo_parity",
        card={"num_bits": 48, "P": 8, "image_size": 32, "recipe": "molm-photo"},
        stamp="mlcore/zoo/checkpoints/molm-photo/manifest.json",
        # The scheme the builder writes (mlcore.zoo.molm_photo.PARITY_TILE_KEYS): a new one rebuilds the item.
        salt='tile keys {"seed": 20261207, "period": 0.5}',
    ),
    BuiltinItem(
        name="pointmoe-synmix",
        kind="pointcloud-segmenter",
        title="Point-MoE PTv3-lite segmenter (SynMix rooms and streets)",
        description=(
            "PTv3-lite (channels 32-64-96, patch attention, grid pooling), W_o in every block → 4 gated-ReLU experts, "
            "top-2; trained jointly on SynMix A-D with mixed batches "
            "(python -m mlcore.zoo train pointmoe-synmix)."
        ),
        builder="mlcore.zoo.pointcloud:build_pointmoe_synmix",
        card={"architecture": "ptv3-lite", "placement": "proj", "experts": 4, "top_k": 2, "recipe": "pointmoe-synmix"},
        stamp="mlcore/zoo/checkpoints/pointmoe-synmix/manifest.json",
    ),
    BuiltinItem(
        name="ptv3-synmix-dense",
        kind="pointcloud-segmenter",
        title="Dense PTv3-lite segmenter (the Point-MoE model's twin)",
        description=(
            "The same PTv3-lite with W_o as one gated MLP of width 2C (equal active compute), same data and schedule "
            "(python -m mlcore.zoo train ptv3-synmix-dense)."
        ),
        builder="mlcore.zoo.pointcloud:build_ptv3_synmix_dense",
        card={"architecture": "ptv3-lite", "placement": "dense", "recipe": "ptv3-synmix-dense"},
        stamp="mlcore/zoo/checkpoints/ptv3-synmix-dense/manifest.json",
    ),
    BuiltinItem(
        name="video-dit-digits",
        kind="video-dit",
        title="Bouncing-digits video DiT (MoGA-ready)",
        description=(
            "Class-conditional pixel DiT (VideoDiT): 8 frames of 16×16, patch (1, 4, 4) → 128 tokens, d=64, 4 blocks, "
            "dense FFN; conditioned on digit × direction with a CFG null class; trained with full, MoGA + local and "
            "local attention cycled (python -m mlcore.zoo train video-dit-digits)."
        ),
        builder="mlcore.zoo.video:build_video_dit_digits",
        card={"architecture": "video-dit", "frames": 8, "resolution": 16, "recipe": "video-dit-digits"},
        stamp="mlcore/zoo/checkpoints/video-dit-digits/manifest.json",
    ),
    BuiltinItem(
        name="video-judge",
        kind="video-classifier",
        title="Bouncing-digits judge (digit and direction)",
        description=(
            "A small 3-D CNN that names the digit and motion direction of an 8×16×16 clip; grades generated clips and "
            "gives the features of the Fréchet classifier distance (python -m mlcore.zoo train video-judge)."
        ),
        builder="mlcore.zoo.video:build_video_judge",
        card={"architecture": "clip-classifier", "recipe": "video-judge"},
        stamp="mlcore/zoo/checkpoints/video-judge/manifest.json",
    ),
)


def zoo_model(name: str) -> BuiltinItem:
    """The zoo model called ``name`` (a ``KeyError`` names the ones there are)."""
    for item in MODELS:
        if item.name == name:
            return item
    raise KeyError(f"no zoo model named {name!r}; there are {', '.join(item.name for item in MODELS)}")
