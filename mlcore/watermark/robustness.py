"""The attack suite run end to end: generate, calibrate τ on clean images, attack, score, compare.

Shared by the ``watermark-robustness`` job and ``make bench-watermark``. Steps:

1. Draw ``keys`` random keys (the registry's keys in use) and sample latents from the latent model
   (or, for a VAE-only generator, encode held-out photo crops — recorded as ``latent_source``).
2. Decode each latent twice: frozen (clean) and watermarked under key i mod K. PSNR/SSIM compare
   the two (fidelity of the marked generator against the unwatermarked one on the same latent).
3. Calibrate τ at 1 % and 0.1 % FPR on the clean images scored against every key
   (:mod:`mlcore.watermark.calibration`), keeping the analytic binomial τ beside it.
4. For every attack: bit accuracy against the image's own key and TPR at both τ, with 95 % intervals.
5. Averaging removal and forgery for several N; a black-box query attack on the score.
6. The same distortions against invisible-watermark's DWT-DCT (calibrated its own way).

The suite runs wherever the bundle's models are (:meth:`~mlcore.watermark.pipeline.Bundle.to`):
generation, extraction and the regeneration attacks on that device, everything on uint8 images
(the other attacks, calibration, DWT-DCT) on the CPU, as before.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from mlcore.watermark import attacks as A
from mlcore.watermark.calibration import Threshold, binomial_threshold, calibrate, matched_bits, rate_at
from mlcore.watermark.generator import Generator, from_uint8
from mlcore.watermark.pipeline import Bundle, decode_under_keys, read_bits
from mlcore.watermark.quality import psnr, ssim

FPRS = (0.01, 0.001)
Progress = Callable[[float, str], None]


@dataclass(frozen=True)
class SuiteConfig:
    watermarked: int = 64  # watermarked images per attack
    clean: int = 2000  # unwatermarked generated images for calibrating τ
    keys: int = 8
    attacks: tuple[str, ...] = ()  # names from attack_catalogue(); empty = all
    sample_steps: int = 10
    averaging: tuple[int, ...] = (10, 100)
    query_images: int = 16
    query_budget: int = 200
    baseline: bool = True
    baseline_clean: int = 500
    seed: int = 0


@dataclass
class SuiteResult:
    rows: list[dict[str, Any]] = field(default_factory=list)
    thresholds: dict[str, dict[str, Any]] = field(default_factory=dict)
    fidelity: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    examples: dict[str, np.ndarray] = field(default_factory=dict)


class _InputsTo:
    """``target`` with the tensor arguments of ``methods`` moved to ``device`` first; all else passes through.

    The regeneration attacks build their tensors on the CPU from uint8 pixels (and the diffusion one
    its noise from a numpy generator); seen through this, the models they call may live on a GPU.
    """

    def __init__(self, target: Any, device: torch.device, methods: tuple[str, ...]) -> None:
        self._target, self._device, self._methods = target, device, methods

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if name not in self._methods:
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            return attr(*map(self._moved, args), **{k: self._moved(v) for k, v in kwargs.items()})

        return call

    def _moved(self, value: Any) -> Any:
        return value.to(self._device) if isinstance(value, torch.Tensor) else value


def attack_catalogue(bundle: Bundle) -> list[A.Attack]:
    """Every image attack available for this bundle (regenerations need their models)."""
    generator, own, independent = bundle.generator, bundle.generator.vae, bundle.independent_vae
    device = generator.device
    if device.type != "cpu":
        own = _InputsTo(own, device, ("encode", "decode"))
        if independent is not None:
            independent = _InputsTo(independent, device, ("encode", "decode"))
        if generator.unet is not None:
            # Generator.encode/decode move their inputs already; the scheduler must add CPU noise to device latents.
            scheduler = _InputsTo(generator.scheduler, device, ("add_noise",))
            generator = Generator(vae=generator.vae, unet=generator.unet, scheduler=scheduler)
    catalogue = A.distortions()
    catalogue.append(A.regeneration(own, name="regen-own-vae", label="Regeneration through the generator's VAE"))
    if independent is not None:
        catalogue.append(
            A.regeneration(
                independent,
                name="regen-independent-ae",
                label="Regeneration through an independently trained AE",
            )
        )
    if generator.unet is not None:
        catalogue.append(A.diffusion_regeneration(generator))
    return catalogue


def _mean_ci(values: np.ndarray) -> tuple[float, float, float]:
    mean = float(values.mean())
    half = 1.96 * float(values.std(ddof=1)) / math.sqrt(len(values)) if len(values) > 1 else float("nan")
    return mean, mean - half, mean + half


def _score_row(
    method: str, attack: A.Attack, probs: np.ndarray, keys: np.ndarray, taus: dict[str, Threshold]
) -> dict[str, Any]:
    per_image = matched_bits(probs, keys) / keys.shape[1]
    mean, lo, hi = _mean_ci(per_image)
    row: dict[str, Any] = {
        "method": method,
        "attack": attack.name,
        "label": attack.label,
        "family": attack.family,
        "n": len(probs),
        "bit_accuracy": mean,
        "bit_accuracy_ci": [lo, hi],
    }
    scores = matched_bits(probs, keys)
    for name, threshold in taus.items():
        rate = rate_at(scores, threshold.tau)
        row[f"tpr_{name}"] = rate.value
        row[f"tpr_{name}_ci"] = list(rate.ci)
    return row


def _latents(bundle: Bundle, n: int, *, seed: int, steps: int) -> tuple[torch.Tensor, str]:
    gen = bundle.generator
    if gen.unet is not None:
        return gen.sample_latents(n, seed=seed, steps=steps), f"sampled by the latent UNet ({steps} DDIM steps)"
    from mlcore.data.images import image_crops

    pixels = from_uint8(image_crops(n, gen.image_size, seed=seed, split="test"))
    with torch.no_grad():
        z = torch.cat([gen.encode(pixels[i : i + 256]) for i in range(0, n, 256)])
    return z, "encoded held-out photo crops (the generator has no latent model)"


def _null_scores(probs: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Every (clean image, key) pair's matched-bit count: the null distribution for τ."""
    bits = probs > 0.5
    return np.concatenate([(bits == (k > 0.5)).sum(1) for k in keys])


