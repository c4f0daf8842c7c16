"""Solid primitives of the held-out family, each able to be surface-sampled and ray-cast.

Three solids, written for this family (numpy only):

- :class:`Box`: a box turned by a yaw about the vertical axis (furniture and vehicles stand at any
  angle, not only along the room's or street's axes);
- :class:`Cylinder`: a cylinder between two arbitrary end points (tilted legs, the horizontal arm of
  a street light, a bicycle's wheels, a tree's branches);
- :class:`Ellipsoid`: an ellipsoid turned by a yaw (cushions, tree crowns, heads, vehicle cabins).

Every solid answers four questions: its surface area, uniform points (and outward normals) on its
surface, which points lie inside it (so faces hidden inside a neighbouring solid are dropped), and
where a ray first enters it. A scene is a list of :class:`Part`: a solid with a master label and a
material name.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Points on a face hidden by this much inside another solid are dropped (coplanar contact faces too).
CONTACT_M = 2e-3


def _yaw_matrix(yaw: float) -> np.ndarray:
    c, s = np.cos(yaw), np.sin(yaw)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


@dataclass(frozen=True)
class Box:
    """Centre, half extents along its own axes, and a yaw (radians) about the vertical axis."""

    centre: tuple[float, float, float]
    half: tuple[float, float, float]
    yaw: float = 0.0

    @property
    def rotation(self) -> np.ndarray:
        return _yaw_matrix(self.yaw)

    def area(self) -> float:
        hx, hy, hz = self.half
        return 8.0 * (hx * hy + hx * hz + hy * hz)

    def bounding_sphere(self) -> tuple[np.ndarray, float]:
        return np.asarray(self.centre, float), float(np.linalg.norm(self.half))

    def sample(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        h = np.asarray(self.half, float)
        # Face k ∈ 0..5: axis k // 2, sign −/+; a face's area is the product of the other two extents.
        face_area = np.repeat([h[1] * h[2], h[0] * h[2], h[0] * h[1]], 2)
        face = rng.choice(6, size=n, p=face_area / face_area.sum())
        axis, sign = face // 2, np.where(face % 2 == 0, -1.0, 1.0)
        local = rng.uniform(-1.0, 1.0, (n, 3)) * h
        local[np.arange(n), axis] = sign * h[axis]
        normal = np.zeros((n, 3))
        normal[np.arange(n), axis] = sign
        rot = self.rotation
        return local @ rot.T + np.asarray(self.centre), normal @ rot.T

    def contains(self, p: np.ndarray, margin: float = CONTACT_M) -> np.ndarray:
        local = (p - np.asarray(self.centre)) @ self.rotation
        return np.all(np.abs(local) <= np.asarray(self.half) + margin, axis=1)

    def intersect(self, origin: np.ndarray, dirs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Entry distance along each unit ray (inf: missed, or the ray starts inside) and the normal
        of the face it enters through."""
        origin = np.broadcast_to(origin, dirs.shape)
        rot = self.rotation
        o = (origin - np.asarray(self.centre)) @ rot
        d = dirs @ rot
        h = np.asarray(self.half)
        with np.errstate(divide="ignore", invalid="ignore"):
            inv = 1.0 / np.where(np.abs(d) < 1e-12, 1e-12, d)
            lower = (-h - o) * inv
            upper = (h - o) * inv
        t_in_axes = np.minimum(lower, upper)
        t_out = np.maximum(lower, upper).min(axis=1)
        entry_axis = t_in_axes.argmax(axis=1)
        t_in = t_in_axes.max(axis=1)
        t = np.where((t_in <= t_out) & (t_in > 1e-6), t_in, np.inf)
        rows = np.arange(len(d))
        normal = np.zeros_like(d)
        normal[rows, entry_axis] = -np.sign(d[rows, entry_axis])
        return t, normal @ rot.T


