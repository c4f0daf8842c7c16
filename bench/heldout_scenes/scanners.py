"""The family's own sensors: two that sample surfaces and two that cast rays.

- :func:`surface_room`: points drawn uniformly over every visible surface of the room (as when a
  reconstructed mesh is sampled), at a density that varies from part to part; anisotropic noise
  (larger along the surface normal than across it, growing with the distance to a virtual
  station), gross outliers along the line of sight, and holes where nothing was captured.
- :func:`surface_street`: a mobile mapping system's cloud: surfaces facing a trajectory along the
  street, thinned with range (density ∝ 1/r beyond a few metres), cut off at ``max_range_m``, noise
  along the line of sight growing with range, outliers and holes.
- :func:`tls`: a terrestrial laser scanner on a tripod, one or two stations registered with a small
  error: a regular azimuth × elevation grid reaching up to the zenith, millimetre range noise, weak
  returns from dark surfaces lost, random drop-outs.
- :func:`lidar`: a spinning 40-beam LiDAR whose beams crowd around the horizon (as in mechanical
  LiDARs built for driving), tilted on its mount, with a blind sector behind it, swept at two places
  along the lane and merged, range-dependent noise, weak-return and random drop-outs, outliers.

Ray casting is this family's own: each part's bounding sphere picks the rays that may hit it, and
the part's exact intersection (:mod:`bench.heldout_scenes.shapes`) decides. Every sensor returns a
:class:`Capture`: points, their surface normals, the part each came from and its intensity.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench.heldout_scenes.appearance import intensity
from bench.heldout_scenes.params import integer, section, uniform
from bench.heldout_scenes.world import World


@dataclass
class Capture:
    xyz: np.ndarray  #: [N, 3] float64
    normal: np.ndarray  #: [N, 3] unit normals of the surfaces the points lie on
    part: np.ndarray  #: [N] index into ``world.parts``
    intensity: np.ndarray  #: [N] float32 in [0, 1]

    def subset(self, keep: np.ndarray) -> Capture:
        return Capture(self.xyz[keep], self.normal[keep], self.part[keep], self.intensity[keep])

    @staticmethod
    def join(captures: list[Capture]) -> Capture:
        return Capture(
            *(np.concatenate([getattr(c, f) for c in captures]) for f in ("xyz", "normal", "part", "intensity"))
        )


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)


def _tangents(normal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    helper = np.where(np.abs(normal[:, :1]) < 0.9, np.array([[1.0, 0.0, 0.0]]), np.array([[0.0, 1.0, 0.0]]))
    t1 = _unit(np.cross(normal, helper))
    return t1, np.cross(normal, t1)


# -- surfaces ---------------------------------------------------------------------------------------


def sample_surfaces(
    world: World, rng: np.random.Generator, density: float, log_sigma: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Points on every part's surface (``density`` per m² × a log-normal factor per part); the
    caller removes those :func:`hidden` inside another part, after any cheaper cuts."""
    xyz, normal, part = [], [], []
    for j, p in enumerate(world.parts):
        n = int(rng.poisson(p.solid.area() * density * float(rng.lognormal(0.0, log_sigma))))
        if n == 0:
            continue
        pts, nrm = p.solid.sample(rng, n)
        xyz.append(pts)
        normal.append(nrm)
        part.append(np.full(n, j, np.int64))
    return np.concatenate(xyz), np.concatenate(normal), np.concatenate(part)


def _spheres(world: World) -> tuple[np.ndarray, np.ndarray]:
    """Every part's bounding sphere: centres [P, 3] and radii [P]."""
    spheres = [p.solid.bounding_sphere() for p in world.parts]
    return np.array([c for c, _ in spheres]), np.array([r for _, r in spheres])


def _compact_chunks(points: np.ndarray, size: int, cell: float = 4.0) -> list[np.ndarray]:
    """Indices of ``points`` in chunks of ``size`` that are compact in space (sorted by a coarse
    x, y cell, then by x), so each chunk's bounding box meets few parts."""
    cells = np.floor(points[:, :2] / cell).astype(np.int64)
    order = np.lexsort((points[:, 0], cells[:, 1], cells[:, 0]))
    return [order[i : i + size] for i in range(0, len(order), size)]


