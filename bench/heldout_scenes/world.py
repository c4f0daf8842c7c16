"""A held-out scene (:class:`World`) and the small geometry its generators build it with.

- :class:`Frame`: an object's own frame (an origin on the floor and a yaw), so a sofa or a bus is
  written in its own coordinates (x across, y deep, z up) and lands at any place and angle;
- :class:`Footprint`: a floor plan as a union of axis-aligned rectangles (an L-shaped room is two);
- :class:`Occupancy`: the turned rectangles already taken on the floor, so furniture and street
  furniture do not overlap (separating-axis test on rectangles).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bench.heldout_scenes.shapes import Box, Cylinder, Ellipsoid, Part


@dataclass
class World:
    """A scene: its parts and what its sensors need to know about it."""

    kind: str  #: "indoor" (a room) or "outdoor" (a street)
    parts: list[Part] = field(default_factory=list)
    #: Indoor: the floor plan, whose inside (and z between floor and ceiling) is all a scan keeps.
    footprint: Footprint | None = None
    height: float = 0.0
    #: Indoor: how far outside the floor plan a point may lie and be kept (into the walls' thickness,
    #: so door reveals and window boards stay, while the walls' outer faces go).
    crop_margin: float = 0.0
    #: Where a scanner may stand (x, y): free floor indoors, the road's lanes outdoors.
    stations: list[tuple[float, float]] = field(default_factory=list)
    #: Light sources for the colour model: ceiling lamps indoors (x, y, z), windows as (x, y, z) too.
    lamps: list[tuple[float, float, float]] = field(default_factory=list)
    windows: list[tuple[float, float, float]] = field(default_factory=list)
    #: Outdoor: the street runs along x from −half_length to +half_length.
    half_length: float = 0.0
    road_half_width: float = 0.0

    def add(self, solid: Box | Cylinder | Ellipsoid, label: str, material: str, *, porous: bool = False) -> None:
        self.parts.append(Part(solid, label, material, porous))

    def labels(self) -> set[str]:
        return {p.label for p in self.parts}


@dataclass(frozen=True)
class Frame:
    """An object's frame: ``origin`` (x, y, z of its local zero) and ``yaw`` about the vertical."""

    origin: tuple[float, float, float]
    yaw: float = 0.0

    def point(self, x: float, y: float, z: float) -> tuple[float, float, float]:
        c, s = np.cos(self.yaw), np.sin(self.yaw)
        ox, oy, oz = self.origin
        return (ox + c * x - s * y, oy + s * x + c * y, oz + z)

    def box(self, x: tuple[float, float], y: tuple[float, float], z: tuple[float, float], yaw: float = 0.0) -> Box:
        """The box spanning local ``x``, ``y``, ``z`` ranges (turned by a further local ``yaw`` about its centre)."""
        centre = self.point((x[0] + x[1]) / 2, (y[0] + y[1]) / 2, (z[0] + z[1]) / 2)
        half = (abs(x[1] - x[0]) / 2, abs(y[1] - y[0]) / 2, abs(z[1] - z[0]) / 2)
        return Box(centre, half, self.yaw + yaw)

    def cylinder(self, start: tuple[float, float, float], end: tuple[float, float, float], radius: float) -> Cylinder:
        return Cylinder(self.point(*start), self.point(*end), radius)

    def ellipsoid(self, centre: tuple[float, float, float], radii: tuple[float, float, float]) -> Ellipsoid:
        return Ellipsoid(self.point(*centre), radii, self.yaw)


@dataclass
class Footprint:
    """A floor plan: the union of rectangles (x0, y0, x1, y1)."""

    rects: list[tuple[float, float, float, float]]

    def contains(self, xy: np.ndarray, margin: float = 0.0) -> np.ndarray:
        inside = np.zeros(len(xy), bool)
        for x0, y0, x1, y1 in self.rects:
            inside |= (
                (xy[:, 0] >= x0 - margin)
                & (xy[:, 0] <= x1 + margin)
                & (xy[:, 1] >= y0 - margin)
                & (xy[:, 1] <= y1 + margin)
            )
        return inside

    def area(self) -> float:
        return float(sum((x1 - x0) * (y1 - y0) for x0, y0, x1, y1 in self.rects))

    def bounds(self) -> tuple[float, float, float, float]:
        r = np.asarray(self.rects)
        return float(r[:, 0].min()), float(r[:, 1].min()), float(r[:, 2].max()), float(r[:, 3].max())


def rectangle_corners(cx: float, cy: float, hx: float, hy: float, yaw: float) -> np.ndarray:
    c, s = np.cos(yaw), np.sin(yaw)
    local = np.array([[-hx, -hy], [hx, -hy], [hx, hy], [-hx, hy]])
    return local @ np.array([[c, s], [-s, c]]) + np.array([cx, cy])


def _separated(a: np.ndarray, b: np.ndarray) -> bool:
    for poly in (a, b):
        for k in range(4):
            edge = poly[(k + 1) % 4] - poly[k]
            axis = np.array([-edge[1], edge[0]])
            pa, pb = a @ axis, b @ axis
            if pa.max() <= pb.min() or pb.max() <= pa.min():
                return True
    return False


@dataclass
class Occupancy:
    """Turned rectangles taken on the ground plane."""

    taken: list[np.ndarray] = field(default_factory=list)

    def free(self, corners: np.ndarray) -> bool:
        return all(_separated(corners, other) for other in self.taken)

    def take(self, corners: np.ndarray) -> None:
        self.taken.append(corners)
