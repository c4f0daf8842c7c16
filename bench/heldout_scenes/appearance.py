"""The family's own material model: colour from albedo and light, intensity from near-infrared reflectance.

**Colour.** Every material has an sRGB base colour; a part's colour varies a little around it (no
two chairs of one fabric are dyed alike) and every point a little more (texture). The base colour
is taken to linear light, lit, exposed, white-balanced, noised and encoded back with the camera's
gamma:

- indoors: an ambient term, one to three ceiling lamps (Lambertian, falling off with distance) and
  daylight through the windows;
- outdoors: a tinted sky term and a sun at a random elevation and azimuth.

**Intensity.** A LiDAR's return strength: the material's near-infrared reflectance (foliage is
bright there, dark paint and tyres dim, sign faces retroreflective) × |cos incidence|^p, falling
off with range as 1 / (1 + (r / r½)²), × a per-scan gain, plus noise, clipped to [0, 1].
"""

from __future__ import annotations

import numpy as np

from bench.heldout_scenes.params import section, uniform
from bench.heldout_scenes.world import World


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)


def albedo(world: World, rng: np.random.Generator, part: np.ndarray) -> np.ndarray:
    """[N, 3] linear albedo of each point, from its part's material, part tint and texture."""
    materials = section("materials")
    gamma = section("colour", "gamma")
    texture = section("colour", "indoor" if world.kind == "indoor" else "outdoor", "texture")
    base = np.array([materials[p.material]["rgb"] for p in world.parts], float) ** gamma
    tint = np.clip(rng.normal(1.0, 0.06, (len(world.parts), 3)), 0.7, 1.3)
    colour = (base * tint)[part]
    return np.clip(colour * rng.normal(1.0, texture, (len(part), 1)) * rng.normal(1.0, texture / 3, colour.shape), 0, 1)


def colour(world: World, rng: np.random.Generator, xyz: np.ndarray, normal: np.ndarray, part: np.ndarray) -> np.ndarray:
    """[N, 3] uint8 sRGB colour of each point."""
    gamma = section("colour", "gamma")
    if world.kind == "indoor":
        c = section("colour", "indoor")
        light = np.full(len(xyz), uniform(rng, c["ambient"]))
        for lamp in world.lamps:
            to_lamp = np.asarray(lamp) - xyz
            dist = np.linalg.norm(to_lamp, axis=1)
            cos = np.abs((normal * _unit(to_lamp)).sum(1))
            light += uniform(rng, c["lamp_gain"]) * cos / (1 + (dist / c["lamp_falloff_m"]) ** 2)
        for window in world.windows:
            to_window = np.asarray(window) - xyz
            dist = np.linalg.norm(to_window, axis=1)
            cos = np.clip((normal * _unit(to_window)).sum(1), 0, 1)
            light += uniform(rng, c["window_gain"]) * cos / (1 + (dist / 2.0) ** 2)
        lit = albedo(world, rng, part) * light[:, None]
    else:
        c = section("colour", "outdoor")
        elevation = np.radians(uniform(rng, c["sun_elevation_deg"]))
        azimuth = float(rng.uniform(0, 2 * np.pi))
        sun = np.array([np.cos(elevation) * np.cos(azimuth), np.cos(elevation) * np.sin(azimuth), np.sin(elevation)])
        direct = uniform(rng, c["sun_gain"]) * np.clip(normal @ sun, 0, 1)
        sky = uniform(rng, c["sky"]) * (0.75 + 0.25 * np.clip(normal[:, 2], -1, 1))  # up-facing surfaces see more sky
        lit = albedo(world, rng, part) * (direct[:, None] + sky[:, None] * np.asarray(c["sky_tint"]))
    balance = np.array([uniform(rng, b) for b in c["white_balance"]])
    lit = lit * uniform(rng, c["exposure"]) * balance
    encoded = np.clip(lit, 0, 1) ** (1 / gamma) + rng.normal(0, c["pixel_noise"], lit.shape)
    return np.rint(np.clip(encoded, 0, 1) * 255).astype(np.uint8)


def intensity(
    world: World,
    rng: np.random.Generator,
    model: str,
    xyz: np.ndarray,
    normal: np.ndarray,
    part: np.ndarray,
    origin: np.ndarray,
) -> np.ndarray:
    """[N] float32 return strength in [0, 1] of each point seen from ``origin`` ([N, 3] or [3]),
    with the sensor ``model``'s gain, incidence power, range fall-off and noise."""
    c = section("intensity", model)
    materials = section("materials")
    nir = np.array([materials[p.material]["nir"] for p in world.parts], float)[part]
    ray = xyz - origin
    rng_m = np.linalg.norm(ray, axis=1)
    cos = np.abs((normal * _unit(ray)).sum(1))
    value = uniform(rng, c["gain"]) * nir * cos ** c["incidence_power"] / (1 + (rng_m / c["half_range_m"]) ** 2)
    return np.clip(value + rng.normal(0, c["noise"], len(value)), 0, 1).astype(np.float32)