def _parts_meeting(centres: np.ndarray, radii: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The parts whose bounding spheres' boxes overlap the box ``lo``..``hi``."""
    return np.flatnonzero(np.all(centres + radii[:, None] >= lo, 1) & np.all(centres - radii[:, None] <= hi, 1))


def hidden(world: World, xyz: np.ndarray, part: np.ndarray) -> np.ndarray:
    """Whether each point lies inside a part other than its own (checked chunk by chunk of nearby
    points, against the parts whose bounding spheres reach the chunk)."""
    centres, radii = _spheres(world)
    out = np.zeros(len(xyz), bool)
    for rows in _compact_chunks(xyz, 4096):
        pts = xyz[rows]
        for j in _parts_meeting(centres, radii, pts.min(0) - 0.01, pts.max(0) + 0.01):
            inside = world.parts[j].solid.contains(pts) & (part[rows] != j)
            out[rows[inside]] = True
    return out


def _into_foliage(
    world: World, rng: np.random.Generator, xyz: np.ndarray, inward: np.ndarray, part: np.ndarray, depth: float
) -> np.ndarray:
    """Points on porous parts (foliage) moved ``inward`` by an exponential depth: leaves fill a shell."""
    porous = np.array([p.porous for p in world.parts])[part]
    shift = np.minimum(rng.exponential(depth, len(xyz)), 4 * depth) * porous
    return xyz + inward * shift[:, None]


def _outliers(
    rng: np.random.Generator, xyz: np.ndarray, origin: np.ndarray, fraction: float, offset: list[float]
) -> np.ndarray:
    """Move a ``fraction`` of the points along their line of sight by ±``offset`` metres (mixed pixels, multipath)."""
    out = xyz.copy()
    pick = rng.random(len(xyz)) < fraction
    ray = _unit(xyz[pick] - (origin[pick] if origin.ndim == 2 else origin))
    out[pick] += ray * (rng.uniform(*offset, pick.sum()) * rng.choice([-1.0, 1.0], pick.sum()))[:, None]
    return out


def _holes(rng: np.random.Generator, xyz: np.ndarray, count: int, radius: list[float]) -> np.ndarray:
    """A mask without ``count`` balls of points around random points: the patches a capture missed."""
    keep = np.ones(len(xyz), bool)
    for _ in range(count):
        centre = xyz[rng.integers(len(xyz))]
        keep &= ((xyz - centre) ** 2).sum(1) > uniform(rng, radius) ** 2
    return keep


def inside_room(world: World, xyz: np.ndarray) -> np.ndarray:
    """The points a room scan keeps: inside the floor plan (into the walls' thickness) and between floor and ceiling."""
    assert world.footprint is not None
    return (
        world.footprint.contains(xyz[:, :2], margin=world.crop_margin)
        & (xyz[:, 2] > -0.05)
        & (xyz[:, 2] < world.height + 0.05)
    )


def surface_room(world: World, rng: np.random.Generator) -> Capture:
    s = section("sensors", "surface_room")
    xyz, normal, part = sample_surfaces(world, rng, s["points_per_m2"], s["part_density_log_sigma"])
    keep = inside_room(world, xyz)
    keep[keep] = ~hidden(world, xyz[keep], part[keep])
    xyz, normal, part = xyz[keep], normal[keep], part[keep]
    sx, sy = world.stations[int(rng.integers(len(world.stations)))]
    station = np.array([sx, sy, uniform(rng, s["station_height_m"])])
    xyz = _into_foliage(world, rng, xyz, -normal, part, s["foliage_depth_m"])
    dist = np.linalg.norm(xyz - station, axis=1)
    t1, t2 = _tangents(normal)
    sigma_n = s["noise_normal_m"] + s["noise_normal_per_m"] * dist
    xyz = xyz + normal * (rng.normal(0, 1, len(xyz)) * sigma_n)[:, None]
    xyz = (
        xyz
        + (t1 * rng.normal(0, s["noise_tangent_m"], (len(xyz), 1)))
        + (t2 * rng.normal(0, s["noise_tangent_m"], (len(xyz), 1)))
    )
    xyz = _outliers(rng, xyz, station, s["outlier_fraction"], s["outlier_offset_m"])
    keep = _holes(rng, xyz, s["holes"], s["hole_radius_m"])
    xyz, normal, part = xyz[keep], normal[keep], part[keep]
    return Capture(xyz, normal, part, intensity(world, rng, "surface_room", xyz, normal, part, station))


def surface_street(world: World, rng: np.random.Generator) -> Capture:
    s = section("sensors", "surface_street")
    xyz, normal, part = sample_surfaces(world, rng, s["points_per_m2"], s["part_density_log_sigma"])
    lane_y = world.stations[int(rng.integers(len(world.stations)))][1] + uniform(rng, s["trajectory_offset_m"])
    height = uniform(rng, s["trajectory_height_m"])
    # The trajectory runs along x. Density falls with the distance from it; each point is captured
    # from a trajectory position up to ``view_spread_m`` before or after it, and kept only if its
    # surface faces that position and nothing stands in between (so yards behind buildings stay unseen).
    across = np.hypot(xyz[:, 1] - lane_y, xyz[:, 2] - height)
    thinned = rng.random(len(xyz)) < np.minimum(1.0, s["full_density_range_m"] / np.maximum(across, 1e-6))
    keep = thinned & (across <= s["max_range_m"])
    keep[keep] = ~hidden(world, xyz[keep], part[keep])
    xyz, normal, part = xyz[keep], normal[keep], part[keep]
    view_x = xyz[:, 0] + rng.uniform(-s["view_spread_m"], s["view_spread_m"], len(xyz))
    origin = np.stack([view_x, np.full(len(xyz), lane_y), np.full(len(xyz), height)], 1)
    sight = origin - xyz
    dist = np.linalg.norm(sight, axis=1)
    keep = (normal * sight).sum(1) > 0.02 * dist
    xyz, normal, part, origin, dist = xyz[keep], normal[keep], part[keep], origin[keep], dist[keep]
    first, _, _ = cast(world, origin, (xyz - origin) / dist[:, None], dist)
    keep = first >= dist - 0.03
    xyz, normal, part, origin, dist = xyz[keep], normal[keep], part[keep], origin[keep], dist[keep]
    ray = _unit(xyz - origin)
    xyz = _into_foliage(world, rng, xyz, ray, part, s["foliage_depth_m"])
    t1, t2 = _tangents(normal)
    sigma = s["noise_ray_m"] + s["noise_ray_per_m"] * dist
    xyz = xyz + ray * (rng.normal(0, 1, len(xyz)) * sigma)[:, None]
    xyz = (
        xyz
        + (t1 * rng.normal(0, s["noise_tangent_m"], (len(xyz), 1)))
        + (t2 * rng.normal(0, s["noise_tangent_m"], (len(xyz), 1)))
    )
    xyz = _outliers(rng, xyz, origin, s["outlier_fraction"], s["outlier_offset_m"])
    keep = _holes(rng, xyz, s["holes"], s["hole_radius_m"])
    xyz, normal, part, origin = xyz[keep], normal[keep], part[keep], origin[keep]
    return Capture(xyz, normal, part, intensity(world, rng, "surface_street", xyz, normal, part, origin))


# -- rays -------------------------------------------------------------------------------------------


def cast(
    world: World, origin: np.ndarray, dirs: np.ndarray, reach: float | np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distance, part, normal) of the first surface each unit ray meets within ``reach`` metres
    (inf, −1 where none). ``origin``: one point [3] for every ray, or one per ray [R, 3].

    Rays are taken in chunks that are compact in space (by direction from a single origin, by place
    otherwise); a chunk is tested only against the parts whose bounding spheres reach the box of its
    ray segments, and each ray only against those spheres it passes through."""
    single = np.ndim(origin) == 1
    origin = np.broadcast_to(np.asarray(origin, float), dirs.shape)
    ends = origin + dirs * np.broadcast_to(reach, len(dirs))[:, None]
    if single:  # by azimuth, then elevation: a chunk is a narrow wedge
        order = np.lexsort((dirs[:, 2], np.round(np.arctan2(dirs[:, 1], dirs[:, 0]), 2)))
        chunks = [order[i : i + 1024] for i in range(0, len(order), 1024)]
    else:
        chunks = _compact_chunks((origin + ends) / 2, 2048)
    centres, radii = _spheres(world)
    best = np.full(len(dirs), np.inf)
    part = np.full(len(dirs), -1, np.int64)
    normal = np.zeros_like(dirs)
    for rows in chunks:
        o, d = origin[rows], dirs[rows]
        lo = np.minimum(o.min(0), ends[rows].min(0))
        hi = np.maximum(o.max(0), ends[rows].max(0))
        for j in _parts_meeting(centres, radii, lo, hi):
            rel = centres[j] - o
            along = (d * rel).sum(1)
            # Rays passing farther than the radius from the centre, or pointing away from it, cannot hit.
            near = np.flatnonzero(
                ((rel * rel).sum(1) - along**2 <= radii[j] ** 2)
                & (along + radii[j] > 0)
                & (along - radii[j] < best[rows])
            )
            if len(near) == 0:
                continue
            t, n = world.parts[j].solid.intersect(o[near], d[near])
            closer = t < best[rows[near]]
            hit = rows[near[closer]]
            best[hit], part[hit], normal[hit] = t[closer], j, n[closer]
    return best, part, normal


def _returns(
    world: World,
    rng: np.random.Generator,
    model: str,
    origin: np.ndarray,
    dirs: np.ndarray,
    s: dict,
    min_range: float,
    max_range: float,
) -> Capture:
    """Cast, add range noise, compute intensity, drop weak and random returns, add outliers."""
    t, part, normal = cast(world, origin, dirs, max_range)
    keep = np.isfinite(t) & (t >= min_range) & (t <= max_range)
    t, part, normal, d = t[keep], part[keep], normal[keep], dirs[keep]
    porous = np.array([p.porous for p in world.parts])[part]
    t = t + porous * np.minimum(rng.exponential(s["foliage_depth_m"], len(t)), 4 * s["foliage_depth_m"])
    t = t + rng.normal(0, 1, len(t)) * (s["noise_m"] + s["noise_per_m"] * t)
    xyz = origin + t[:, None] * d
    strength = intensity(world, rng, model, xyz, normal, part, origin)
    lost = (rng.random(len(t)) < s["random_drop"]) | (
        (strength < s["weak_return_below"]) & (rng.random(len(t)) < s["weak_return_drop"])
    )
    xyz = _outliers(rng, xyz, origin, s["outlier_fraction"], s["outlier_offset_m"])
    return Capture(xyz, normal, part, strength).subset(~lost)


def tls(world: World, rng: np.random.Generator) -> Capture:
    s = section("sensors", "tls")
    stations = rng.permutation(len(world.stations))[: integer(rng, s["stations"])]
    az = np.linspace(0, 2 * np.pi, s["azimuth_steps"], endpoint=False)
    el = np.radians(np.linspace(*s["elevation_deg"], s["elevation_steps"]))
    captures = []
    for k, i in enumerate(stations):
        origin = np.array([*world.stations[int(i)], uniform(rng, s["height_m"])])
        a, e = np.meshgrid(az + rng.uniform(0, 2 * np.pi), el, indexing="ij")
        dirs = np.stack([np.cos(e) * np.cos(a), np.cos(e) * np.sin(a), np.sin(e)], -1).reshape(-1, 3)
        capture = _returns(world, rng, "tls", origin, dirs, s, s["min_range_m"], 50.0)
        if k > 0:  # the second station is registered to the first with a small error
            capture.xyz = capture.xyz + rng.normal(0, s["registration_error_m"], 3)
        captures.append(capture)
    joined = Capture.join(captures)
    return joined.subset(inside_room(world, joined.xyz))


def beam_elevations(s: dict) -> np.ndarray:
    """The LiDAR's beam elevations (degrees): ``dense_band_share`` of the beams evenly in the dense
    band around the horizon, the rest spread evenly over the field of view below and above it."""
    lo, hi = s["elevation_deg"]
    band_lo, band_hi = s["dense_band_deg"]
    dense = round(s["beams"] * s["dense_band_share"])
    rest = s["beams"] - dense
    below = round(rest * (band_lo - lo) / ((band_lo - lo) + (hi - band_hi)))
    above = rest - below
    return np.concatenate(
        [
            np.linspace(lo, band_lo, below, endpoint=False),
            np.linspace(band_lo, band_hi, dense),
            np.linspace(hi, band_hi, above, endpoint=False)[::-1],
        ]
    )


def lidar(world: World, rng: np.random.Generator) -> Capture:
    s = section("sensors", "lidar")
    x0, y0 = world.stations[int(rng.integers(len(world.stations)))]
    heading = 0.0 if y0 < 0 else np.pi  # driving with the traffic of its lane
    el = np.radians(beam_elevations(s))
    az = np.linspace(-np.pi, np.pi, s["azimuth_steps"], endpoint=False)
    behind = np.abs(np.abs(az) - np.pi) < np.radians(s["blind_sector_deg"]) / 2  # relative to the heading
    az = az[~behind]
    spacing = uniform(rng, s["frame_spacing_m"])
    height = uniform(rng, s["mount_height_m"])
    captures = []
    for k in range(s["frames"]):
        origin = np.array([x0 + k * spacing * np.cos(heading), y0, height])
        a, e = np.meshgrid(az + heading + rng.uniform(0, 2 * np.pi / s["azimuth_steps"]), el, indexing="ij")
        dirs = np.stack([np.cos(e) * np.cos(a), np.cos(e) * np.sin(a), np.sin(e)], -1).reshape(-1, 3)
        roll, pitch = np.radians(rng.uniform(-s["tilt_deg"], s["tilt_deg"], 2))
        cr, sr, cp, sp = np.cos(roll), np.sin(roll), np.cos(pitch), np.sin(pitch)
        tilt = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]]) @ np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
        captures.append(_returns(world, rng, "lidar", origin, dirs @ tilt.T, s, s["min_range_m"], s["max_range_m"]))
    return Capture.join(captures)