def run_suite(
    bundle: Bundle,
    config: SuiteConfig,
    *,
    progress: Progress | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> SuiteResult:
    progress = progress or (lambda fraction, stage: None)
    started = time.perf_counter()
    rng = np.random.default_rng(config.seed)
    m = bundle.num_bits
    keys = rng.integers(0, 2, (config.keys, m)).astype(np.float32)
    result = SuiteResult()
    catalogue = {a.name: a for a in attack_catalogue(bundle)}
    chosen = [catalogue[n] for n in config.attacks if n in catalogue] if config.attacks else list(catalogue.values())
    if "none" not in {a.name for a in chosen}:
        chosen.insert(0, catalogue["none"])

    progress(0.02, f"sampling {config.clean + config.watermarked} latents")
    n_avg = max(config.averaging, default=0)
    latents, source = _latents(
        bundle, config.clean + config.watermarked + n_avg, seed=config.seed, steps=config.sample_steps
    )
    z_clean, z_wm = latents[: config.clean], latents[config.clean : config.clean + config.watermarked]
    z_avg = latents[config.clean + config.watermarked :]
    progress(0.2, "decoding clean and watermarked images")
    clean = decode_under_keys(bundle, z_clean, None)
    wm_keys = keys[np.arange(config.watermarked) % config.keys]
    marked = decode_under_keys(bundle, z_wm, torch.from_numpy(wm_keys))
    same_latent_clean = decode_under_keys(bundle, z_wm, None)
    x, y = from_uint8(marked), from_uint8(same_latent_clean)
    result.fidelity = {
        "psnr": float(psnr(x, y)),
        "ssim": float(ssim(x, y)),
        "psnr_min": float(psnr(x, y, reduce=False).min()),
    }
    result.examples = {"watermarked": marked[:8], "clean": same_latent_clean[:8]}

    progress(0.3, f"calibrating τ on {config.clean} clean images × {config.keys} keys")
    clean_probs = read_bits(bundle.extractor, clean)
    null = _null_scores(clean_probs, keys)
    taus = {f"{f:g}": calibrate(null, f, m) for f in FPRS}
    per_key_fpr = {
        name: max(float((matched_bits(clean_probs, k) >= t.tau).mean()) for k in keys) for name, t in taus.items()
    }
    result.thresholds = {
        name: {**asdict(t), "binomial_tau": binomial_threshold(m, t.fpr_target), "worst_key_fpr": per_key_fpr[name]}
        for name, t in taus.items()
    }
    # An honest FPR: τ calibrated on the first half of the clean images, measured on the unseen second half.
    half = config.clean // 2
    null_a, null_b = _null_scores(clean_probs[:half], keys), _null_scores(clean_probs[half:], keys)
    for name, t in taus.items():
        tau_a = calibrate(null_a, t.fpr_target, m).tau
        held = rate_at(null_b, tau_a)
        result.thresholds[name].update(
            heldout_tau=tau_a, heldout_fpr=held.value, heldout_fpr_ci=list(held.ci), heldout_negatives=held.n
        )
    result.info = {
        "num_bits": m,
        "keys": config.keys,
        "clean_images": config.clean,
        "watermarked_per_attack": config.watermarked,
        "null_pairs": len(null),
        "latent_source": source,
        "clean_bit_mean": float((clean_probs > 0.5).mean()),
    }

    for i, attack in enumerate(chosen):
        if cancelled is not None and cancelled():
            break
        progress(0.35 + 0.35 * i / len(chosen), f"attack {attack.label}")
        attacked = attack.apply(marked, np.random.default_rng(config.seed + i))
        result.rows.append(_score_row("MOLM", attack, read_bits(bundle.extractor, attacked), wm_keys, taus))
        if i < 4:
            result.examples[attack.name] = attacked[:8]

    progress(0.72, "averaging, forgery and query attacks")
    _pattern_attacks(bundle, config, keys, z_avg, clean, marked, wm_keys, taus, result)
    _query(bundle, config, marked, wm_keys, taus, result)
    if config.baseline:
        progress(0.8, "invisible-watermark DWT-DCT on the same attacks")
        _baseline(
            config,
            keys,
            clean,
            same_latent_clean,
            wm_keys,
            [a for a in chosen if a.family != "regeneration"] + [a for a in chosen if a.family == "regeneration"],
            result,
            cancelled,
        )
    result.info["seconds"] = round(time.perf_counter() - started, 1)
    progress(1.0, "done")
    return result


def _pattern_attacks(
    bundle: Bundle,
    config: SuiteConfig,
    keys: np.ndarray,
    z_avg: torch.Tensor,
    clean: np.ndarray,
    marked: np.ndarray,
    wm_keys: np.ndarray,
    taus: dict[str, Threshold],
    result: SuiteResult,
) -> None:
    """Averaging: pattern = mean(N images under key 0) − mean(N clean); subtract it / stamp it on clean images."""
    if not config.averaging or len(z_avg) == 0:
        return
    key0 = keys[0]
    pool = decode_under_keys(bundle, z_avg, torch.from_numpy(key0))
    targets = marked[(wm_keys == key0).all(1)]
    for n in config.averaging:
        pattern = A.averaging_pattern(pool[:n], clean[-n:])
        removal = A.Attack(
            f"average-remove-{n}", "averaging", f"Subtract the mean pattern of {n} marked images", lambda p, r: p
        )
        if len(targets):
            probs = read_bits(bundle.extractor, A.remove_pattern(targets, pattern))
            result.rows.append(_score_row("MOLM", removal, probs, np.broadcast_to(key0, probs.shape), taus))
        victims = clean[: config.watermarked]
        forged = A.forge(victims, pattern)
        probs = read_bits(bundle.extractor, forged)
        forgery = A.Attack(
            f"forge-{n}", "forgery", f"Stamp the mean pattern of {n} marked images on clean images", lambda p, r: p
        )
        row = _score_row("MOLM", forgery, probs, np.broadcast_to(key0, probs.shape), taus)
        row["note"] = "TPR here is the forgery success rate (lower is better)"
        result.rows.append(row)


def _query(
    bundle: Bundle,
    config: SuiteConfig,
    marked: np.ndarray,
    wm_keys: np.ndarray,
    taus: dict[str, Threshold],
    result: SuiteResult,
) -> None:
    if config.query_images <= 0 or config.query_budget < 20:
        return
    n = min(config.query_images, len(marked))
    keys = wm_keys[:n]

    def score(pixels: np.ndarray) -> np.ndarray:
        p = read_bits(bundle.extractor, pixels)
        return (keys * p + (1 - keys) * (1 - p)).mean(1)  # the verifier's soft agreement with the key

    attacked, used = A.query_attack(score, marked[:n], queries=config.query_budget, seed=config.seed)
    attack = A.Attack(
        "query-nes", "adversarial", f"Black-box NES on the score, {used} queries, L∞ ≤ 8/255", lambda p, r: p
    )
    row = _score_row("MOLM", attack, read_bits(bundle.extractor, attacked), keys, taus)
    row["psnr_after_attack"] = float(psnr(from_uint8(attacked), from_uint8(marked[:n])))
    result.rows.append(row)


def _baseline(
    config: SuiteConfig,
    keys: np.ndarray,
    clean: np.ndarray,
    content: np.ndarray,
    wm_keys: np.ndarray,
    chosen: list[A.Attack],
    result: SuiteResult,
    cancelled: Callable[[], bool] | None,
) -> None:
    from mlcore.watermark.baseline import dwtdct_decode, dwtdct_embed, upscale

    m = keys.shape[1]
    n_clean = min(config.baseline_clean, len(clean))
    clean_big = upscale(clean[:n_clean])
    null = _null_scores(dwtdct_decode(clean_big, m), keys)
    taus = {f"{f:g}": calibrate(null, f, m) for f in FPRS}
    result.thresholds.update({f"dwtdct_{k}": asdict(t) for k, t in taus.items()})
    marked = dwtdct_embed(content, wm_keys)
    base = upscale(content)
    result.fidelity["dwtdct_psnr_at_256"] = float(psnr(from_uint8(marked), from_uint8(base)))
    for i, attack in enumerate(chosen):
        if cancelled is not None and cancelled():
            break
        attacked = attack.apply(marked, np.random.default_rng(config.seed + i))
        result.rows.append(_score_row("DWT-DCT", attack, dwtdct_decode(attacked, m), wm_keys, taus))
