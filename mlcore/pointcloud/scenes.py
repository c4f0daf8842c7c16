"""Procedural scenes for the offline "SynMix" benchmark (method card, section 4): indoor rooms and
outdoor streets built from analytic primitives, every primitive labelled by construction.

A :class:`Scene` is a set of axis-aligned boxes, vertical cylinders and spheres above a ground
plane z = 0, each with a label from one master label space (:data:`LABELS`) and a colour. The
sensors in :mod:`mlcore.pointcloud.sensors` ray-cast it, so occlusion, density fall-off and
sensor patterns come from the geometry rather than from sampling surfaces uniformly.

Everything is seeded: the same ``numpy.random.Generator`` state gives the same scene.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mlcore.pointcloud.labels import LABELS

LABEL_ID: dict[str, int] = {name: i for i, name in enumerate(LABELS)}
INDOOR: tuple[str, ...] = ("floor", "wall", "ceiling", "table", "chair", "cabinet", "clutter")
OUTDOOR: tuple[str, ...] = ("road", "sidewalk", "building", "car", "pole", "vegetation", "pedestrian")

#: A base colour per label (RGB in [0, 1]); objects get a random tint around it.
BASE_COLOUR: dict[str, tuple[float, float, float]] = {
    "floor": (0.55, 0.42, 0.30),
    "wall": (0.85, 0.84, 0.80),
    "ceiling": (0.92, 0.92, 0.92),
    "table": (0.45, 0.30, 0.18),
    "chair": (0.30, 0.35, 0.55),
    "cabinet": (0.70, 0.62, 0.50),
    "clutter": (0.75, 0.25, 0.25),
    "road": (0.25, 0.25, 0.27),
    "sidewalk": (0.60, 0.58, 0.55),
    "building": (0.65, 0.50, 0.42),
    "car": (0.20, 0.30, 0.70),
    "pole": (0.40, 0.40, 0.42),
    "vegetation": (0.20, 0.50, 0.15),
    "pedestrian": (0.60, 0.45, 0.35),
}
#: LiDAR reflectivity per label in [0, 1] (road paint and car bodies are bright, foliage dull).
REFLECTIVITY: dict[str, float] = {
    "road": 0.15,
    "sidewalk": 0.35,
    "building": 0.45,
    "car": 0.80,
    "pole": 0.60,
    "vegetation": 0.25,
    "pedestrian": 0.30,
}


@dataclass
class Scene:
    """Primitives with labels (master ids) and colours; the ground plane z = 0 has ``ground_label``."""

    kind: str  #: "indoor" or "outdoor"
    ground_label: int
    ground_colour: tuple[float, float, float]
    boxes: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)  # (lo[3], hi[3])
    box_labels: list[int] = field(default_factory=list)
    box_colours: list[tuple[float, float, float]] = field(default_factory=list)
    cylinders: list[tuple[float, float, float, float, float]] = field(default_factory=list)  # cx, cy, z0, z1, r
    cylinder_labels: list[int] = field(default_factory=list)
    cylinder_colours: list[tuple[float, float, float]] = field(default_factory=list)
    spheres: list[tuple[float, float, float, float]] = field(default_factory=list)  # cx, cy, cz, r
    sphere_labels: list[int] = field(default_factory=list)
    sphere_colours: list[tuple[float, float, float]] = field(default_factory=list)
    #: Where sensors may stand: (x0, y0, x1, y1) of the free floor area, and the room height (indoor).
    free_area: tuple[float, float, float, float] = (0.0, 0.0, 1.0, 1.0)
    height: float = 3.0
    #: Indoor scans keep only points inside these xy bounds (rays leaving through doors and windows
    #: would otherwise hit the endless ground plane).
    bounds: tuple[float, float, float, float] | None = None

    def _tint(self, rng: np.random.Generator, label: str, spread: float) -> tuple[float, float, float]:
        base = np.array(BASE_COLOUR[label])
        return tuple(np.clip(base + rng.normal(0, spread, 3), 0, 1).tolist())  # type: ignore[return-value]

    def box(self, rng: np.random.Generator, label: str, lo: tuple, hi: tuple, spread: float = 0.06) -> None:
        lo_a, hi_a = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
        if np.any(hi_a - lo_a <= 1e-4):
            return  # a degenerate piece (e.g. a wall segment of zero width next to an opening)
        self.boxes.append((np.minimum(lo_a, hi_a), np.maximum(lo_a, hi_a)))
        self.box_labels.append(LABEL_ID[label])
        self.box_colours.append(self._tint(rng, label, spread))

    def cylinder(
        self, rng: np.random.Generator, label: str, cx: float, cy: float, z0: float, z1: float, r: float
    ) -> None:
        self.cylinders.append((cx, cy, z0, z1, r))
        self.cylinder_labels.append(LABEL_ID[label])
        self.cylinder_colours.append(self._tint(rng, label, 0.05))

    def sphere(self, rng: np.random.Generator, label: str, cx: float, cy: float, cz: float, r: float) -> None:
        self.spheres.append((cx, cy, cz, r))
        self.sphere_labels.append(LABEL_ID[label])
        self.sphere_colours.append(self._tint(rng, label, 0.08))

    @property
    def num_primitives(self) -> int:
        return len(self.boxes) + len(self.cylinders) + len(self.spheres)


# -- indoor rooms ------------------------------------------------------------------------------------


def _wall(
    scene: Scene, rng: np.random.Generator, axis: int, fixed: float, length: float, height: float, openings: int
) -> None:
    """A wall of thickness 0.1 along ``axis`` (0: x, 1: y) at the other coordinate ``fixed``, cut by
    ``openings`` doors or windows: full-height pieces between openings, a lintel above each and a
    sill below windows."""
    thickness = 0.1
    cuts: list[tuple[float, float, float, float]] = []  # start, end, bottom, top of each opening
    slots = np.sort(rng.uniform(0.6, max(0.7, length - 1.8), size=openings))
    last_end = 0.0
    for start in slots:
        if start < last_end + 0.4:
            continue
        door = rng.random() < 0.5
        width = rng.uniform(0.8, 1.0) if door else rng.uniform(0.8, 1.8)
        end = min(start + width, length - 0.3)
        bottom, top = (0.0, 2.05) if door else (rng.uniform(0.8, 1.0), rng.uniform(1.9, 2.2))
        cuts.append((float(start), float(end), bottom, min(top, height - 0.1)))
        last_end = end

    def piece(a: float, b: float, z0: float, z1: float) -> None:
        lo = [0.0, 0.0, z0]
        hi = [0.0, 0.0, z1]
        lo[axis], hi[axis] = a, b
        lo[1 - axis], hi[1 - axis] = fixed - thickness / 2, fixed + thickness / 2
        scene.box(rng, "wall", tuple(lo), tuple(hi), spread=0.02)

    cursor = 0.0
    for start, end, bottom, top in cuts:
        piece(cursor, start, 0.0, height)
        if bottom > 0:
            piece(start, end, 0.0, bottom)
        piece(start, end, top, height)
        cursor = end
    piece(cursor, length, 0.0, height)


def _table(scene: Scene, rng: np.random.Generator, x: float, y: float, w: float, d: float) -> None:
    top = rng.uniform(0.70, 0.78)
    scene.box(rng, "table", (x, y, top - 0.04), (x + w, y + d, top))
    for lx, ly in ((x, y), (x + w - 0.05, y), (x, y + d - 0.05), (x + w - 0.05, y + d - 0.05)):
        scene.box(rng, "table", (lx, ly, 0.0), (lx + 0.05, ly + 0.05, top - 0.04))
    for _ in range(rng.integers(0, 4)):  # things on the table
        s = rng.uniform(0.08, 0.25)
        cx, cy = rng.uniform(x + s, x + w - s), rng.uniform(y + s, y + d - s)
        if rng.random() < 0.5:
            scene.box(
                rng,
                "clutter",
                (cx - s / 2, cy - s / 2, top),
                (cx + s / 2, cy + s / 2, top + rng.uniform(0.05, 0.3)),
                0.25,
            )
        else:
            scene.sphere(rng, "clutter", cx, cy, top + s / 2, s / 2)


def _chair(scene: Scene, rng: np.random.Generator, x: float, y: float) -> None:
    s = rng.uniform(0.40, 0.50)
    seat = rng.uniform(0.42, 0.48)
    scene.box(rng, "chair", (x, y, seat - 0.05), (x + s, y + s, seat))
    side = rng.integers(4)  # which edge carries the back rest
    back = [
        (x, y, x + s, y + 0.05),
        (x, y + s - 0.05, x + s, y + s),
        (x, y, x + 0.05, y + s),
        (x + s - 0.05, y, x + s, y + s),
    ][side]
    scene.box(rng, "chair", (back[0], back[1], seat), (back[2], back[3], seat + rng.uniform(0.35, 0.5)))
    for lx, ly in ((x, y), (x + s - 0.04, y), (x, y + s - 0.04), (x + s - 0.04, y + s - 0.04)):
        scene.box(rng, "chair", (lx, ly, 0.0), (lx + 0.04, ly + 0.04, seat - 0.05))


def room(rng: np.random.Generator, *, size: tuple[float, float] = (4.0, 7.5), furniture: float = 1.0) -> Scene:
    """An indoor room: floor, ceiling, four walls with doors and windows, tables with chairs,
    cabinets against the walls and clutter on tables and floor. ``size`` bounds the side lengths
    in metres; ``furniture`` scales how much furniture there is."""
    w, d = rng.uniform(*size, size=2)
    h = rng.uniform(2.6, 3.1)
    scene = Scene("indoor", LABEL_ID["floor"], BASE_COLOUR["floor"], free_area=(0.6, 0.6, w - 0.6, d - 0.6), height=h)
    scene.bounds = (-0.15, -0.15, w + 0.15, d + 0.15)
    scene.box(rng, "ceiling", (-0.1, -0.1, h), (w + 0.1, d + 0.1, h + 0.1), spread=0.02)
    for axis, fixed, length in ((0, 0.0, w), (0, d, w), (1, 0.0, d), (1, w, d)):
        _wall(scene, rng, axis, fixed, length, h, openings=int(rng.integers(0, 3)))
    area = w * d
    for _ in range(int(rng.poisson(furniture * area / 12) + 1)):  # cabinets along walls
        cw, cd, ch = rng.uniform(0.6, 1.6), rng.uniform(0.35, 0.6), rng.uniform(0.8, 2.1)
        side = rng.integers(4)
        if side == 0:
            x, y = rng.uniform(0.05, max(0.1, w - cw - 0.05)), 0.05
            scene.box(rng, "cabinet", (x, y, 0), (x + cw, y + cd, ch))
        elif side == 1:
            x, y = rng.uniform(0.05, max(0.1, w - cw - 0.05)), d - cd - 0.05
            scene.box(rng, "cabinet", (x, y, 0), (x + cw, y + cd, ch))
        elif side == 2:
            x, y = 0.05, rng.uniform(0.05, max(0.1, d - cw - 0.05))
            scene.box(rng, "cabinet", (x, y, 0), (x + cd, y + cw, ch))
        else:
            x, y = w - cd - 0.05, rng.uniform(0.05, max(0.1, d - cw - 0.05))
            scene.box(rng, "cabinet", (x, y, 0), (x + cd, y + cw, ch))
    for _ in range(int(rng.poisson(furniture * area / 14) + 1)):  # tables with chairs around
        tw, td = rng.uniform(0.8, 1.8), rng.uniform(0.6, 1.0)
        x, y = rng.uniform(0.8, max(0.9, w - tw - 0.8)), rng.uniform(0.8, max(0.9, d - td - 0.8))
        _table(scene, rng, x, y, tw, td)
        for _ in range(rng.integers(1, 4)):
            edge = rng.integers(4)
            cx = x + rng.uniform(0, tw - 0.4) if edge < 2 else (x - 0.55 if edge == 2 else x + tw + 0.1)
            cy = (y - 0.55 if edge == 0 else y + td + 0.1) if edge < 2 else y + rng.uniform(0, td - 0.4)
            _chair(scene, rng, cx, cy)
    for _ in range(int(rng.poisson(furniture * area / 6))):  # floor clutter: boxes, bins, balls
        s = rng.uniform(0.15, 0.5)
        cx, cy = rng.uniform(0.3, w - 0.3), rng.uniform(0.3, d - 0.3)
        if rng.random() < 0.6:
            scene.box(
                rng, "clutter", (cx, cy, 0), (cx + s, cy + s * rng.uniform(0.5, 1.5), s * rng.uniform(0.5, 2)), 0.25
            )
        else:
            scene.cylinder(rng, "clutter", cx, cy, 0.0, s * 1.5, s / 2)
    return scene


# -- outdoor streets ---------------------------------------------------------------------------------


def street(rng: np.random.Generator, *, length: float = 70.0) -> Scene:
    """A straight street along x: road (the ground), raised sidewalks on both sides, buildings
    with gaps behind them, parked and driving cars, poles, trees and pedestrians."""
    road_half = rng.uniform(3.5, 6.5)
    walk = rng.uniform(2.0, 4.0)
    scene = Scene("outdoor", LABEL_ID["road"], BASE_COLOUR["road"], free_area=(-8, -road_half + 1, 8, road_half - 1))
    half = length / 2
    for sign in (-1, 1):
        y0 = sign * road_half
        y1 = sign * (road_half + walk)
        scene.box(rng, "sidewalk", (-half, min(y0, y1), 0.0), (half, max(y0, y1), 0.15), spread=0.03)
        x = -half
        while x < half:  # a row of buildings with gaps
            bw = rng.uniform(6, 18)
            depth = rng.uniform(8, 14)
            setback = rng.uniform(0, 1.5)
            yb0 = sign * (road_half + walk + setback)
            yb1 = sign * (road_half + walk + setback + depth)
            scene.box(rng, "building", (x, min(yb0, yb1), 0.0), (x + bw, max(yb0, yb1), rng.uniform(5, 22)), spread=0.1)
            x += bw + (rng.uniform(1, 5) if rng.random() < 0.5 else 0.0)
        for _ in range(rng.poisson(length / 12)):  # poles
            px = rng.uniform(-half, half)
            scene.cylinder(rng, "pole", px, sign * (road_half + 0.4), 0.15, rng.uniform(4, 8), rng.uniform(0.08, 0.15))
        for _ in range(rng.poisson(length / 10)):  # trees: trunk and crown
            px = rng.uniform(-half, half)
            py = sign * (road_half + walk * rng.uniform(0.5, 0.9))
            top = rng.uniform(2.0, 3.5)
            scene.cylinder(rng, "vegetation", px, py, 0.15, top, rng.uniform(0.12, 0.25))
            scene.sphere(rng, "vegetation", px, py, top + rng.uniform(0.8, 1.5), rng.uniform(1.0, 2.2))
        for _ in range(rng.poisson(length / 8)):  # pedestrians on the sidewalk
            px = rng.uniform(-half, half)
            py = sign * (road_half + walk * rng.uniform(0.2, 0.8))
            height = rng.uniform(1.5, 1.9)
            scene.cylinder(rng, "pedestrian", px, py, 0.15, 0.15 + height - 0.25, rng.uniform(0.18, 0.28))
            scene.sphere(rng, "pedestrian", px, py, 0.15 + height - 0.12, 0.12)
        for _ in range(rng.poisson(length / 9)):  # cars: parked at the kerb or in a lane
            cx = rng.uniform(-half, half)
            lane = road_half - 1.2 if rng.random() < 0.6 else rng.uniform(1.2, max(1.3, road_half - 2.0))
            cy = sign * lane
            cl, cw = rng.uniform(3.8, 4.8), rng.uniform(1.7, 1.9)
            body = rng.uniform(0.7, 0.9)
            colour_spread = 0.3
            scene.box(
                rng, "car", (cx - cl / 2, cy - cw / 2, 0.25), (cx + cl / 2, cy + cw / 2, 0.25 + body), colour_spread
            )
            scene.box(
                rng,
                "car",
                (cx - cl / 4, cy - cw / 2 + 0.1, 0.25 + body),
                (cx + cl / 4, cy + cw / 2 - 0.1, 0.25 + body + rng.uniform(0.45, 0.6)),
                colour_spread,
            )
            for wx in (cx - cl / 3, cx + cl / 3):  # wheels, part of the car
                scene.box(rng, "car", (wx - 0.3, cy - cw / 2, 0.0), (wx + 0.3, cy + cw / 2, 0.25), 0.05)
    return scene
