"""Attribute augmentation: train a segmenter that does not depend on the attributes a scan happens
to carry, or on how its sensor and exporter scaled them.

Why. The model sees colour, intensity and height per point (:func:`~mlcore.pointcloud.datasets.
point_features`). A SynMix model trained on colour rooms and intensity streets learns to lean on
the attribute it always had: geometry alone, it collapses (dataset A: mIoU 0.26 vs 0.73 with
colour). Real scans disagree with training in exactly these channels: a LiDAR without a camera, a
depth camera with another white balance, a LAS whose 12-bit intensity was read at 16 bits, a PLY
whose raw counts were percentile-scaled, an exporter that fills missing colour with white. The
transforms below put those differences into training, one crop at a time, so the network has to
read the attributes for what they add to the geometry, not as a fingerprint of the sensor.

How a missing attribute looks. ``point_features`` encodes a missing colour as r = g = b = 0 and a
missing intensity as 0 — the same channels, no flag. Dropping an attribute here writes exactly
those zeros, so a crop whose colour was dropped is indistinguishable from a scan read without
colour at inference. No "present" indicator channel is added: the all-zero channel already says
"absent" over any crop the attention sees (a real colour or intensity is not zero on every point
of a patch), and leaving the five features alone keeps every saved segmenter loadable and its
numbers identical. (Presence is read the same way here: a channel that is zero on every point of
the crop is absent.)

The transforms, each applied to a crop with its own probability (:class:`AttributeAugment`):

- **Attribute dropout** (colour, intensity, or both, independently): the crop is trained as if the
  scan had not carried them, in the inference encoding (zeros). Teaches the geometry-only path. The
  rate is the one real trade-off here (:data:`PRESETS`): every dropped crop teaches geometry, and
  none teaches a class that only the attribute separates — measured, even 10% of them stop the
  model from learning such a class at all.
- **Intensity as another sensor reports it** (only when intensity is kept):
  *gain* — a log-uniform factor, clipped to [0, 1] (another laser power, receiver gain, or a 12-bit
  intensity read as 16-bit: ×1/16); *gamma* — i^γ (sensors that compress the dynamic range);
  *scan-level re-scaling* — (i − lo) / (hi − lo), clipped, with lo and hi drawn for the whole crop:
  what the reader's 1st–99th percentile scaling of a PLY / PCD of unknown range does to a scan (an
  affine map set by the whole scan; computing the percentiles on the crop instead would stretch a
  crop of plain asphalt until its noise looks like paint); *range fall-off* — a factor exp(−a·d)
  across the crop, d the distance from a random point in crop units, a of either sign (stronger
  fall-off than the training sensor's exp(−t/80 m), or a sensor that compensates range); *8-bit
  quantisation*; *noise*.
- **Colour as another camera reports it** (only when colour is kept): *white balance* (per-channel
  gains: a colour cast), *brightness*, *gamma*, *greyscale* (a mono camera, or intensity-as-grey
  exports), *pixel noise*; clipped and quantised to 8 bits as a file stores them.
- **Attributes the scan never carried** (only when the crop truly lacks them, never to replace a
  dropped one, so real indoor colour is never taught to be noise): a constant fill (exporters that
  write white or mid-grey for missing colour, a constant intensity), a value derived from the other
  attribute (LiDAR exports with intensity as grey colour; intensity as the colour's luminance), or a
  smooth random field (colour projected from a camera that does not match the geometry). The model
  learns that an attribute it has only ever seen as noise on this kind of geometry adds nothing
  there — so adding one at inference does not derail it.

Nothing here draws a random number unless augmentation is on, so a run with it off draws the same
crops, in the same order, as before this module existed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from mlcore.pointcloud.datasets import FEATURES

COLOUR = slice(FEATURES.index("r"), FEATURES.index("b") + 1)
INTENSITY = FEATURES.index("intensity")
ATTRIBUTES: tuple[str, ...] = ("colour", "intensity")
#: Rec. 601 luma weights: a camera's greyscale.
LUMA = np.array([0.299, 0.587, 0.114], np.float32)


@dataclass(frozen=True)
class AttributeAugment:
    """Per-crop probabilities and ranges of the transforms in the module docstring."""

    drop_colour: float = 0.7  #: P(colour removed | the crop has colour)
    drop_intensity: float = 0.7  #: P(intensity removed | the crop has intensity)
    #: What one dropout draw decides for: each "crop" on its own, or a whole "batch" at once (every
    #: crop of the step keeps or loses the attribute together; see :data:`PRESETS` for why).
    dropout_unit: str = "crop"
    add_colour: float = 0.3  #: P(a colour is synthesised | the crop never had one)
    add_intensity: float = 0.3  #: P(an intensity is synthesised | the crop never had one)
    #: Intensity: P(gain), the gain range (log-uniform), P(gamma), P(scan-level re-scaling),
    #: P(fall-off), P(8-bit), P(noise).
    intensity_gain: float = 0.5
    gain_range: tuple[float, float] = (1 / 16, 4.0)
    intensity_gamma: float = 0.3
    intensity_affine: float = 0.15
    intensity_falloff: float = 0.3
    intensity_quantise: float = 0.15
    intensity_noise: float = 0.3
    #: Colour: P(white balance), its per-channel gain range, P(brightness), its range, P(gamma),
    #: P(greyscale), P(noise).
    colour_cast: float = 0.5
    cast_range: tuple[float, float] = (0.7, 1.4)
    colour_brightness: float = 0.5
    brightness_range: tuple[float, float] = (0.5, 1.6)
    colour_gamma: float = 0.3
    colour_greyscale: float = 0.1
    colour_noise: float = 0.3
    gamma_range: tuple[float, float] = (0.5, 2.0)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: ``TrainConfig.attribute_augment`` names → the augmentation they stand for (None: off).
#:
#: "robust" (SynMix / the zoo: one model for any scanner) drops each attribute from 70% of the crops
#: that carry it (at 50% the joint SynMix model still collapsed on rooms without colour) and re-maps
#: the rest widely. "balanced" (a user's scans, :data:`mlcore.pointcloud.user_train.
#: USER_ATTRIBUTE_AUGMENT`) drops nothing and re-maps less often and less far: a user's classes may
#: differ only by an attribute, and dropout stops the model from learning them at all. Measured on
#: bench/pointcloud_attributes.py's cases after 150 steps, seed 0 (IoU of the attribute-only class):
#: painted doors 0.92 without augmentation, 0.94 "balanced", 0.04 with 10% dropout added, 0.00 with
#: 30% (0.003 after 450 steps); painted road markings 0.89 without, 0.66 with 30% dropout, 0.21 with
#: 70%. So "balanced" makes a model robust to how its attributes are scaled, not to their absence:
#: ``pointcloud-segment`` should give it what its training scans held (and warns when a file lacks it).
#: Why dropout blinds. Earlier probes on painted doors (30% colour dropout, 150 steps, seed 0; door IoU
#: with colour) ruled out the contradictory labels (colourless crops' doors supervised as wall: 0.00),
#: "absent" being encoded as black next to the dark paints (colours inverted: 0.05), and — one probe
#: each — the BatchNorm statistics of the robust preset's model (re-estimated on colour crops: 0.00).
#: Dropping from whole batches ("robust-batch", the study's ablation row; 5 seeds) instead of single
#: crops left doors at 0.00, raised road markings from 0.32 ± 0.14 to 0.50 ± 0.22 and cost the rooms
#: their geometry-only path (0.38 ± 0.14 against 0.66 ± 0.01 per crop). What the later probes found
#: ("balanced" re-maps, 150 steps, door IoU with colour as trained → with every BatchNorm's statistics
#: re-estimated on colour crops): with 30% dropout *per batch*, 0.37 → 0.84, 0.38 → 0.59 and 0.23 →
#: 0.82 (seeds 0 / 1 / 2); per crop, 0.00 → 0.00, and 0.01 → 0.60 when the colourless crops are left
#: out of the loss (so per crop two things blind: the colourless crops' labels, and the batch
#: statistics that mix them into every colour crop's normalisation); at 70% per batch, 0.00 → 0.13 and
#: 0.00 → 0.00 (too few colour steps in 150). So with dropout per batch the model *has* learnt the
#: doors; the running statistics, an average over batches with and without colour, hide them.
#: :mod:`mlcore.pointcloud.presence` keeps a set of statistics per attribute presence for that reason.
#: The study's rows (5 seeds; held-out mIoU with the attribute / geometry only; IoU of the
#: attribute-only class): "robust-batch" with the sets, markings 0.795 / 0.615 / 0.48 (0.792 / 0.614
#: / 0.50 without them), doors 0.753 / 0.647 / 0.25 (0.513 / 0.376 / 0.00 without); "batch-30" with
#: the sets, markings 0.860 / 0.613 / 0.65, doors 0.825 / 0.651 / 0.40 ± 0.39 — the geometry-only
#: path of "robust" (0.612, 0.655) and part of the attribute-only classes ("balanced": 0.73, 0.90).
PRESETS: dict[str, AttributeAugment | None] = {
    "off": None,
    "robust": AttributeAugment(),
    "balanced": AttributeAugment(
        drop_colour=0.0,
        drop_intensity=0.0,
        intensity_gain=0.3,
        gain_range=(0.5, 2.0),
        intensity_gamma=0.2,
        intensity_affine=0.1,
        intensity_falloff=0.2,
        colour_cast=0.3,
        cast_range=(0.85, 1.2),
        colour_brightness=0.3,
        brightness_range=(0.75, 1.33),
        colour_gamma=0.2,
        colour_greyscale=0.05,
        gamma_range=(0.75, 1.33),
    ),
    # An ablation of "robust" (bench/pointcloud_attributes.py): the same draws, dropout per batch.
    "robust-batch": AttributeAugment(dropout_unit="batch"),
    # The robust re-maps with 30% dropout per batch: with BatchNorm statistics kept per attribute
    # presence (:mod:`mlcore.pointcloud.presence`) the probes' best trade-off (bench/pointcloud_attributes.py).
    "batch-30": AttributeAugment(drop_colour=0.3, drop_intensity=0.3, dropout_unit="batch"),
}


def preset(name: str) -> AttributeAugment | None:
    if name not in PRESETS:
        raise ValueError(f"unknown attribute augmentation {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name]


# -- the transforms, on features in [0, 1] -----------------------------------------------------------


def log_uniform(rng: np.random.Generator, lo: float, hi: float, size: int | None = None) -> Any:
    return np.exp(rng.uniform(np.log(lo), np.log(hi), size))


def gain(values: np.ndarray, factor: float | np.ndarray) -> np.ndarray:
    """``values × factor``, clipped to [0, 1] (a sensor or a file saturates at full scale)."""
    return np.clip(values * factor, 0.0, 1.0).astype(np.float32)


def gamma(values: np.ndarray, exponent: float) -> np.ndarray:
    """``values ** exponent`` on [0, 1]."""
    return np.power(np.clip(values, 0.0, 1.0), exponent).astype(np.float32)


def percentile_scale(values: np.ndarray, lo: float = 1.0, hi: float = 99.0) -> np.ndarray:
    """The ``lo``–``hi`` percentile range mapped onto [0, 1] and clipped (the reader's scaling of an
    intensity of unknown range, :func:`~mlcore.pointcloud.io.attributes.unknown_intensity`). Meant
    for whole scans: on a training crop it would stretch plain asphalt into paint (hence
    :func:`rescale` there)."""
    p_lo, p_hi = np.percentile(values, (lo, hi))
    if p_hi <= p_lo:
        return np.full_like(values, 0.5, dtype=np.float32)
    return np.clip((values - p_lo) / (p_hi - p_lo), 0.0, 1.0).astype(np.float32)


def rescale(values: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """(values − lo) / (hi − lo), clipped to [0, 1]: a scan-wide affine re-mapping."""
    return np.clip((values - lo) / max(hi - lo, 1e-6), 0.0, 1.0).astype(np.float32)


def quantise(values: np.ndarray, bits: int = 8) -> np.ndarray:
    """Rounded to ``bits`` bits of [0, 1], as a file stores them."""
    full = 2**bits - 1
    return (np.round(np.clip(values, 0.0, 1.0) * full) / full).astype(np.float32)


def greyscale(rgb: np.ndarray) -> np.ndarray:
    """[n, 3] colour → its luma in all three channels."""
    return np.repeat((rgb @ LUMA)[:, None], 3, axis=1).astype(np.float32)


def crop_units(coord: np.ndarray) -> np.ndarray:
    """Coordinates centred on the crop and divided by its largest extent (crops differ in scale)."""
    c = coord.astype(np.float64)
    extent = float(np.max(np.ptp(c, axis=0))) if len(c) else 1.0
    return (c - c.mean(0)) / max(extent, 1e-6)


def falloff(values: np.ndarray, coord: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """× exp(−a·d): d the distance from a random point of the crop (crop units), a ∈ [−0.7, 1.4]."""
    u = crop_units(coord)
    origin = u[rng.integers(len(u))] if len(u) else np.zeros(3)
    d = np.linalg.norm(u - origin, axis=1)
    return gain(values, np.exp(-rng.uniform(-0.7, 1.4) * d))


def smooth_field(coord: np.ndarray, rng: np.random.Generator, channels: int) -> np.ndarray:
    """[n, channels] in [0, 1]: a few random plane waves over the crop (1–6 cycles per crop), an
    attribute with a spatial structure unrelated to the classes."""
    u = crop_units(coord)
    out = np.empty((len(u), channels), np.float32)
    for ch in range(channels):
        waves = rng.normal(size=(3, 3))
        waves *= (rng.uniform(1, 6, 3) * 2 * np.pi / np.linalg.norm(waves, axis=1))[:, None]
        phase = rng.uniform(0, 2 * np.pi, 3)
        level, depth = rng.uniform(0.2, 0.8), rng.uniform(0.05, 0.3)
        out[:, ch] = level + depth * np.sin(u @ waves.T + phase).mean(1)
    return np.clip(out, 0.0, 1.0)


def remap_intensity(
    values: np.ndarray, coord: np.ndarray, rng: np.random.Generator, cfg: AttributeAugment
) -> np.ndarray:
    """The crop's intensity as another sensor model and reader would report it."""
    out = values.astype(np.float32)
    if rng.random() < cfg.intensity_affine:
        out = rescale(out, rng.uniform(0.0, 0.05), rng.uniform(0.3, 1.0))
    if rng.random() < cfg.intensity_gain:
        out = gain(out, log_uniform(rng, *cfg.gain_range))
    if rng.random() < cfg.intensity_gamma:
        out = gamma(out, log_uniform(rng, *cfg.gamma_range))
    if rng.random() < cfg.intensity_falloff:
        out = falloff(out, coord, rng)
    if rng.random() < cfg.intensity_noise:
        out = gain(out + rng.normal(0, rng.uniform(0, 0.05), len(out)).astype(np.float32), 1.0)
    if rng.random() < cfg.intensity_quantise:
        out = quantise(out)
    return out