@dataclass(frozen=True)
class Cylinder:
    """A solid cylinder from ``start`` to ``end`` (any direction) of radius ``radius``."""

    start: tuple[float, float, float]
    end: tuple[float, float, float]
    radius: float

    def _frame(self) -> tuple[np.ndarray, float, np.ndarray, np.ndarray]:
        a = np.asarray(self.end, float) - np.asarray(self.start, float)
        length = float(np.linalg.norm(a))
        axis = a / length
        helper = np.array([1.0, 0.0, 0.0]) if abs(axis[0]) < 0.9 else np.array([0.0, 1.0, 0.0])
        u = np.cross(axis, helper)
        u /= np.linalg.norm(u)
        return axis, length, u, np.cross(axis, u)

    def area(self) -> float:
        _, length, _, _ = self._frame()
        return 2 * np.pi * self.radius * length + 2 * np.pi * self.radius**2

    def bounding_sphere(self) -> tuple[np.ndarray, float]:
        _, length, _, _ = self._frame()
        centre = (np.asarray(self.start, float) + np.asarray(self.end, float)) / 2
        return centre, float(np.hypot(length / 2, self.radius))

    def sample(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        axis, length, u, v = self._frame()
        r = self.radius
        side_share = length / (length + r)  # 2πrL against 2πr² for both caps
        on_side = rng.random(n) < side_share
        angle = rng.uniform(0, 2 * np.pi, n)
        radial = np.cos(angle)[:, None] * u + np.sin(angle)[:, None] * v
        along = np.where(on_side, rng.uniform(0, length, n), np.where(rng.random(n) < 0.5, 0.0, length))
        dist = np.where(on_side, r, r * np.sqrt(rng.random(n)))  # uniform over a cap's disc
        points = np.asarray(self.start) + along[:, None] * axis + dist[:, None] * radial
        cap_normal = np.where((along == 0.0)[:, None], -axis, axis)
        normal = np.where(on_side[:, None], radial, cap_normal)
        return points, normal

    def contains(self, p: np.ndarray, margin: float = CONTACT_M) -> np.ndarray:
        axis, length, _, _ = self._frame()
        rel = p - np.asarray(self.start)
        s = rel @ axis
        radial = np.linalg.norm(rel - s[:, None] * axis, axis=1)
        return (s >= -margin) & (s <= length + margin) & (radial <= self.radius + margin)

    def intersect(self, origin: np.ndarray, dirs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        axis, length, _, _ = self._frame()
        rel = np.broadcast_to(origin, dirs.shape) - np.asarray(self.start)
        # Components perpendicular to the axis: |rel⊥ + t·d⊥|² = r² is the side's quadratic.
        d_along = dirs @ axis
        o_along = rel @ axis
        d_perp = dirs - d_along[:, None] * axis
        o_perp = rel - o_along[:, None] * axis
        a = (d_perp**2).sum(1)
        b = 2 * (d_perp * o_perp).sum(1)
        c = (o_perp**2).sum(1) - self.radius**2
        disc = b * b - 4 * a * c
        with np.errstate(divide="ignore", invalid="ignore"):
            t_side = (-b - np.sqrt(np.maximum(disc, 0.0))) / (2 * a)
        s_side = o_along + t_side * d_along
        t_side = np.where(
            (disc > 0) & (a > 1e-12) & (t_side > 1e-6) & (s_side >= 0) & (s_side <= length), t_side, np.inf
        )
        best = t_side
        normal = d_perp * np.where(np.isfinite(t_side), t_side, 0.0)[:, None] + o_perp
        for s_cap, sign in ((0.0, -1.0), (length, 1.0)):
            with np.errstate(divide="ignore", invalid="ignore"):
                t_cap = (s_cap - o_along) / np.where(np.abs(d_along) < 1e-12, 1e-12, d_along)
            on_cap = rel + t_cap[:, None] * dirs - s_cap * axis
            inside = ((on_cap - (on_cap @ axis)[:, None] * axis) ** 2).sum(1) <= self.radius**2
            t_cap = np.where(inside & (t_cap > 1e-6) & (sign * d_along < 0), t_cap, np.inf)
            closer = t_cap < best
            best = np.where(closer, t_cap, best)
            normal = np.where(closer[:, None], sign * axis, normal)
        norm = np.linalg.norm(normal, axis=1, keepdims=True)
        return best, normal / np.maximum(norm, 1e-12)


@dataclass(frozen=True)
class Ellipsoid:
    """Centre, semi-axes along its own axes, and a yaw about the vertical axis."""

    centre: tuple[float, float, float]
    radii: tuple[float, float, float]
    yaw: float = 0.0

    def area(self) -> float:
        # Knud Thomsen's approximation (p = 1.6075), within about 1% for any semi-axes.
        a, b, c = self.radii
        p = 1.6075
        return 4 * np.pi * (((a * b) ** p + (a * c) ** p + (b * c) ** p) / 3) ** (1 / p)

    def bounding_sphere(self) -> tuple[np.ndarray, float]:
        return np.asarray(self.centre, float), float(max(self.radii))

    def sample(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Uniform over the surface: directions on the unit sphere stretched to the ellipsoid, each
        kept with probability proportional to how much the stretch enlarges the area around it."""
        r = np.asarray(self.radii, float)
        out_p, out_n, have = [], [], 0
        weight_max = max(r[1] * r[2], r[0] * r[2], r[0] * r[1])
        while have < n:
            m = max(64, 2 * (n - have))
            u = rng.normal(size=(m, 3))
            u /= np.linalg.norm(u, axis=1, keepdims=True)
            weight = np.sqrt(((u * r[[1, 0, 0]] * r[[2, 2, 1]]) ** 2).sum(1))
            keep = rng.random(m) * weight_max < weight
            out_p.append(u[keep] * r)
            out_n.append(u[keep] / r)
            have += int(keep.sum())
        local = np.concatenate(out_p)[:n]
        normal = np.concatenate(out_n)[:n]
        normal /= np.linalg.norm(normal, axis=1, keepdims=True)
        rot = _yaw_matrix(self.yaw)
        return local @ rot.T + np.asarray(self.centre), normal @ rot.T

    def contains(self, p: np.ndarray, margin: float = CONTACT_M) -> np.ndarray:
        local = (p - np.asarray(self.centre)) @ _yaw_matrix(self.yaw)
        return (((local / (np.asarray(self.radii) + margin)) ** 2).sum(1)) <= 1.0

    def intersect(self, origin: np.ndarray, dirs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        origin = np.broadcast_to(origin, dirs.shape)
        rot = _yaw_matrix(self.yaw)
        r = np.asarray(self.radii, float)
        o = ((origin - np.asarray(self.centre)) @ rot) / r
        d = (dirs @ rot) / r
        a = (d**2).sum(1)
        b = 2 * (o * d).sum(1)
        c = (o**2).sum(1) - 1.0
        disc = b * b - 4 * a * c
        t = (-b - np.sqrt(np.maximum(disc, 0.0))) / (2 * a)
        t = np.where((disc > 0) & (t > 1e-6), t, np.inf)
        hit = o + np.where(np.isfinite(t), t, 0.0)[:, None] * d
        normal = (hit / r) @ rot.T
        return t, normal / np.maximum(np.linalg.norm(normal, axis=1, keepdims=True), 1e-12)


Solid = Box | Cylinder | Ellipsoid


@dataclass(frozen=True)
class Part:
    """One solid of a scene: its master label (a name of :data:`mlcore.pointcloud.labels.LABELS`),
    its material (a key of the family's material table) and whether it is foliage-like (rays and
    samples scatter into it instead of stopping at its hull)."""

    solid: Solid
    label: str
    material: str
    porous: bool = False
