"""Streets of the held-out family: the street kinds SynMix's generator never makes.

A street runs along x: an asphalt road of one or two lanes a side with painted markings and, on
some sides, a parking lane; granite or concrete curbs 10–18 cm high; raised sidewalks in concrete
slabs or red pavers, running back to paved front yards. Buildings have floors of windows recessed
behind piers and spandrels, shop windows on the ground floor, cornices, balconies with railings,
and gaps between them; front yards are closed by fences and hedges. On the sidewalks stand street
lights with one or two arms, traffic signs (round discs and plates), bollards, trees (a leaning
trunk, branches and a crown of several blobs) and walking people (legs in stride, arms, torso,
head). Parked (parallel or at an angle) and moving vehicles: sedans with a rounded cabin, vans,
buses with window bands, and bicycles.

Labels (SynMix's master classes; outdoor classes only):

- ``road``: the asphalt and its markings; ``sidewalk``: curbs, sidewalks and paved yards;
- ``building``: buildings with everything fixed to them (piers, glass, cornices, balconies) and
  **fences** (Cityscapes files fence with building and wall under "construction"; SynMix has no
  fence class) — coarse ``wall/building``;
- ``car``: every vehicle — sedans, vans, buses **and bicycles** (SynMix's only vehicle class);
- ``pole``: street lights with their arms and heads, sign posts with their plates, bollards;
- ``vegetation``: trees and hedges; ``pedestrian``: people.
"""

from __future__ import annotations

import itertools

import numpy as np

from bench.heldout_scenes.params import how_many, integer, pick, section, uniform
from bench.heldout_scenes.world import Frame, Occupancy, World, rectangle_corners