def remap_colour(rgb: np.ndarray, rng: np.random.Generator, cfg: AttributeAugment) -> np.ndarray:
    """The crop's colour as another camera would record it, quantised to 8 bits."""
    out = rgb.astype(np.float32)
    if rng.random() < cfg.colour_greyscale:
        out = greyscale(out)
    if rng.random() < cfg.colour_cast:
        out = gain(out, log_uniform(rng, *cfg.cast_range, size=3).astype(np.float32))
    if rng.random() < cfg.colour_brightness:
        out = gain(out, log_uniform(rng, *cfg.brightness_range))
    if rng.random() < cfg.colour_gamma:
        out = gamma(out, log_uniform(rng, *cfg.gamma_range))
    if rng.random() < cfg.colour_noise:
        out = gain(out + rng.normal(0, rng.uniform(0, 0.04), out.shape).astype(np.float32), 1.0)
    return quantise(out)


def synthetic_colour(coord: np.ndarray, intensity: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
    """A colour for a crop that had none: a constant fill (white / grey), intensity as grey (when
    there is one), or a smooth random field."""
    kinds = ["fill", "field"] + (["grey"] if intensity is not None else [])
    kind = kinds[int(rng.integers(len(kinds)))]
    if kind == "fill":
        return quantise(np.full((len(coord), 3), rng.choice([0.5, 1.0]), np.float32))
    if kind == "grey":
        return quantise(np.repeat(np.asarray(intensity, np.float32)[:, None], 3, axis=1))
    return quantise(smooth_field(coord, rng, 3))


def synthetic_intensity(coord: np.ndarray, rgb: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
    """An intensity for a crop that had none: a constant, the colour's luma (when there is one), or a
    smooth random field, each with a little noise."""
    kinds = ["fill", "field"] + (["luma"] if rgb is not None else [])
    kind = kinds[int(rng.integers(len(kinds)))]
    if kind == "fill":
        base = np.full(len(coord), rng.uniform(0.2, 1.0), np.float32)
    elif kind == "luma":
        base = (np.asarray(rgb, np.float32) @ LUMA).astype(np.float32)
    else:
        base = smooth_field(coord, rng, 1)[:, 0]
    return gain(base + rng.normal(0, 0.02, len(base)).astype(np.float32), 1.0)


def present(feat: np.ndarray) -> dict[str, bool]:
    """Which attributes a crop's features carry: a channel that is zero on every point is absent
    (that is how :func:`~mlcore.pointcloud.datasets.point_features` encodes a missing one)."""
    return {"colour": bool(np.any(feat[:, COLOUR])), "intensity": bool(np.any(feat[:, INTENSITY]))}


def batch_keeps(rng: np.random.Generator, cfg: AttributeAugment) -> dict[str, bool] | None:
    """For ``dropout_unit="batch"``: whether this step's crops keep colour and intensity, drawn once
    for the whole batch (None for per-crop dropout, which draws nothing here)."""
    if cfg.dropout_unit == "crop":
        return None
    if cfg.dropout_unit != "batch":
        raise ValueError(f"dropout_unit must be 'crop' or 'batch', got {cfg.dropout_unit!r}")
    return {"colour": bool(rng.random() >= cfg.drop_colour), "intensity": bool(rng.random() >= cfg.drop_intensity)}


def augment_features(
    feat: np.ndarray,
    coord: np.ndarray,
    rng: np.random.Generator,
    cfg: AttributeAugment,
    keeps: dict[str, bool] | None = None,
) -> np.ndarray:
    """One training crop's features with its attributes dropped, re-mapped or synthesised (a new
    array; height and every other channel untouched). ``coord``: the crop's coordinates, any unit.
    ``keeps``: the batch's dropout draw (:func:`batch_keeps`); None draws it for this crop."""
    out = feat.copy()
    has = present(feat)
    if keeps is None:
        keep_colour = has["colour"] and rng.random() >= cfg.drop_colour
        keep_intensity = has["intensity"] and rng.random() >= cfg.drop_intensity
    else:
        keep_colour, keep_intensity = has["colour"] and keeps["colour"], has["intensity"] and keeps["intensity"]
    colour = remap_colour(feat[:, COLOUR], rng, cfg) if keep_colour else None
    intensity = remap_intensity(feat[:, INTENSITY], coord, rng, cfg) if keep_intensity else None
    if not has["colour"] and rng.random() < cfg.add_colour:
        colour = synthetic_colour(coord, intensity, rng)
    if not has["intensity"] and rng.random() < cfg.add_intensity:
        intensity = synthetic_intensity(coord, colour, rng)
    out[:, COLOUR] = 0.0 if colour is None else colour
    out[:, INTENSITY] = 0.0 if intensity is None else intensity
    return out


def robust_attributes(config: dict[str, Any]) -> tuple[str, ...] | None:
    """The attributes a saved segmenter was trained to do without (those its augmentation dropped
    from some crops), read from its ``config.json``: the zoo's card names the recipe's
    ``attribute_augment``, a user segmenter's card the run's. None when the card does not say (trained
    before this module, or with augmentation off); () for "balanced", which drops nothing.
    ``pointcloud-segment``'s ``attributes=auto`` can give a model every attribute the file carries
    when this names them all."""
    card = config.get("card") or {}
    recorded = card.get("attribute_augment")
    if recorded is None:
        recorded = ((card.get("recipe") or {}).get("train") or {}).get("attribute_augment")
    if not isinstance(recorded, str) or PRESETS.get(recorded) is None:
        return None
    return dropped(recorded)


def dropped(name: str) -> tuple[str, ...]:
    """The attributes preset ``name`` trains some crops without: those a model trained with it has
    learnt to do without, and the reason to keep BatchNorm statistics per presence
    (:mod:`mlcore.pointcloud.presence`). () for "off" and "balanced"."""
    return tuple(a for a, rate in _dropout_rates(name).items() if rate > 0)


def _dropout_rates(name: str) -> dict[str, float]:
    cfg = preset(name)
    return {a: 0.0 if cfg is None else getattr(cfg, f"drop_{a}") for a in ATTRIBUTES}


def summary(name: str) -> str:
    """What preset ``name`` does, in a sentence for a job's log."""
    cfg = preset(name)
    if cfg is None:
        return f"{name}: colour and intensity trained as the scans hold them"
    unit = "batches" if cfg.dropout_unit == "batch" else "crops"
    rates = _dropout_rates(name)
    gone = [f"{a} from {rates[a]:.0%}" for a in dropped(name)]
    text = f"{name}: colour and intensity re-mapped as other sensors report them"
    if not gone:
        return text + ", never dropped (segment scans that carry what the training scans carried)"
    return text + f"; dropped ({', '.join(gone)} of the {unit})"
