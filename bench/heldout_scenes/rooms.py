"""Rooms of the held-out family: layouts and furniture that SynMix's generator never makes.

A room is rectangular or L-shaped (a rectangle with a corner notch), 2.4–3.4 m high, with walls of
varying thickness cut by doors (with casings) and windows (with boards and, below some, radiators),
skirting boards, and an accent wall now and then. Furniture stands at any angle, against a wall or
free: open shelves filled with books, wardrobes, sideboards on legs, sofas with rounded arms and
cushions, beds with headboards and pillows, round tables on a pedestal or splayed legs with seats
around them, desks with panel legs and a monitor, four-legged chairs, office chairs on a five-star
base, stools; and plants, floor lamps, rugs, pictures and things on the floor.

Labels (SynMix's master classes; indoor classes only):

- ``floor``: the floor and rugs (a floor covering); ``ceiling``: the ceiling;
- ``wall``: walls, skirting boards, door casings and window boards (fixed parts of the wall);
- ``table``: round tables, desks (with their panel legs);
- ``chair``: chairs, office chairs, stools, **sofas and beds** — seating and lying furniture, the
  closest fine class (ScanNet's NYU40 keeps sofa and bed apart; SynMix has no such class); coarse
  ``furniture/vehicle`` either way;
- ``cabinet``: shelves (frame and boards), wardrobes, sideboards — storage furniture;
- ``clutter``: what sits on or hangs from the rest: books on the shelves, items on tables and floor,
  monitors, plants, floor lamps, pictures, radiators (coarse ``other``).
"""

from __future__ import annotations

import itertools

import numpy as np

from bench.heldout_scenes.params import how_many, integer, pick, section, uniform
from bench.heldout_scenes.shapes import Box
from bench.heldout_scenes.world import Footprint, Frame, Occupancy, World, rectangle_corners

Opening = tuple[float, float, float, float, str]  # start, end along the wall, bottom, top, "door" / "window"


