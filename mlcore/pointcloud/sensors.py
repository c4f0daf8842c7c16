"""Simulated sensors: numpy ray casting against a :class:`~mlcore.pointcloud.scenes.Scene`.

- :func:`depth_camera`: several pinhole views fused into one cloud, range ≤ ``max_range``, noise
  along the ray σ = k·d² (structured-light / stereo depth error grows with the square of the
  distance), RGB from the object's colour, Lambert shading and pixel noise.
- :func:`panorama`: one clean equirectangular scan from the room's centre (a Matterport-style
  capture), RGB with a different white balance and gamma.
- :func:`lidar`: a spinning multi-beam LiDAR (``beams`` rings between ``fov_down`` and ``fov_up``),
  intensity from reflectivity × incidence × range fall-off, ~2 cm range noise, random dropout and
  more dropout at grazing angles; no colour.

Each returns a :class:`Scan`: xyz float32, rgb uint8 or None, intensity float32 or None, master
labels int32. Ray casting is exact for the analytic primitives (slab test for boxes, quadratics
for cylinders and spheres), vectorised over rays in chunks, so a scan takes well under a second.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlcore.pointcloud.scenes import LABELS, REFLECTIVITY, Scene

_CHUNK = 1024


@dataclass
class Scan:
    xyz: np.ndarray  #: [N, 3] float32
    rgb: np.ndarray | None  #: [N, 3] uint8
    intensity: np.ndarray | None  #: [N] float32 in [0, 1]
    labels: np.ndarray  #: [N] int32 master label ids

    def __len__(self) -> int:
        return len(self.xyz)


@dataclass
class Hits:
    t: np.ndarray  #: [R] distance along each unit ray (inf: no hit)
    label: np.ndarray  #: [R] int32 master label (−1: no hit)
    colour: np.ndarray  #: [R, 3] float32 object colour
    normal: np.ndarray  #: [R, 3] float32 unit surface normal


def cast(scene: Scene, origin: np.ndarray, dirs: np.ndarray) -> Hits:
    """The first surface hit by each ray ``origin + t·dirs`` (dirs unit length, [R, 3]).

    Rays are sorted by azimuth and cast in narrow sectors; each sector tests only the primitives
    whose azimuth span (seen from ``origin``) overlaps it, which keeps a 64-beam sweep of a street
    with a few hundred primitives well under a second."""
    prims = _Primitives(scene, origin)
    order = np.argsort(np.arctan2(dirs[:, 1], dirs[:, 0]), kind="stable")
    out = Hits(
        np.full(len(dirs), np.inf),
        np.full(len(dirs), -1, np.int32),
        np.zeros((len(dirs), 3), np.float32),
        np.zeros((len(dirs), 3), np.float32),
    )
    for i in range(0, len(dirs), _CHUNK):
        rows = order[i : i + _CHUNK]
        d = dirs[rows]
        az = np.arctan2(d[:, 1], d[:, 0])
        lo, hi = az.min(), az.max()
        hits = _cast_chunk(scene, prims.subset((lo + hi) / 2, (hi - lo) / 2), origin, d)
        out.t[rows], out.label[rows], out.colour[rows], out.normal[rows] = hits.t, hits.label, hits.colour, hits.normal
    return out


def _wrap(a: np.ndarray) -> np.ndarray:
    return (a + np.pi) % (2 * np.pi) - np.pi


class _Primitives:
    """The scene's primitives as arrays, with each one's azimuth span seen from the sensor."""

    def __init__(self, scene: Scene, origin: np.ndarray) -> None:
        self.box_lo = np.stack([b[0] for b in scene.boxes]) if scene.boxes else np.zeros((0, 3))
        self.box_hi = np.stack([b[1] for b in scene.boxes]) if scene.boxes else np.zeros((0, 3))
        self.box_label = np.asarray(scene.box_labels, np.int32)
        self.box_colour = np.asarray(scene.box_colours, np.float32).reshape(-1, 3)
        self.cyl = np.asarray(scene.cylinders, np.float64).reshape(-1, 5)
        self.cyl_label = np.asarray(scene.cylinder_labels, np.int32)
        self.cyl_colour = np.asarray(scene.cylinder_colours, np.float32).reshape(-1, 3)
        self.sph = np.asarray(scene.spheres, np.float64).reshape(-1, 4)
        self.sph_label = np.asarray(scene.sphere_labels, np.int32)
        self.sph_colour = np.asarray(scene.sphere_colours, np.float32).reshape(-1, 3)
        # Every primitive's xy bounding rectangle → (centre angle, half-width) from the origin.
        rects = np.concatenate(
            [
                np.concatenate([self.box_lo[:, :2], self.box_hi[:, :2]], 1),
                np.stack(
                    [
                        self.cyl[:, 0] - self.cyl[:, 4],
                        self.cyl[:, 1] - self.cyl[:, 4],
                        self.cyl[:, 0] + self.cyl[:, 4],
                        self.cyl[:, 1] + self.cyl[:, 4],
                    ],
                    1,
                ),
                np.stack(
                    [
                        self.sph[:, 0] - self.sph[:, 3],
                        self.sph[:, 1] - self.sph[:, 3],
                        self.sph[:, 0] + self.sph[:, 3],
                        self.sph[:, 1] + self.sph[:, 3],
                    ],
                    1,
                ),
            ]
        )
        margin = 1.0  # near-vertical rays travel little in xy: anything this close is always tested
        corners = np.stack([rects[:, [0, 1]], rects[:, [0, 3]], rects[:, [2, 1]], rects[:, [2, 3]]], 1) - origin[:2]
        angles = np.arctan2(corners[..., 1], corners[..., 0])
        centre = np.arctan2(corners[..., 1].mean(1), corners[..., 0].mean(1))
        self.centre = centre
        self.half = np.abs(_wrap(angles - centre[:, None])).max(1)
        near = (
            (rects[:, 0] - margin <= origin[0])
            & (origin[0] <= rects[:, 2] + margin)
            & (rects[:, 1] - margin <= origin[1])
            & (origin[1] <= rects[:, 3] + margin)
        )
        self.half[near] = np.pi
        self.counts = (len(self.box_lo), len(self.cyl), len(self.sph))

    def subset(self, centre: float, half: float) -> _Primitives:
        keep = np.abs(_wrap(self.centre - centre)) <= self.half + half + 1e-3
        nb, nc, _ = self.counts
        kb, kc, ks = keep[:nb], keep[nb : nb + nc], keep[nb + nc :]
        sub = object.__new__(_Primitives)
        sub.box_lo, sub.box_hi, sub.box_label, sub.box_colour = (
            self.box_lo[kb],
            self.box_hi[kb],
            self.box_label[kb],
            self.box_colour[kb],
        )
        sub.cyl, sub.cyl_label, sub.cyl_colour = self.cyl[kc], self.cyl_label[kc], self.cyl_colour[kc]
        sub.sph, sub.sph_label, sub.sph_colour = self.sph[ks], self.sph_label[ks], self.sph_colour[ks]
        return sub


def _cast_chunk(scene: Scene, prims: _Primitives, o: np.ndarray, d: np.ndarray) -> Hits:
    r = len(d)
    rows = np.arange(r)
    best = np.full(r, np.inf)
    label = np.full(r, -1, np.int32)
    colour = np.zeros((r, 3), np.float32)
    normal = np.zeros((r, 3), np.float32)

    def take(t: np.ndarray, lab: np.ndarray, col: np.ndarray, nrm: np.ndarray) -> None:
        closer = t < best
        best[closer] = t[closer]
        label[closer] = lab[closer]
        colour[closer] = col[closer]
        normal[closer] = nrm[closer]

    # The ground plane z = 0.
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(d[:, 2] < -1e-9, -o[2] / d[:, 2], np.inf)
    take(
        t,
        np.full(r, scene.ground_label, np.int32),
        np.broadcast_to(np.asarray(scene.ground_colour, np.float32), (r, 3)),
        np.broadcast_to(np.array([0, 0, 1], np.float32), (r, 3)),
    )
    if len(prims.box_lo):  # slab test (Kay & Kajiya 1986)
        safe = np.where(np.abs(d) < 1e-12, 1e-12, d)
        inv = 1.0 / safe  # [R, 3]
        t1 = (prims.box_lo[None] - o) * inv[:, None]  # [R, B, 3]
        t2 = (prims.box_hi[None] - o) * inv[:, None]
        near = np.minimum(t1, t2)
        far = np.maximum(t1, t2).min(-1)
        axis = near.argmax(-1)  # the slab entered last gives the face normal
        near = near.max(-1)
        tb = np.where((near <= far) & (near > 1e-6), near, np.inf)
        j = tb.argmin(1)
        ax = axis[rows, j]
        n = np.zeros((r, 3), np.float32)
        n[rows, ax] = -np.sign(d[rows, ax])
        take(tb[rows, j], prims.box_label[j], prims.box_colour[j], n)
    if len(prims.cyl):  # vertical cylinders: side (a quadratic in x, y) and top cap
        cyl = prims.cyl
        ox, oy = o[0] - cyl[:, 0], o[1] - cyl[:, 1]  # [C]
        a = d[:, 0:1] ** 2 + d[:, 1:2] ** 2  # [R, 1]
        b = 2 * (d[:, 0:1] * ox + d[:, 1:2] * oy)  # [R, C]
        c = ox**2 + oy**2 - cyl[:, 4] ** 2
        disc = b * b - 4 * a * c
        ts = (-b - np.sqrt(np.maximum(disc, 0))) / (2 * np.maximum(a, 1e-12))
        z = o[2] + ts * d[:, 2:3]
        tside = np.where((disc > 0) & (ts > 1e-6) & (z >= cyl[:, 2]) & (z <= cyl[:, 3]), ts, np.inf)
        tcap = (cyl[:, 3] - o[2]) / np.where(np.abs(d[:, 2:3]) < 1e-12, 1e-12, d[:, 2:3])
        capx = ox + tcap * d[:, 0:1]
        capy = oy + tcap * d[:, 1:2]
        tcap = np.where((tcap > 1e-6) & (capx**2 + capy**2 <= cyl[:, 4] ** 2), tcap, np.inf)
        tc = np.minimum(tside, tcap)
        j = tc.argmin(1)
        tj = tc[rows, j]
        is_cap = tcap[rows, j] <= tside[rows, j]
        finite = np.where(np.isfinite(tj), tj, 0)[:, None]
        radial = np.concatenate(
            [o[0] + finite * d[:, 0:1] - cyl[j, 0:1], o[1] + finite * d[:, 1:2] - cyl[j, 1:2], np.zeros((r, 1))], 1
        )
        radial /= np.maximum(np.linalg.norm(radial, axis=1, keepdims=True), 1e-9)
        n = np.where(is_cap[:, None], np.array([0.0, 0.0, 1.0]), radial).astype(np.float32)
        take(tj, prims.cyl_label[j], prims.cyl_colour[j], n)
    if len(prims.sph):
        sph = prims.sph
        oc = o[None, :] - sph[:, :3]  # [S, 3]
        b = d @ oc.T  # [R, S] (half of the usual b, dirs unit length)
        c = (oc**2).sum(1) - sph[:, 3] ** 2
        disc = b * b - c
        ts = -b - np.sqrt(np.maximum(disc, 0))
        ts = np.where((disc > 0) & (ts > 1e-6), ts, np.inf)
        j = ts.argmin(1)
        tj = ts[rows, j]
        p = o + np.where(np.isfinite(tj), tj, 0)[:, None] * d
        n = p - sph[j, :3]
        n = (n / np.maximum(np.linalg.norm(n, axis=1, keepdims=True), 1e-9)).astype(np.float32)
        take(tj, prims.sph_label[j], prims.sph_colour[j], n)
    return Hits(best, label, colour, normal)


def _inside(scene: Scene, xyz: np.ndarray) -> np.ndarray:
    if scene.bounds is None:
        return np.ones(len(xyz), bool)
    x0, y0, x1, y1 = scene.bounds
    return (xyz[:, 0] >= x0) & (xyz[:, 0] <= x1) & (xyz[:, 1] >= y0) & (xyz[:, 1] <= y1)


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def _shade(
    hits: Hits,
    dirs: np.ndarray,
    keep: np.ndarray,
    rng: np.random.Generator,
    *,
    gain: np.ndarray,
    gamma: float,
    noise: float,
) -> np.ndarray:
    """Object colour × (ambient + Lambert with a light from above), then a camera's white balance,
    gamma and pixel noise, as uint8."""
    light = _unit(np.array([0.3, 0.2, 1.0]))
    lambert = np.abs(hits.normal[keep] @ light)
    rgb = hits.colour[keep] * (0.45 + 0.55 * lambert)[:, None] * gain
    rgb = np.clip(rgb + rng.normal(0, noise, rgb.shape), 0, 1) ** gamma
    return (rgb * 255).round().astype(np.uint8)


def depth_camera(
    scene: Scene,
    rng: np.random.Generator,
    *,
    views: int = 4,
    width: int = 64,
    height: int = 48,
    fov_deg: float = 70.0,
    max_range: float = 5.0,
    noise_k: float = 0.004,
) -> Scan:
    """Fused RGB-D views from random poses inside the room (ScanNet-like): range-limited, depth
    noise σ = noise_k·d² along each ray."""
    x0, y0, x1, y1 = scene.free_area
    xyz, rgb, labels = [], [], []
    focal = 0.5 * width / np.tan(np.radians(fov_deg) / 2)
    u, v = np.meshgrid(np.arange(width) - width / 2 + 0.5, np.arange(height) - height / 2 + 0.5)
    cam = _unit(np.stack([np.full(u.size, focal), -u.ravel(), -v.ravel()], 1))  # x forward, y left, z up
    for _ in range(views):
        origin = np.array([rng.uniform(x0, x1), rng.uniform(y0, y1), rng.uniform(1.2, 1.7)])
        yaw, pitch = rng.uniform(0, 2 * np.pi), np.radians(rng.uniform(-35, -10))
        cy, sy, cp, sp = np.cos(yaw), np.sin(yaw), np.cos(pitch), np.sin(pitch)
        rot = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]]) @ np.array([[cp, 0, -sp], [0, 1, 0], [sp, 0, cp]])
        dirs = cam @ rot.T
        dirs = _unit(dirs + rng.normal(0, 0.002, dirs.shape))  # sub-pixel jitter so views do not alias
        hits = cast(scene, origin, dirs)
        keep = np.isfinite(hits.t) & (hits.t <= max_range) & (hits.label >= 0)
        t = hits.t[keep] + rng.normal(0, 1, keep.sum()) * noise_k * hits.t[keep] ** 2
        xyz.append(origin + t[:, None] * dirs[keep])
        rgb.append(_shade(hits, dirs, keep, rng, gain=np.array([1.0, 1.0, 1.0]), gamma=1.0, noise=0.03))
        labels.append(hits.label[keep])
    points = np.concatenate(xyz)
    inside = _inside(scene, points)
    return Scan(
        points[inside].astype(np.float32),
        np.concatenate(rgb)[inside],
        None,
        np.concatenate(labels)[inside].astype(np.int32),
    )


def panorama(
    scene: Scene, rng: np.random.Generator, *, width: int = 256, height: int = 96, noise: float = 0.002
) -> Scan:
    """One clean equirectangular scan (elevation −60°…+70°) from near the room's centre, with a
    warm white balance and a gamma curve: same rooms as the depth camera, a different look."""
    x0, y0, x1, y1 = scene.free_area
    origin = np.array(
        [rng.uniform(x0 + (x1 - x0) / 3, x1 - (x1 - x0) / 3), rng.uniform(y0 + (y1 - y0) / 3, y1 - (y1 - y0) / 3), 1.5]
    )
    az = np.linspace(0, 2 * np.pi, width, endpoint=False) + rng.uniform(0, 2 * np.pi / width)
    el = np.radians(np.linspace(-60, 70, height))
    a, e = np.meshgrid(az, el)
    dirs = np.stack([np.cos(e) * np.cos(a), np.cos(e) * np.sin(a), np.sin(e)], -1).reshape(-1, 3)
    hits = cast(scene, origin, dirs)
    keep = np.isfinite(hits.t) & (hits.t < 20) & (hits.label >= 0)
    t = hits.t[keep] + rng.normal(0, noise, keep.sum())
    rgb = _shade(hits, dirs, keep, rng, gain=np.array([1.1, 0.95, 0.75]), gamma=0.7, noise=0.01)
    points = origin + t[:, None] * dirs[keep]
    inside = _inside(scene, points)
    return Scan(points[inside].astype(np.float32), rgb[inside], None, hits.label[keep][inside].astype(np.int32))


def lidar(
    scene: Scene,
    rng: np.random.Generator,
    *,
    beams: int = 64,
    azimuth_steps: int = 512,
    fov_up: float = 3.0,
    fov_down: float = -25.0,
    mount_height: float = 1.8,
    max_range: float = 45.0,
    noise: float = 0.02,
    dropout: float = 0.1,
) -> Scan:
    """A spinning LiDAR: ``beams`` rings × ``azimuth_steps`` firings, from the road at
    ``mount_height``. Intensity = reflectivity × (0.3 + 0.7·|cos θ|) × range fall-off + noise."""
    x0, y0, x1, y1 = scene.free_area
    origin = np.array([rng.uniform(x0, x1), rng.uniform(y0, y1), mount_height])
    el = np.radians(np.linspace(fov_down, fov_up, beams)) + rng.normal(0, 0.0005, beams)
    az = np.linspace(0, 2 * np.pi, azimuth_steps, endpoint=False) + rng.uniform(0, 2 * np.pi / azimuth_steps)
    e, a = np.meshgrid(el, az, indexing="ij")
    dirs = np.stack([np.cos(e) * np.cos(a), np.cos(e) * np.sin(a), np.sin(e)], -1).reshape(-1, 3)
    hits = cast(scene, origin, dirs)
    cos = np.abs((hits.normal * dirs).sum(1))
    # Dropout: uniform, plus more at grazing incidence and long range (weak returns).
    p_drop = dropout + 0.3 * (1 - cos) ** 4 + 0.2 * np.clip(hits.t / max_range, 0, 1) ** 2
    keep = np.isfinite(hits.t) & (hits.t <= max_range) & (hits.label >= 0) & (rng.random(len(dirs)) > p_drop)
    t = hits.t[keep] + rng.normal(0, noise, keep.sum())
    refl = np.array([REFLECTIVITY.get(name, 0.4) for name in LABELS], np.float32)
    inten = refl[hits.label[keep]] * (0.3 + 0.7 * cos[keep]) * np.exp(-hits.t[keep] / 80.0)
    inten = np.clip(inten + rng.normal(0, 0.03, keep.sum()), 0, 1).astype(np.float32)
    return Scan((origin + t[:, None] * dirs[keep]).astype(np.float32), None, inten, hits.label[keep].astype(np.int32))
