"""MOLM — Mixture of LoRA Markers (ICLR 2026): watermarking a generator.

The generator stays frozen; each routed ResNet block of its VAE decoder carries P parallel LoRA
adapters and the owner's binary key, cut into log2(P)-bit symbols, switches exactly one adapter on
per slot (:mod:`mlcore.watermark.markers`). An extractor network reads the key back from an image
(:mod:`mlcore.watermark.extractor`). Training draws a fresh random key every step, so any new key
works without retraining (:mod:`mlcore.watermark.train`). Attacks, image-quality metrics and the
empirical threshold calibration live beside them (:mod:`~mlcore.watermark.attacks`,
:mod:`~mlcore.watermark.quality`, :mod:`~mlcore.watermark.calibration`); the generator itself (a small
``AutoencoderKL`` + latent ``UNet2DModel``, or a real diffusers directory) in
:mod:`~mlcore.watermark.generator`. Key registry statistics: :mod:`~mlcore.watermark.stats`,
:mod:`~mlcore.watermark.keys`.
"""