class _Room:
    """The state of one room while it is being furnished."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.p = section("room")
        self.f = section("furniture")
        w, d = uniform(rng, self.p["side_m"]), uniform(rng, self.p["side_m"])
        if rng.random() < self.p["l_shape_probability"]:
            a, b = w * uniform(rng, self.p["notch_fraction"]), d * uniform(rng, self.p["notch_fraction"])
            rects = [(0.0, 0.0, w, d - b), (0.0, d - b, w - a, d)]
            self.polygon = [(0.0, 0.0), (w, 0.0), (w, d - b), (w - a, d - b), (w - a, d), (0.0, d)]
        else:
            rects = [(0.0, 0.0, w, d)]
            self.polygon = [(0.0, 0.0), (w, 0.0), (w, d), (0.0, d)]
        self.h = uniform(rng, self.p["height_m"])
        self.t = uniform(rng, self.p["wall_thickness_m"])
        self.world = World("indoor", footprint=Footprint(rects), height=self.h, crop_margin=0.6 * self.t)
        self.occupied = Occupancy()
        self.openings: list[list[Opening]] = [[] for _ in self.polygon]
        self.wall_paint = pick(rng, "wall")
        self.accent = int(rng.integers(len(self.polygon))) if rng.random() < self.p["accent_wall_probability"] else -1
        self.trim = pick(rng, "trim")

    # -- the shell ---------------------------------------------------------------------------------

    def edge(self, i: int) -> tuple[np.ndarray, np.ndarray, float]:
        """Start point, unit direction and length of wall ``i`` (the polygon runs anticlockwise, so
        the room is on the left of each edge)."""
        a = np.asarray(self.polygon[i])
        b = np.asarray(self.polygon[(i + 1) % len(self.polygon)])
        return a, (b - a) / np.linalg.norm(b - a), float(np.linalg.norm(b - a))

    def wall_frame(self, i: int) -> Frame:
        a, e, _ = self.edge(i)
        return Frame((float(a[0]), float(a[1]), 0.0), float(np.arctan2(e[1], e[0])))

    def convex(self, vertex: int) -> bool:
        n = len(self.polygon)
        _, e_in, _ = self.edge((vertex - 1) % n)
        _, e_out, _ = self.edge(vertex)
        return float(e_in[0] * e_out[1] - e_in[1] * e_out[0]) > 0

    def shell(self) -> None:
        rng, p, w = self.rng, self.p, self.world
        x0, y0, x1, y1 = w.footprint.bounds() if w.footprint else (0.0, 0.0, 1.0, 1.0)
        t, slab = self.t, p["slab_m"]
        w.add(
            Box(((x0 + x1) / 2, (y0 + y1) / 2, -slab / 2), ((x1 - x0) / 2 + t, (y1 - y0) / 2 + t, slab / 2)),
            "floor",
            pick(rng, "floor"),
        )
        w.add(
            Box(((x0 + x1) / 2, (y0 + y1) / 2, self.h + slab / 2), ((x1 - x0) / 2 + t, (y1 - y0) / 2 + t, slab / 2)),
            "ceiling",
            pick(rng, "ceiling"),
        )
        for kind, count in (("door", integer(rng, p["doors"])), ("window", integer(rng, p["windows"]))):
            for _ in range(count):
                self.open(kind)
        for i in range(len(self.polygon)):
            self.wall(i)
        for _ in range(integer(rng, section("colour", "indoor", "lamps"))):
            lamp = self.free_point(0.3)
            if lamp is not None:
                w.lamps.append((lamp[0], lamp[1], self.h - 0.1))

    def open(self, kind: str) -> None:
        """Cut a door or window into a wall long enough for it, clear of other openings."""
        rng, p = self.rng, self.p
        lengths = np.array([self.edge(i)[2] for i in range(len(self.polygon))])
        margin = p["opening_margin_m"]
        for _ in range(p["placement_tries"]):
            i = int(rng.choice(len(lengths), p=lengths / lengths.sum()))
            width = uniform(rng, p[f"{kind}_width_m"])
            room = lengths[i] - 2 * margin - width
            if room <= 0:
                continue
            start = margin + float(rng.uniform(0, room))
            end = start + width
            if any(start < o[1] + margin and o[0] < end + margin for o in self.openings[i]):
                continue
            if kind == "door":
                bottom, top = 0.0, uniform(rng, p["door_height_m"])
            else:
                bottom, top = uniform(rng, p["window_sill_m"]), uniform(rng, p["window_head_m"])
            self.openings[i].append((start, end, bottom, min(top, self.h - 0.15), kind))
            # Keep a walkway in front of a door and the space below a window free of furniture.
            fr = self.wall_frame(i)
            depth = 1.0 if kind == "door" else 0.45
            cx, cy, _ = fr.point((start + end) / 2, depth / 2, 0.0)
            self.occupied.take(rectangle_corners(cx, cy, width / 2 + 0.15, depth / 2, fr.yaw))
            return

    def wall(self, i: int) -> None:
        rng, p, w, t, h = self.rng, self.p, self.world, self.t, self.h
        fr = self.wall_frame(i)
        _, _, length = self.edge(i)
        paint = pick(rng, "accent_wall") if i == self.accent else self.wall_paint
        # Walls stand outside the floor plan; at an outer corner each runs on by its thickness to close it.
        lo = -t if self.convex(i) else 0.0
        hi = length + (t if self.convex((i + 1) % len(self.polygon)) else 0.0)
        skirting = uniform(rng, p["skirting_height_m"])

        def piece(a: float, b: float, z0: float, z1: float) -> None:
            if b - a > 1e-3 and z1 - z0 > 1e-3:
                w.add(fr.box((a, b), (-t, 0.0), (z0, z1)), "wall", paint)
                if z0 == 0.0:
                    w.add(fr.box((max(a, 0.0), min(b, length)), (0.0, 0.015), (0.0, skirting)), "wall", self.trim)

        cursor = lo
        for start, end, bottom, top, kind in sorted(self.openings[i]):
            piece(cursor, start, 0.0, h)
            piece(start, end, 0.0, bottom)
            piece(start, end, top, h)
            cursor = end
            if kind == "door":
                c = uniform(rng, p["door_casing_m"])
                for a, b, z1 in ((start - c, start, top + c), (end, end + c, top + c), (start - c, end + c, top + c)):
                    z0 = top if b - a > 2 * c else 0.0
                    w.add(fr.box((a, b), (0.0, 0.02), (z0, z1)), "wall", self.trim)
            else:
                depth = uniform(rng, p["window_board_depth_m"])
                w.add(fr.box((start - 0.05, end + 0.05), (-t / 2, depth), (bottom - 0.03, bottom)), "wall", self.trim)
                w.windows.append(fr.point((start + end) / 2, 0.0, (bottom + top) / 2))
                if rng.random() < p["radiator_probability"] and bottom > 0.45:
                    w.add(
                        fr.box((start + 0.05, end - 0.05), (0.04, 0.12), (0.12, bottom - 0.12)),
                        "clutter",
                        "white paint",
                    )
        piece(cursor, hi, 0.0, h)

    # -- placing things ----------------------------------------------------------------------------

    def inside(self, corners: np.ndarray, margin: float) -> bool:
        """Whether a turned rectangle lies in the floor plan, at least ``margin`` from its edges:
        its corners, edge midpoints and centre, each moved by ±margin along x and y, are all inside
        (midpoints too, so a rectangle cannot straddle an L-shaped room's notch)."""
        fp = self.world.footprint
        assert fp is not None
        pts = np.concatenate([corners, (corners + np.roll(corners, 1, 0)) / 2, corners.mean(0, keepdims=True)])
        shifts = np.array([[sx, sy] for sx in (-margin, margin) for sy in (-margin, margin)])
        return bool(fp.contains((pts[:, None, :] + shifts[None]).reshape(-1, 2)).all())

    def against_wall(self, width: float, depth: float, gap: float = 0.02) -> Frame | None:
        """A frame whose local −y side touches a wall (x along it, y into the room), on free floor."""
        rng = self.rng
        lengths = np.array([self.edge(i)[2] for i in range(len(self.polygon))])
        for _ in range(self.p["placement_tries"]):
            i = int(rng.choice(len(lengths), p=lengths / lengths.sum()))
            if lengths[i] < width + 0.1:
                continue
            s = float(rng.uniform(width / 2 + 0.05, lengths[i] - width / 2 - 0.05))
            fr = self.wall_frame(i)
            cx, cy, _ = fr.point(s, gap + depth / 2, 0.0)
            corners = rectangle_corners(cx, cy, width / 2, depth / 2, fr.yaw)
            grown = rectangle_corners(cx, cy, width / 2 + 0.05, depth / 2 + 0.05, fr.yaw)
            if self.inside(corners, 0.0) and self.occupied.free(grown):
                self.occupied.take(corners)
                return Frame((cx, cy, 0.0), fr.yaw)
        return None

    def free_spot(self, width: float, depth: float, *, taken: float | None = None) -> Frame | None:
        """A frame at a random free place and angle whose ``width`` × ``depth`` rectangle (grown to
        ``taken`` on every side, when given) stays inside the room and clear of everything placed."""
        rng = self.rng
        fp = self.world.footprint
        assert fp is not None
        x0, y0, x1, y1 = fp.bounds()
        clear = self.p["clearance_m"]
        for _ in range(self.p["placement_tries"]):
            cx, cy = float(rng.uniform(x0, x1)), float(rng.uniform(y0, y1))
            yaw = float(rng.uniform(0, 2 * np.pi)) if rng.random() < 0.5 else float(rng.integers(4)) * np.pi / 2
            hx, hy = (width / 2, depth / 2) if taken is None else (taken, taken)
            corners = rectangle_corners(cx, cy, hx, hy, yaw)
            if self.inside(corners, 0.05) and self.occupied.free(
                rectangle_corners(cx, cy, hx + clear, hy + clear, yaw)
            ):
                self.occupied.take(corners)
                return Frame((cx, cy, 0.0), yaw)
        return None

    def free_point(self, clearance: float) -> tuple[float, float] | None:
        """A point of free floor at least ``clearance`` from anything placed and from the walls."""
        fp = self.world.footprint
        assert fp is not None
        x0, y0, x1, y1 = fp.bounds()
        for _ in range(self.p["placement_tries"]):
            cx, cy = float(self.rng.uniform(x0, x1)), float(self.rng.uniform(y0, y1))
            corners = rectangle_corners(cx, cy, clearance, clearance, 0.0)
            if self.inside(corners, 0.0) and self.occupied.free(corners):
                return cx, cy
        return None

    # -- furniture ---------------------------------------------------------------------------------

    def furnish(self) -> None:
        rng, p, fp = self.rng, self.p, self.world.footprint
        assert fp is not None
        area = fp.area()
        counts = {
            name: how_many(rng, rate / 10.0, area, p["at_least"].get(name, 0)) for name, rate in p["per_10_m2"].items()
        }
        # The big pieces first (a round table with its seats needs the most free floor), small things last.
        for name in (
            "rug",
            "round_table",
            "shelf",
            "bed",
            "wardrobe",
            "sofa",
            "sideboard",
            "desk",
            "chair",
            "stool",
            "plant",
            "floor_lamp",
            "floor_clutter",
            "picture",
        ):
            for _ in range(counts[name]):
                getattr(self, name)()
        self.world.stations = [pt for pt in (self.free_point(0.3) for _ in range(12)) if pt is not None]

    def rug(self) -> None:
        rng, f = self.rng, self.f["rug"]
        fp = self.world.footprint
        assert fp is not None
        x0, y0, x1, y1 = fp.bounds()
        w, d = uniform(rng, f["size_m"]), uniform(rng, f["size_m"])
        for _ in range(self.p["placement_tries"]):
            cx, cy = float(rng.uniform(x0, x1)), float(rng.uniform(y0, y1))
            yaw = float(rng.integers(4)) * np.pi / 2 + float(rng.normal(0, 0.05))
            if self.inside(rectangle_corners(cx, cy, w / 2, d / 2, yaw), 0.3):
                self.world.add(
                    Frame((cx, cy, 0.0), yaw).box((-w / 2, w / 2), (-d / 2, d / 2), (0.0, f["thickness_m"])),
                    "floor",
                    pick(rng, "rug"),
                )
                return

    def shelf(self) -> None:
        rng, f, w = self.rng, self.f["shelf"], self.world
        width, depth, height = (uniform(rng, f[k]) for k in ("width_m", "depth_m", "height_m"))
        height = min(height, self.h - 0.2)
        fr = self.against_wall(width, depth)
        if fr is None:
            return
        wood, b = pick(rng, "wood"), f["board_m"]
        x, y = (-width / 2, width / 2), (-depth / 2, depth / 2)
        w.add(fr.box((x[0], x[0] + b), y, (0.0, height)), "cabinet", wood)
        w.add(fr.box((x[1] - b, x[1]), y, (0.0, height)), "cabinet", wood)
        w.add(fr.box(x, (y[0], y[0] + 0.012), (0.0, height)), "cabinet", wood)
        levels = integer(rng, f["boards"]) + 1
        zs = np.linspace(0.06, height - b, levels + 1)
        for z in zs:
            w.add(fr.box((x[0] + b, x[1] - b), y, (z, z + b)), "cabinet", wood)
        w.add(fr.box((x[0] + b, x[1] - b), (y[1] - 0.02, y[1]), (0.0, 0.06)), "cabinet", wood)  # plinth
        for lo, hi in itertools.pairwise(zs):
            room = hi - lo - b
            filled = uniform(rng, f["book_fill"]) * (width - 2 * b)
            cursor = x[0] + b + float(rng.uniform(0, width - 2 * b - filled))
            end = cursor + filled
            while cursor < end:
                bw = uniform(rng, f["book_width_m"])
                bh = room * uniform(rng, f["book_height_fraction"])
                bd = depth * float(rng.uniform(0.65, 0.9))
                w.add(
                    fr.box((cursor, min(cursor + bw, end)), (y[1] - bd - 0.01, y[1] - 0.01), (lo + b, lo + b + bh)),
                    "clutter",
                    pick(rng, "book"),
                )
                cursor += bw + (float(rng.uniform(0.0, 0.01)) if rng.random() < 0.8 else float(rng.uniform(0.05, 0.2)))

    def wardrobe(self) -> None:
        rng, f, w = self.rng, self.f["wardrobe"], self.world
        width, depth, height = (uniform(rng, f[k]) for k in ("width_m", "depth_m", "height_m"))
        height = min(height, self.h - 0.1)
        fr = self.against_wall(width, depth)
        if fr is None:
            return
        w.add(fr.box((-width / 2, width / 2), (-depth / 2, depth / 2), (0.0, height)), "cabinet", pick(rng, "wood"))
        steel = pick(rng, "metal")
        doors = max(1, round(width / 0.5))
        for k in range(1, doors):
            if k % 2 == 1:
                xk = -width / 2 + k * width / doors
                for dx in (-0.04, 0.04):
                    w.add(
                        fr.cylinder(
                            (xk + dx, depth / 2 + 0.03, 0.9), (xk + dx, depth / 2 + 0.03, 1.25), f["handle_radius_m"]
                        ),
                        "cabinet",
                        steel,
                    )

    def sideboard(self) -> None:
        rng, f, w = self.rng, self.f["sideboard"], self.world
        width, depth, height, leg = (uniform(rng, f[k]) for k in ("width_m", "depth_m", "height_m", "leg_m"))
        fr = self.against_wall(width, depth)
        if fr is None:
            return
        w.add(
            fr.box((-width / 2, width / 2), (-depth / 2, depth / 2), (leg, leg + height)), "cabinet", pick(rng, "wood")
        )
        metal = pick(rng, "metal")
        for sx in (-1, 1):
            for sy in (-1, 1):
                px, py = sx * (width / 2 - 0.06), sy * (depth / 2 - 0.05)
                w.add(fr.cylinder((px, py, 0.0), (px, py, leg), 0.018), "cabinet", metal)
        self.items_on(fr, width - 0.1, depth - 0.1, leg + height, integer(self.rng, [0, 3]))

    def sofa(self) -> None:
        rng, f, w = self.rng, self.f["sofa"], self.world
        width, depth, seat, back, arm = (
            uniform(rng, f[k]) for k in ("width_m", "depth_m", "seat_m", "back_m", "arm_radius_m")
        )
        fr = self.against_wall(width, depth, gap=0.05) if rng.random() < 0.7 else self.free_spot(width, depth)
        if fr is None:
            return
        cloth, legs = pick(rng, "upholstery"), pick(rng, "metal")
        x, y = (-width / 2, width / 2), (-depth / 2, depth / 2)
        base = 0.1
        w.add(fr.box((x[0] + 2 * arm, x[1] - 2 * arm), (y[0] + 0.2, y[1]), (base, seat - 0.12)), "chair", cloth)
        w.add(fr.box(x, (y[0], y[0] + 0.2), (base, back)), "chair", cloth)
        for side in (-1, 1):
            ax = side * (width / 2 - arm)
            w.add(fr.box((ax - arm, ax + arm), (y[0] + 0.2, y[1]), (base, seat + 0.1)), "chair", cloth)
            w.add(fr.cylinder((ax, y[0] + 0.2, seat + 0.1), (ax, y[1], seat + 0.1), arm), "chair", cloth)
        n = integer(rng, f["cushions"])
        inner = width - 4 * arm
        for k in range(n):
            a = x[0] + 2 * arm + k * inner / n
            w.add(
                fr.box((a + 0.01, a + inner / n - 0.01), (y[0] + 0.2, y[1] - 0.02), (seat - 0.12, seat)), "chair", cloth
            )
            w.add(
                fr.ellipsoid((a + inner / (2 * n), y[0] + 0.3, seat + 0.2), (inner / (2 * n) - 0.02, 0.1, 0.2)),
                "chair",
                cloth,
            )
        for sx in (-1, 1):
            for sy in (-1, 1):
                px, py = sx * (width / 2 - 0.08), sy * (depth / 2 - 0.08)
                w.add(fr.cylinder((px, py, 0.0), (px, py, base), 0.02), "chair", legs)
        if rng.random() < 0.6:  # a low table in front of it
            tw = min(1.2, width * 0.6)
            cx, cy, _ = fr.point(0.0, depth / 2 + 0.45, 0.0)
            corners = rectangle_corners(cx, cy, tw / 2, 0.3, fr.yaw)
            if self.inside(corners, 0.05) and self.occupied.free(corners):
                self.occupied.take(corners)
                low = Frame((cx, cy, 0.0), fr.yaw)
                wood = pick(rng, "wood")
                w.add(low.box((-tw / 2, tw / 2), (-0.3, 0.3), (0.38, 0.42)), "table", wood)
                for sx in (-1, 1):
                    w.add(
                        low.box(
                            (sx * tw / 2 - 0.03 * (sx + 1), sx * tw / 2 - 0.03 * (sx - 1)), (-0.3, 0.3), (0.0, 0.38)
                        ),
                        "table",
                        wood,
                    )
                self.items_on(low, tw - 0.1, 0.5, 0.42, integer(rng, [0, 2]))

    def bed(self) -> None:
        rng, f, w = self.rng, self.f["bed"], self.world
        width, length, frame, mattress, head = (
            uniform(rng, f[k]) for k in ("width_m", "length_m", "frame_m", "mattress_m", "headboard_m")
        )
        fr = self.against_wall(width + 0.1, length + 0.1)
        if fr is None:
            return
        wood, linen = pick(rng, "wood"), pick(rng, "bedding")
        x, y = (-width / 2, width / 2), (-length / 2, length / 2)
        w.add(fr.box(x, (y[0], y[0] + 0.08), (0.0, head)), "chair", wood)
        w.add(fr.box(x, (y[0] + 0.08, y[1]), (0.08, frame)), "chair", wood)
        for sx in (-1, 1):
            w.add(
                fr.cylinder(
                    (sx * (width / 2 - 0.05), y[1] - 0.05, 0.0), (sx * (width / 2 - 0.05), y[1] - 0.05, 0.08), 0.03
                ),
                "chair",
                wood,
            )
        top = frame + mattress
        w.add(fr.box((x[0] + 0.03, x[1] - 0.03), (y[0] + 0.1, y[1] - 0.03), (frame, top)), "chair", "white linen")
        w.add(fr.box((x[0] - 0.02, x[1] + 0.02), (y[0] + 0.7, y[1]), (top - 0.08, top + 0.05)), "chair", linen)
        n = integer(rng, f["pillows"])
        for k in range(n):
            px = x[0] + (k + 0.5) * width / n
            w.add(fr.ellipsoid((px, y[0] + 0.35, top + 0.06), (width / (2 * n) - 0.04, 0.22, 0.08)), "chair", linen)

    def round_table(self) -> None:
        rng, f, w = self.rng, self.f["round_table"], self.world
        r, height, column = uniform(rng, f["radius_m"]), uniform(rng, f["height_m"]), uniform(rng, f["column_radius_m"])
        seats = integer(rng, f["seats"])
        fr = self.free_spot(2 * r, 2 * r, taken=r + (0.6 if seats else 0.05))
        if fr is None and seats:  # no room for the seats: the table alone
            seats = 0
            fr = self.free_spot(2 * r, 2 * r, taken=r + 0.05)
        if fr is None:
            return
        wood = pick(rng, "wood")
        top = f["top_m"]
        w.add(fr.cylinder((0.0, 0.0, height - top), (0.0, 0.0, height), r), "table", wood)
        legs = integer(rng, f["legs"])
        if legs < 3:  # a pedestal on a foot
            w.add(fr.cylinder((0.0, 0.0, 0.03), (0.0, 0.0, height - top), column), "table", wood)
            w.add(fr.cylinder((0.0, 0.0, 0.0), (0.0, 0.0, 0.03), r * 0.55), "table", pick(rng, "metal"))
        else:
            for k in range(legs):
                a = 2 * np.pi * k / legs + 0.3
                foot, head = r * 0.75, r * 0.45
                w.add(
                    fr.cylinder(
                        (foot * np.cos(a), foot * np.sin(a), 0.0),
                        (head * np.cos(a), head * np.sin(a), height - top),
                        column * 0.6,
                    ),
                    "table",
                    wood,
                )
        self.items_on(fr, r * 1.2, r * 1.2, height, integer(rng, f["items"]))
        for k in range(seats):
            a = 2 * np.pi * k / seats + float(rng.uniform(-0.3, 0.3))
            dist = r + float(rng.uniform(0.15, 0.35))
            # Facing the table: the seat's local +y points at the table's centre, its back rest away.
            seat = Frame(fr.point(dist * np.cos(a), dist * np.sin(a), 0.0), fr.yaw + a + np.pi / 2)
            (self.build_stool if rng.random() < 0.4 else self.build_chair)(seat)

    def desk(self) -> None:
        rng, f, w = self.rng, self.f["desk"], self.world
        width, depth, height = (uniform(rng, f[k]) for k in ("width_m", "depth_m", "height_m"))
        fr = self.against_wall(width, depth)
        if fr is None:
            return
        wood, p = pick(rng, "wood"), f["panel_m"]
        x, y = (-width / 2, width / 2), (-depth / 2, depth / 2)
        w.add(fr.box(x, y, (height - 0.03, height)), "table", wood)
        for a, b in ((x[0], x[0] + p), (x[1] - p, x[1])):
            w.add(fr.box((a, b), (y[0] + 0.03, y[1] - 0.03), (0.0, height - 0.03)), "table", wood)
        w.add(fr.box((x[0] + p, x[1] - p), (y[0] + 0.03, y[0] + 0.05), (0.35, height - 0.03)), "table", wood)
        if rng.random() < f["monitor_probability"]:
            mx = float(rng.uniform(x[0] + 0.35, x[1] - 0.35))
            w.add(
                fr.box((mx - 0.12, mx + 0.12), (y[0] + 0.1, y[0] + 0.3), (height, height + 0.02)),
                "clutter",
                "black plastic",
            )
            w.add(
                fr.cylinder((mx, y[0] + 0.2, height + 0.02), (mx, y[0] + 0.2, height + 0.15), 0.02),
                "clutter",
                "black plastic",
            )
            w.add(
                fr.box((mx - 0.3, mx + 0.3), (y[0] + 0.17, y[0] + 0.2), (height + 0.12, height + 0.5)),
                "clutter",
                "screen black",
            )
            w.add(
                fr.box((mx - 0.22, mx + 0.22), (y[0] + 0.4, y[0] + 0.55), (height, height + 0.025)),
                "clutter",
                "white plastic",
            )
        else:
            self.items_on(fr, width - 0.2, depth - 0.2, height, integer(rng, [1, 3]))
        # An office chair pulled up to it, when there is room.
        cx, cy, _ = fr.point(float(rng.uniform(-width / 4, width / 4)), depth / 2 + 0.2, 0.0)
        corners = rectangle_corners(cx, cy, 0.3, 0.3, fr.yaw)
        if self.inside(corners, 0.0) and self.occupied.free(corners):
            self.occupied.take(corners)
            self.build_office_chair(Frame((cx, cy, 0.0), fr.yaw + np.pi + float(rng.normal(0, 0.3))))

    def chair(self) -> None:
        fr = self.free_spot(0.55, 0.55)
        if fr is not None:
            (
                self.build_office_chair
                if self.rng.random() < self.f["chair"]["office_probability"]
                else self.build_chair
            )(fr)

    def stool(self) -> None:
        fr = self.free_spot(0.45, 0.45)
        if fr is not None:
            self.build_stool(fr)

    def build_chair(self, fr: Frame) -> None:
        """Four legs (splayed), a seat, two uprights and a back rest; the back on the local −y side."""
        rng, f, w = self.rng, self.f["chair"], self.world
        seat, s, back = uniform(rng, f["seat_m"]), uniform(rng, f["size_m"]), uniform(rng, f["back_m"])
        leg_r, splay = uniform(rng, f["leg_radius_m"]), uniform(rng, f["splay_m"])
        material = pick(rng, "chair")
        legs = material if rng.random() < 0.5 else pick(rng, "metal")
        w.add(fr.box((-s / 2, s / 2), (-s / 2, s / 2), (seat - 0.035, seat)), "chair", material)
        for sx in (-1, 1):
            for sy in (-1, 1):
                top = (sx * (s / 2 - 0.03), sy * (s / 2 - 0.03), seat - 0.035)
                foot = (sx * (s / 2 - 0.03 + splay), sy * (s / 2 - 0.03 + splay), 0.0)
                w.add(fr.cylinder(foot, top, leg_r), "chair", legs)
        for sx in (-1, 1):
            w.add(
                fr.cylinder(
                    (sx * (s / 2 - 0.03), -s / 2 + 0.02, seat), (sx * (s / 2 - 0.03), -s / 2 - 0.03, seat + back), leg_r
                ),
                "chair",
                legs,
            )
        w.add(
            fr.box((-s / 2, s / 2), (-s / 2 - 0.04, -s / 2 - 0.01), (seat + back * 0.5, seat + back)), "chair", material
        )

    def build_office_chair(self, fr: Frame) -> None:
        rng, f, w = self.rng, self.f["chair"], self.world
        seat, s, back = uniform(rng, f["seat_m"]), uniform(rng, f["size_m"]), uniform(rng, f["back_m"])
        frame, cloth = "black plastic", pick(rng, "upholstery")
        for k in range(5):
            star = Frame(fr.origin, fr.yaw + 2 * np.pi * k / 5)
            w.add(star.box((0.0, 0.3), (-0.02, 0.02), (0.05, 0.08)), "chair", frame)
            w.add(star.ellipsoid((0.29, 0.0, 0.025), (0.025, 0.025, 0.025)), "chair", frame)
        w.add(fr.cylinder((0.0, 0.0, 0.08), (0.0, 0.0, seat - 0.07), 0.028), "chair", "brushed steel")
        w.add(fr.box((-s / 2, s / 2), (-s / 2, s / 2), (seat - 0.07, seat)), "chair", cloth)
        w.add(fr.box((-0.02, 0.02), (-s / 2 - 0.05, -s / 2 - 0.02), (seat - 0.05, seat + 0.2)), "chair", frame)
        w.add(
            fr.box((-s / 2 + 0.02, s / 2 - 0.02), (-s / 2 - 0.1, -s / 2 - 0.04), (seat + 0.15, seat + back + 0.12)),
            "chair",
            cloth,
        )

    def build_stool(self, fr: Frame) -> None:
        rng, f, w = self.rng, self.f["stool"], self.world
        seat, r, n, splay = (
            uniform(rng, f["seat_m"]),
            uniform(rng, f["radius_m"]),
            integer(rng, f["legs"]),
            uniform(rng, f["splay_m"]),
        )
        material, legs = pick(rng, "chair"), pick(rng, "metal")
        w.add(fr.cylinder((0.0, 0.0, seat - 0.035), (0.0, 0.0, seat), r), "chair", material)
        for k in range(n):
            a = 2 * np.pi * k / n
            top, foot = r * 0.7, r * 0.7 + splay
            w.add(
                fr.cylinder(
                    (foot * np.cos(a), foot * np.sin(a), 0.0), (top * np.cos(a), top * np.sin(a), seat - 0.035), 0.014
                ),
                "chair",
                legs,
            )
        if seat > 0.6:  # a bar stool's foot ring, as a turned box per side
            for k in range(n):
                a = 2 * np.pi * (k + 0.5) / n
                rr = r * 0.7 + splay * 0.65
                w.add(
                    Frame(fr.point(rr * np.cos(a), rr * np.sin(a), 0.0), fr.yaw + a + np.pi / 2).box(
                        (-rr * np.sin(np.pi / n), rr * np.sin(np.pi / n)), (-0.01, 0.01), (0.25, 0.27)
                    ),
                    "chair",
                    legs,
                )

    def items_on(self, fr: Frame, width: float, depth: float, z: float, count: int) -> None:
        """``count`` small things (mugs, bowls, books, vases, boxes) on a surface at height ``z``."""
        rng, w = self.rng, self.world
        for _ in range(count):
            s = min(float(rng.uniform(0.06, 0.22)), width / 2 - 0.01, depth / 2 - 0.01)
            if s < 0.04:
                return
            px, py = (
                float(rng.uniform(-width / 2 + s, width / 2 - s)),
                float(rng.uniform(-depth / 2 + s, depth / 2 - s)),
            )
            material = pick(rng, "clutter")
            shape = int(rng.integers(4))
            if shape == 0:
                w.add(
                    fr.cylinder((px, py, z), (px, py, z + s * float(rng.uniform(0.8, 2.0))), s / 3), "clutter", material
                )
            elif shape == 1:
                w.add(fr.ellipsoid((px, py, z + s / 4), (s / 2, s / 2, s / 4)), "clutter", material)
            elif shape == 2:
                w.add(
                    fr.box((px - s / 2, px + s / 2), (py - s / 3, py + s / 3), (z, z + s / 4)),
                    "clutter",
                    pick(rng, "book"),
                )
            else:
                w.add(
                    Frame(fr.point(px, py, z), fr.yaw + float(rng.uniform(0, np.pi))).box(
                        (-s / 2, s / 2), (-s / 2, s / 2), (0.0, s)
                    ),
                    "clutter",
                    material,
                )

    def plant(self) -> None:
        rng, f, w = self.rng, self.f["plant"], self.world
        r, pot, crown = uniform(rng, f["pot_radius_m"]), uniform(rng, f["pot_m"]), uniform(rng, f["crown_m"])
        fr = self.free_spot(2 * r, 2 * r, taken=max(r, crown * 0.7))
        if fr is None:
            return
        w.add(fr.cylinder((0.0, 0.0, 0.0), (0.0, 0.0, pot), r), "clutter", pick(rng, "pot"))
        w.add(fr.cylinder((0.0, 0.0, pot), (0.0, 0.0, pot + crown), 0.015), "clutter", "bark")
        for _ in range(integer(rng, [1, 3])):
            off = rng.normal(0, crown * 0.2, 3)
            w.add(
                fr.ellipsoid((off[0], off[1], pot + crown + off[2]), tuple(crown * rng.uniform(0.4, 0.7, 3))),
                "clutter",
                "leaf green",
                porous=True,
            )

    def floor_lamp(self) -> None:
        rng, f, w = self.rng, self.f["floor_lamp"], self.world
        height, shade = uniform(rng, f["height_m"]), uniform(rng, f["shade_radius_m"])
        fr = self.free_spot(0.35, 0.35, taken=max(0.18, shade))
        if fr is None:
            return
        metal = pick(rng, "metal")
        w.add(fr.cylinder((0.0, 0.0, 0.0), (0.0, 0.0, 0.025), 0.15), "clutter", metal)
        w.add(fr.cylinder((0.0, 0.0, 0.025), (0.0, 0.0, height - 0.2), 0.012), "clutter", metal)
        w.add(fr.cylinder((0.0, 0.0, height - 0.3), (0.0, 0.0, height), shade), "clutter", "lamp shade")

    def floor_clutter(self) -> None:
        rng, f, w = self.rng, self.f["floor_clutter"], self.world
        s = uniform(rng, f["size_m"])
        fr = self.free_spot(s, s)
        if fr is None:
            return
        material = pick(rng, "clutter")
        shape = int(rng.integers(4))
        if shape == 0:  # a carton, sometimes two stacked
            w.add(fr.box((-s / 2, s / 2), (-s / 3, s / 3), (0.0, s * 0.7)), "clutter", "cardboard")
            if rng.random() < 0.4:
                w.add(
                    Frame((fr.origin[0], fr.origin[1], s * 0.7), fr.yaw + 0.3).box(
                        (-s / 3, s / 3), (-s / 4, s / 4), (0.0, s * 0.5)
                    ),
                    "clutter",
                    "cardboard",
                )
        elif shape == 1:  # a bin
            w.add(fr.cylinder((0.0, 0.0, 0.0), (0.0, 0.0, s * 1.1), s / 2.5), "clutter", material)
        elif shape == 2:  # a bag or a ball
            w.add(fr.ellipsoid((0.0, 0.0, s / 3), (s / 2, s / 2.5, s / 3)), "clutter", material)
        else:  # a low crate
            w.add(fr.box((-s / 2, s / 2), (-s / 2, s / 2), (0.0, s / 3)), "clutter", material)

    def picture(self) -> None:
        rng, f, w = self.rng, self.f["picture"], self.world
        width, height, centre = uniform(rng, f["width_m"]), uniform(rng, f["height_m"]), uniform(rng, f["centre_m"])
        lengths = np.array([self.edge(i)[2] for i in range(len(self.polygon))])
        i = int(rng.choice(len(lengths), p=lengths / lengths.sum()))
        if lengths[i] < width + 0.4:
            return
        s = float(rng.uniform(0.2 + width / 2, lengths[i] - 0.2 - width / 2))
        if any(o[0] - 0.1 < s + width / 2 and s - width / 2 < o[1] + 0.1 for o in self.openings[i]):
            return
        fr = self.wall_frame(i)
        box = fr.box((s - width / 2, s + width / 2), (0.0, f["depth_m"]), (centre - height / 2, centre + height / 2))
        probe = np.array(
            [
                fr.point(s + dx, 0.05, centre + dz)
                for dx in (-width / 2, 0, width / 2)
                for dz in (-height / 2, 0, height / 2)
            ]
        )
        if any(part.solid.contains(probe, margin=0.02).any() for part in w.parts if part.label not in ("wall",)):
            return  # something tall already stands there
        w.add(box, "clutter", pick(rng, "picture"))


def room(rng: np.random.Generator) -> World:
    """One furnished room drawn from the family's parameters."""
    state = _Room(rng)
    state.shell()
    state.furnish()
    return state.world