class _Street:
    """The state of one street while it is being built."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.p = section("street")
        self.o = section("street_objects")
        p = self.p
        self.half = uniform(rng, p["length_m"]) / 2
        self.lanes = {side: integer(rng, p["lanes_per_side"]) for side in (-1, 1)}
        self.lane = uniform(rng, p["lane_m"])
        self.parking = {
            side: (uniform(rng, p["parking_lane_m"]) if rng.random() < p["parking_lane_probability"] else 0.0)
            for side in (-1, 1)
        }
        #: Distance from the centre line to each side's curb face.
        self.road = {side: self.lanes[side] * self.lane + self.parking[side] for side in (-1, 1)}
        self.curb_h = uniform(rng, p["curb_height_m"])
        self.curb_w = uniform(rng, p["curb_width_m"])
        self.walk = {side: uniform(rng, p["sidewalk_m"]) for side in (-1, 1)}
        self.world = World("outdoor", half_length=self.half, road_half_width=max(self.road.values()), height=0.0)
        self.occupied = Occupancy()
        self.extent = self.half + 10.0  # ground and buildings run on past the objects

    def walk_edge(self, side: int) -> float:
        """|y| of the sidewalk's back edge, where the front yards begin."""
        return self.road[side] + self.curb_w + self.walk[side]

    # -- ground ------------------------------------------------------------------------------------

    def ground(self) -> None:
        rng, w, p, e = self.rng, self.world, self.p, self.extent
        road = pick(rng, "road")
        w.add(Frame((0.0, 0.0, 0.0)).box((-e, e), (-self.road[-1], self.road[1]), (-0.3, 0.0)), "road", road)
        mark_w = uniform(rng, p["lane_mark_m"])
        paint = pick(rng, "marking")
        dashed = rng.random() < 0.5
        step = 9.0 if dashed else 2 * e
        for x in np.arange(-e, e, step):  # the centre line, dashed 3 m in 9 m or solid
            w.add(
                Frame((0.0, 0.0, 0.0)).box(
                    (x, min(x + (3.0 if dashed else step), e)), (-mark_w / 2, mark_w / 2), (0.0, 0.003)
                ),
                "road",
                paint,
            )
        for side in (-1, 1):
            for k in range(1, self.lanes[side]):  # lane dividers, dashed
                y = side * k * self.lane
                for x in np.arange(-e, e, 12.0):
                    w.add(
                        Frame((0.0, y, 0.0)).box((x, x + 4.0), (-mark_w / 2, mark_w / 2), (0.0, 0.003)),
                        "road",
                        "lane paint",
                    )
            if self.parking[side]:  # the parking lane's edge line, solid
                y = side * self.lanes[side] * self.lane
                w.add(Frame((0.0, y, 0.0)).box((-e, e), (-mark_w / 2, mark_w / 2), (0.0, 0.003)), "road", "lane paint")
            r, c = self.road[side], self.curb_w
            y0, y1 = sorted((side * r, side * (r + c)))
            w.add(Frame((0.0, 0.0, 0.0)).box((-e, e), (y0, y1), (-0.3, self.curb_h)), "sidewalk", pick(rng, "curb"))
            y0, y1 = sorted((side * (r + c), side * (r + c + self.walk[side] + p["back_depth_m"])))
            w.add(Frame((0.0, 0.0, 0.0)).box((-e, e), (y0, y1), (-0.3, self.curb_h)), "sidewalk", pick(rng, "paving"))

    # -- buildings ---------------------------------------------------------------------------------

    def buildings(self, side: int) -> None:
        rng, p = self.rng, self.p
        x = -self.extent
        while x < self.extent:
            width = uniform(rng, p["building_width_m"])
            setback = uniform(rng, p["setback_m"])
            self.building(side, x, min(width, self.extent - x + 2.0), setback)
            if setback > 1.0:  # a front yard, closed by a fence or a hedge
                if rng.random() < p["front_fence_probability"]:
                    self.fence(side, x, x + width)
                else:
                    self.hedge_row(side, x, x + width, setback)
            x += width
            if rng.random() < p["gap_probability"]:
                x += uniform(rng, p["gap_m"])

    def building(self, side: int, x0: float, width: float, setback: float) -> None:
        rng, p, w = self.rng, self.p, self.world
        front = self.walk_edge(side) + setback
        # Local frame: x along the street, +y away from it into the building, z up from the yard.
        fr = (
            Frame((x0, side * front, self.curb_h), 0.0)
            if side > 0
            else Frame((x0 + width, side * front, self.curb_h), np.pi)
        )
        depth = uniform(rng, p["building_depth_m"])
        floors = integer(rng, p["building_floors"])
        fh = uniform(rng, p["floor_height_m"])
        ground_h = fh + float(rng.uniform(0.3, 1.0))
        height = ground_h + (floors - 1) * fh
        pier = uniform(rng, p["pier_depth_m"])
        facade = pick(rng, "facade")
        w.add(fr.box((0.0, width), (pier, depth), (0.0, height)), "building", facade)
        # Ground floor: a wall flush with the piers and shop windows or doors set into it.
        w.add(fr.box((0.0, width), (0.0, pier), (0.0, ground_h)), "building", facade)
        for _ in range(integer(rng, [1, 3])):
            sw = float(rng.uniform(1.2, 3.5))
            sx = float(rng.uniform(0.3, max(0.4, width - sw - 0.3)))
            w.add(fr.box((sx, sx + sw), (-0.01, 0.0), (0.4, ground_h - 0.6)), "building", "window glass")
        columns = max(1, round(width * uniform(rng, p["window_columns_per_10m"]) / 10))
        bay = width / columns
        win = bay * uniform(rng, p["window_fill"])
        balconies = rng.random() < p["balcony_probability"]
        frame = "dark frame" if rng.random() < 0.5 else "white plaster"
        for k in range(columns + 1):  # piers between the windows, full height above the ground floor
            a = max(0.0, k * bay - (bay - win) / 2)
            b = min(width, k * bay + (bay - win) / 2)
            w.add(fr.box((a, b), (0.0, pier), (ground_h, height)), "building", facade)
        for f in range(1, floors):
            z = ground_h + (f - 1) * fh
            sill, head = z + 0.9, z + fh - 0.35
            for k in range(columns):
                a, b = k * bay + (bay - win) / 2, (k + 1) * bay - (bay - win) / 2
                w.add(fr.box((a, b), (0.0, pier), (z, sill)), "building", facade)  # spandrel below
                w.add(fr.box((a, b), (0.0, pier), (head, z + fh)), "building", facade)  # lintel above
                w.add(fr.box((a, b), (pier - 0.02, pier), (sill, head)), "building", "window glass")
                w.add(fr.box((a, b), (pier - 0.08, pier - 0.02), (sill - 0.03, sill)), "building", frame)
                if balconies and rng.random() < 0.5:
                    d = uniform(rng, p["balcony_depth_m"])
                    w.add(fr.box((a - 0.3, b + 0.3), (-d, 0.0), (z - 0.15, z)), "building", "grey concrete")
                    w.add(fr.box((a - 0.3, b + 0.3), (-d, -d + 0.04), (z, z + 1.0)), "building", frame)
                    for edge in (a - 0.3, b + 0.26):
                        w.add(fr.box((edge, edge + 0.04), (-d, 0.0), (z, z + 1.0)), "building", frame)
        cornice = uniform(rng, p["cornice_m"])
        w.add(fr.box((0.0, width), (-cornice, pier), (height - 0.35, height)), "building", facade)

    def fence(self, side: int, x0: float, x1: float) -> None:
        rng, o, w = self.rng, self.o["fence"], self.world
        height, spacing = uniform(rng, o["height_m"]), uniform(rng, o["post_spacing_m"])
        y = side * (self.walk_edge(side) + 0.1)
        material = pick(rng, "fence")
        post, rail = o["post_m"], o["rail_m"]
        xs = np.arange(x0 + 0.2, x1 - 0.1, spacing)
        base = Frame((0.0, y, self.curb_h))
        for x in xs:
            w.add(base.box((x - post / 2, x + post / 2), (-post / 2, post / 2), (0.0, height)), "building", material)
        rails = integer(rng, o["rails"])
        for k in range(rails):
            z = height * (k + 1) / (rails + 0.5)
            w.add(
                base.box((x0 + 0.2, x1 - 0.1), (-rail / 4, rail / 4), (z - rail / 2, z + rail / 2)),
                "building",
                material,
            )
        if rng.random() < 0.5:  # pickets between the rails
            for x in np.arange(x0 + 0.3, x1 - 0.15, 0.12):
                w.add(
                    base.box((x - 0.03, x + 0.03), (rail / 4, rail / 4 + 0.02), (0.05, height - 0.05)),
                    "building",
                    material,
                )

    def hedge(self, side: int) -> None:
        """A free-standing hedge at the back edge of the sidewalk."""
        rng, o, w = self.rng, self.o["hedge"], self.world
        length, width, height = uniform(rng, o["length_m"]), uniform(rng, o["width_m"]), uniform(rng, o["height_m"])
        for _ in range(40):
            x = float(rng.uniform(-self.half, self.half - length))
            y = side * (self.walk_edge(side) - width / 2 - 0.1)
            corners = rectangle_corners(x + length / 2, y, length / 2, width / 2, 0.0)
            if self.occupied.free(corners):
                self.occupied.take(corners)
                w.add(
                    Frame((x, y, self.curb_h)).box((0.0, length), (-width / 2, width / 2), (0.0, height)),
                    "vegetation",
                    pick(rng, "hedge"),
                    porous=True,
                )
                return

    def hedge_row(self, side: int, x0: float, x1: float, setback: float) -> None:
        rng, o, w = self.rng, self.o["hedge"], self.world
        width, height = uniform(rng, o["width_m"]), uniform(rng, o["height_m"])
        width = min(width, setback - 0.2)
        y = side * (self.walk_edge(side) + 0.1 + width / 2)
        w.add(
            Frame((0.0, y, self.curb_h)).box((x0 + 0.3, x1 - 0.3), (-width / 2, width / 2), (0.0, height)),
            "vegetation",
            pick(rng, "hedge"),
            porous=True,
        )

    # -- street furniture --------------------------------------------------------------------------

    def on_sidewalk(self, side: int, offset: float, size: float) -> tuple[float, float] | None:
        """A free (x, y) on one side's sidewalk, ``offset`` metres behind the curb face."""
        for _ in range(40):
            x = float(self.rng.uniform(-self.half, self.half))
            y = side * (self.road[side] + offset)
            corners = rectangle_corners(x, y, size, size, 0.0)
            if self.occupied.free(corners):
                self.occupied.take(corners)
                return x, y
        return None

    def street_light(self, side: int) -> None:
        rng, o, w = self.rng, self.o["street_light"], self.world
        spot = self.on_sidewalk(side, self.curb_w + 0.45, 0.4)
        if spot is None:
            return
        height, r, arm = uniform(rng, o["height_m"]), uniform(rng, o["radius_m"]), uniform(rng, o["arm_m"])
        # Local frame: +y points across the road (towards the centre line).
        fr = Frame((spot[0], spot[1], self.curb_h), 0.0 if side < 0 else np.pi)
        material = pick(rng, "pole")
        w.add(fr.cylinder((0.0, 0.0, 0.0), (0.0, 0.0, 0.6), r * 1.4), "pole", material)  # base plinth
        w.add(fr.cylinder((0.0, 0.0, 0.6), (0.0, 0.0, height * 0.55), r), "pole", material)
        w.add(
            fr.cylinder((0.0, 0.0, height * 0.55), (0.0, 0.0, height), r * uniform(rng, o["taper"])), "pole", material
        )
        arms = (1, -1) if rng.random() < o["double_probability"] else (1,)
        for direction in arms:
            rise = np.radians(uniform(rng, o["arm_rise_deg"]))
            end = (0.0, direction * arm * np.cos(rise), height - 0.15 + arm * np.sin(rise))
            w.add(fr.cylinder((0.0, 0.0, height - 0.15), end, 0.045), "pole", material)
            head = uniform(rng, o["head_m"])
            hy = end[1] + direction * head / 2
            w.add(
                fr.box((-0.14, 0.14), (hy - head / 2, hy + head / 2), (end[2] - 0.14, end[2])), "pole", "lamp housing"
            )

    def sign(self, side: int) -> None:
        rng, o, w = self.rng, self.o["sign"], self.world
        spot = self.on_sidewalk(side, self.curb_w + 0.35, 0.3)
        if spot is None:
            return
        height, r, plate = uniform(rng, o["height_m"]), uniform(rng, o["radius_m"]), uniform(rng, o["plate_m"])
        fr = Frame((spot[0], spot[1], self.curb_h), 0.0)
        w.add(fr.cylinder((0.0, 0.0, 0.0), (0.0, 0.0, height), r), "pole", pick(rng, "pole"))
        # The plate faces along the street, towards the traffic, just in front of the post.
        zc = height - plate / 2
        if rng.random() < o["round_probability"]:
            w.add(fr.cylinder((r, 0.0, zc), (r + 0.02, 0.0, zc), plate / 2), "pole", pick(rng, "sign"))
        else:
            w.add(
                fr.box((r, r + 0.02), (-plate / 2, plate / 2), (zc - plate * 0.4, zc + plate * 0.4)),
                "pole",
                pick(rng, "sign"),
            )

    def bollard(self, side: int) -> None:
        rng, o, w = self.rng, self.o["bollard"], self.world
        spot = self.on_sidewalk(side, self.curb_w + 0.3, 0.2)
        if spot is None:
            return
        height, r = uniform(rng, o["height_m"]), uniform(rng, o["radius_m"])
        material = pick(rng, "pole")
        w.add(Frame((spot[0], spot[1], self.curb_h)).cylinder((0.0, 0.0, 0.0), (0.0, 0.0, height), r), "pole", material)

    def tree(self, side: int) -> None:
        rng, o, w = self.rng, self.o["tree"], self.world
        spot = self.on_sidewalk(side, self.curb_w + self.walk[side] * float(rng.uniform(0.35, 0.75)), 0.8)
        if spot is None:
            return
        trunk, r, lean = uniform(rng, o["trunk_m"]), uniform(rng, o["trunk_radius_m"]), uniform(rng, o["lean_m"])
        crown = uniform(rng, o["crown_m"])
        fr = Frame((spot[0], spot[1], self.curb_h), float(rng.uniform(0, 2 * np.pi)))
        top = (lean, 0.0, trunk)
        w.add(fr.cylinder((0.0, 0.0, 0.0), top, r), "vegetation", "bark")
        for k in range(integer(rng, o["branches"])):
            a = 2 * np.pi * k / 3 + float(rng.normal(0, 0.4))
            reach = crown * float(rng.uniform(0.4, 0.8))
            end = (lean + reach * np.cos(a), reach * np.sin(a), trunk + crown * float(rng.uniform(0.3, 0.8)))
            w.add(fr.cylinder(top, end, r * 0.45), "vegetation", "bark")
        leaves = pick(rng, "leaves")
        for _ in range(integer(rng, o["blobs"])):
            c = (
                lean + float(rng.normal(0, crown * 0.35)),
                float(rng.normal(0, crown * 0.35)),
                trunk + crown * float(rng.uniform(0.5, 1.1)),
            )
            radii = tuple(float(v) for v in crown * rng.uniform(0.35, 0.65, 3))
            w.add(fr.ellipsoid(c, radii), "vegetation", leaves, porous=True)

    def pedestrian(self, side: int) -> None:
        rng, o, w = self.rng, self.o["pedestrian"], self.world
        if rng.random() < 0.1:  # crossing the road
            x = float(rng.uniform(-self.half, self.half))
            y, z = float(rng.uniform(-self.road[-1] + 0.5, self.road[1] - 0.5)), 0.0
            corners = rectangle_corners(x, y, 0.4, 0.4, 0.0)
            if not self.occupied.free(corners):
                return
            self.occupied.take(corners)
        else:
            spot = self.on_sidewalk(side, self.curb_w + self.walk[side] * float(rng.uniform(0.2, 0.9)), 0.35)
            if spot is None:
                return
            (x, y), z = spot, self.curb_h
        height, stride = uniform(rng, o["height_m"]), uniform(rng, o["stride_m"])
        heading = float(rng.choice([0.0, np.pi])) + float(rng.normal(0, 0.4))
        fr = Frame((x, y, z), heading)  # local +x: the walking direction
        hip = 0.52 * height
        clothes, skin = pick(rng, "clothes"), pick(rng, "skin")
        legs = pick(rng, "clothes")
        for sy, forward in ((-0.09, stride / 2), (0.09, -stride / 2)):
            w.add(fr.cylinder((forward, sy, 0.05), (0.0, sy, hip), 0.065), "pedestrian", legs)
            w.add(
                fr.box((forward - 0.05, forward + 0.18), (sy - 0.05, sy + 0.05), (0.0, 0.07)),
                "pedestrian",
                "black coat",
            )
        torso_h = 0.3 * height
        w.add(fr.ellipsoid((0.0, 0.0, hip + torso_h / 2), (0.13, 0.21, torso_h / 2 + 0.04)), "pedestrian", clothes)
        shoulder = hip + torso_h
        for sy, swing in ((-0.24, -stride / 2), (0.24, stride / 2)):
            w.add(
                fr.cylinder((0.0, sy, shoulder - 0.04), (swing * 0.6, sy * 1.1, hip - 0.05), 0.045),
                "pedestrian",
                clothes,
            )
        w.add(fr.cylinder((0.0, 0.0, shoulder - 0.02), (0.0, 0.0, shoulder + 0.08), 0.05), "pedestrian", skin)
        w.add(fr.ellipsoid((0.01, 0.0, shoulder + 0.17), (0.1, 0.085, 0.115)), "pedestrian", skin)
        w.add(fr.ellipsoid((-0.02, 0.0, shoulder + 0.22), (0.1, 0.09, 0.07)), "pedestrian", "hair")
        if rng.random() < 0.3:  # a bag on one side
            w.add(fr.ellipsoid((0.0, 0.3, hip - 0.05), (0.14, 0.06, 0.17)), "pedestrian", pick(rng, "clothes"))

    # -- vehicles ----------------------------------------------------------------------------------

    def vehicle_spot(self, side: int, length: float, width: float) -> Frame | None:
        """A frame for a vehicle: parked in this side's parking lane (along it, or at an angle) or
        driving in one of its lanes; local +x is the vehicle's front."""
        rng, o = self.rng, self.o
        for _ in range(40):
            x = float(rng.uniform(-self.half, self.half))
            moving = not self.parking[side] or rng.random() < o["moving_probability"]
            if moving:
                lane = int(rng.integers(self.lanes[side]))
                y = side * (lane + 0.5) * self.lane
                yaw = (np.pi if side > 0 else 0.0) + float(rng.normal(0, 0.02))
            else:
                y = side * (self.lanes[side] * self.lane + self.parking[side] / 2)
                if rng.random() < o["angle_parking_probability"]:
                    yaw = float(rng.choice([1, -1])) * np.radians(float(rng.uniform(35, 60)))
                    y = side * (self.road[side] - np.sin(abs(yaw)) * length / 2 - 0.2)
                else:
                    yaw = (np.pi if side > 0 else 0.0) + float(rng.normal(0, 0.04))
            corners = rectangle_corners(x, y, length / 2 + 0.3, width / 2 + 0.2, yaw)
            if self.occupied.free(corners):
                self.occupied.take(corners)
                return Frame((x, y, 0.0), yaw)
        return None

    def wheels(self, fr: Frame, axles: list[float], width: float, radius: float) -> None:
        for ax in axles:
            for sy in (-1, 1):
                y_out = sy * (width / 2 - 0.02)
                self.world.add(
                    fr.cylinder((ax, y_out, radius), (ax, y_out - sy * 0.22, radius), radius), "car", "tyre rubber"
                )

    def sedan(self, side: int) -> None:
        rng, o, w = self.rng, self.o["sedan"], self.world
        length, width = uniform(rng, o["length_m"]), uniform(rng, o["width_m"])
        fr = self.vehicle_spot(side, length, width)
        if fr is None:
            return
        body, cabin, wr = uniform(rng, o["body_m"]), uniform(rng, o["cabin_m"]), uniform(rng, o["wheel_radius_m"])
        paint = pick(rng, "car_paint")
        floor = wr * 0.6
        w.add(fr.box((-length / 2, length / 2), (-width / 2, width / 2), (floor, floor + body)), "car", paint)
        w.add(
            fr.ellipsoid((-length * 0.05, 0.0, floor + body), (length * 0.3, width / 2 - 0.06, cabin)),
            "car",
            "tinted glass",
        )
        w.add(
            fr.box(
                (-length * 0.22, length * 0.12),
                (-width / 2 + 0.1, width / 2 - 0.1),
                (floor + body, floor + body + cabin * 0.92),
            ),
            "car",
            paint,
        )  # the roof, inside the glass but for its top
        for sx in (-1, 1):  # bumpers
            w.add(
                fr.box(
                    (sx * length / 2 - 0.05, sx * length / 2 + 0.05),
                    (-width / 2 + 0.05, width / 2 - 0.05),
                    (floor, floor + 0.2),
                ),
                "car",
                "black plastic",
            )
        for sy in (-1, 1):  # mirrors
            w.add(
                fr.box(
                    (length * 0.18, length * 0.22),
                    (sy * width / 2, sy * (width / 2 + 0.12)),
                    (floor + body, floor + body + 0.1),
                ),
                "car",
                paint,
            )
        self.wheels(fr, [-length / 2 + 0.8, length / 2 - 0.85], width, wr)

    def van(self, side: int) -> None:
        rng, o, w = self.rng, self.o["van"], self.world
        length, width, height = uniform(rng, o["length_m"]), uniform(rng, o["width_m"]), uniform(rng, o["height_m"])
        fr = self.vehicle_spot(side, length, width)
        if fr is None:
            return
        wr = uniform(rng, o["wheel_radius_m"])
        paint = pick(rng, "car_paint")
        floor = wr * 0.7
        nose = 0.9
        w.add(fr.box((-length / 2, length / 2 - nose), (-width / 2, width / 2), (floor, height)), "car", paint)
        w.add(fr.ellipsoid((length / 2 - nose, 0.0, floor + 0.45), (nose, width / 2 - 0.02, 0.55)), "car", paint)
        w.add(
            fr.box(
                (length / 2 - nose - 0.02, length / 2 - nose + 0.45),
                (-width / 2 + 0.08, width / 2 - 0.08),
                (floor + 0.95, height - 0.25),
            ),
            "car",
            "tinted glass",
        )
        for sy in (-1, 1):
            w.add(
                fr.box(
                    (length / 2 - nose - 0.8, length / 2 - nose - 0.1),
                    (sy * width / 2 - 0.01, sy * width / 2 + 0.01),
                    (floor + 1.0, height - 0.3),
                ),
                "car",
                "tinted glass",
            )
        self.wheels(fr, [-length / 2 + 1.0, length / 2 - nose - 0.3], width, wr)

    def bus(self, side: int) -> None:
        rng, o, w = self.rng, self.o["bus"], self.world
        length, width, height = uniform(rng, o["length_m"]), uniform(rng, o["width_m"]), uniform(rng, o["height_m"])
        fr = self.vehicle_spot(side, length, width)
        if fr is None:
            return
        wr = uniform(rng, o["wheel_radius_m"])
        paint = pick(rng, "bus_paint")
        floor = 0.32
        w.add(fr.box((-length / 2, length / 2), (-width / 2, width / 2), (floor, height)), "car", paint)
        for sy in (-1, 1):  # the window band
            w.add(
                fr.box(
                    (-length / 2 + 0.6, length / 2 - 0.4),
                    (sy * width / 2 - 0.01, sy * width / 2 + 0.01),
                    (1.25, height - 0.35),
                ),
                "car",
                "tinted glass",
            )
        w.add(
            fr.box((length / 2 - 0.01, length / 2 + 0.01), (-width / 2 + 0.1, width / 2 - 0.1), (1.0, height - 0.3)),
            "car",
            "tinted glass",
        )
        w.add(
            fr.box((-1.0, 1.0), (-width / 2 + 0.2, width / 2 - 0.2), (height, height + 0.3)), "car", "white plastic"
        )  # roof unit
        self.wheels(fr, [-length / 2 + 2.6, length / 2 - 2.4], width, wr)

    def bike(self, side: int) -> None:
        rng, o, w = self.rng, self.o["bike"], self.world
        spot = self.on_sidewalk(side, self.curb_w + 0.5, 0.9)
        if spot is None:
            return
        r, base, tube = (
            uniform(rng, o["wheel_radius_m"]),
            uniform(rng, o["wheelbase_m"]),
            uniform(rng, o["tube_radius_m"]),
        )
        fr = Frame((spot[0], spot[1], self.curb_h), float(rng.uniform(0, 2 * np.pi)))
        frame = pick(rng, "bike")
        rear, front = (-base / 2, 0.0, r), (base / 2, 0.0, r)
        for hub in (rear, front):  # a tyre as a ring of twelve short tubes
            ring = [(hub[0] + r * np.cos(a), 0.0, hub[2] + r * np.sin(a)) for a in np.linspace(0, 2 * np.pi, 13)]
            for a, b in itertools.pairwise(ring):
                w.add(fr.cylinder(a, b, 0.018), "car", "tyre rubber")
        crank = (-base / 2 + 0.42, 0.0, r - 0.05)
        seat = (-base / 2 + 0.3, 0.0, r + 0.55)
        head = (base / 2 - 0.15, 0.0, r + 0.5)
        for a, b in ((rear, crank), (rear, seat), (crank, seat), (crank, head), (seat, head), (head, front)):
            w.add(fr.cylinder(a, b, tube), "car", frame)
        w.add(fr.ellipsoid((seat[0], 0.0, seat[2] + 0.05), (0.13, 0.06, 0.03)), "car", "black plastic")
        w.add(fr.cylinder((head[0], -0.25, head[2] + 0.12), (head[0], 0.25, head[2] + 0.12), tube), "car", frame)

    def populate(self) -> None:
        rng, p = self.rng, self.p
        span = 2 * self.half
        for name in ("street_light", "sign", "bollard", "tree", "hedge", "pedestrian", "bus", "van", "sedan", "bike"):
            total = how_many(rng, p["per_100_m"][name] / 100.0, span, p["at_least"].get(name, 0))
            for k in range(total):
                getattr(self, name)(-1 if k % 2 == 0 else 1)
        # Scanner positions: free spots in the lanes near the middle of the street.
        for _ in range(40):
            x = float(rng.uniform(-self.half / 3, self.half / 3))
            side = -1 if rng.random() < 0.5 else 1
            y = side * (float(rng.integers(self.lanes[side])) + 0.5) * self.lane
            if self.occupied.free(rectangle_corners(x, y, 2.5, 1.0, 0.0)):
                self.world.stations.append((x, y))


def street(rng: np.random.Generator) -> World:
    """One street drawn from the family's parameters."""
    state = _Street(rng)
    state.ground()
    state.populate()
    for side in (-1, 1):
        state.buildings(side)
    return state.world
