"""The held-out scene family (bench/heldout_scenes): independent of SynMix, frozen, deterministic,
labelled with what each scan declares, and evaluated the way the segmenting job reads files."""

from __future__ import annotations

import ast
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.heldout_scenes import DECLARED_COARSE, KIND_LABELS, make_scan, specs, tier_scans
from bench.heldout_scenes.params import PATH as PARAMETERS
from bench.heldout_scenes.scans import COARSE_ID, RAY_CAST, SURFACE_SAMPLED
from bench.heldout_scenes.shapes import Box, Cylinder, Ellipsoid
from mlcore.pointcloud.labels import COARSE, LABELS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "bench" / "heldout_scenes"
#: SynMix's generator and the modules built on it: nothing of these may reach the family's scenes.
SYNMIX = {
    "mlcore.pointcloud.scenes",
    "mlcore.pointcloud.sensors",
    "mlcore.pointcloud.datasets",
    "mlcore.pointcloud.samples",
    "mlcore.pointcloud.user_samples",
    "mlcore.pointcloud.user_scans",
}
#: The sha256 of parameters.json as fixed before the family's first evaluation. A change to the
#: family's parameters must show up in review as a change to this line.
PARAMETERS_SHA256 = "a4259daf615cb756ac0652bba50a1c38191f92a5ddf9122eb11929c75d8543d5"
#: Streets take seconds to make (tens of seconds when sampled from surfaces: a visibility ray per point).
SLOW_SCANS = {"street-0", "street-1", "street-2", "street-3"}


def _module_file(name: str) -> Path | None:
    path = ROOT.joinpath(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(path: Path, module: str) -> set[str]:
    """Every module an import statement in ``path`` names (inside functions too), absolute, with the
    packages whose ``__init__`` importing it runs."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)  # "from pkg import module"
    found = set()
    for name in names:
        parts = name.split(".")
        found.update(".".join(parts[: i + 1]) for i in range(len(parts)))
    return found


def _closure(modules: set[str]) -> set[str]:
    """The project modules (mlcore, bench) reachable from ``modules`` through import statements."""
    seen: set[str] = set()
    todo = list(modules)
    while todo:
        name = todo.pop()
        if name in seen or name.split(".")[0] not in ("mlcore", "bench"):
            continue
        path = _module_file(name)
        if path is None:
            continue  # a name imported from a module, not a module
        seen.add(name)
        todo.extend(_imports(path, name) - seen)
    return seen


GENERATOR = sorted(f"bench.heldout_scenes.{p.stem}" for p in PACKAGE.glob("*.py") if p.stem not in ("evaluate",))


def test_the_generator_reaches_no_synmix_module_through_any_chain_of_imports() -> None:
    reached = _closure({*GENERATOR, "bench.heldout_scenes"})
    assert not reached & SYNMIX
    # Of the library, only the label space (a taxonomy, not generator code) and its packages.
    assert {m for m in reached if m.startswith("mlcore")} == {"mlcore", "mlcore.pointcloud", "mlcore.pointcloud.labels"}
    assert "bench.heldout_scenes.evaluate" not in reached


def test_the_import_walk_would_catch_a_synmix_import_hidden_two_modules_away(tmp_path) -> None:
    # The walk itself: the evaluation module reaches SynMix through the segmenter (load_segmenter →
    # pipeline → datasets), which is why it is the one module kept apart from the generator.
    assert "mlcore.pointcloud.datasets" in _closure({"bench.heldout_scenes.evaluate"})


def test_the_evaluation_module_imports_no_synmix_module_itself() -> None:
    direct = _imports(PACKAGE / "evaluate.py", "bench.heldout_scenes.evaluate")
    assert not direct & SYNMIX


def test_importing_the_generator_loads_no_synmix_module() -> None:
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in GENERATOR)
        + "print(sorted(m for m in sys.modules if m.startswith('mlcore')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.strip() == "['mlcore', 'mlcore.pointcloud', 'mlcore.pointcloud.labels']"


def test_the_parameters_are_the_ones_fixed_before_the_first_evaluation() -> None:
    assert hashlib.sha256(PARAMETERS.read_bytes()).hexdigest() == PARAMETERS_SHA256


def _fingerprint(scan) -> str:
    digest = hashlib.sha256()
    for array in (scan.xyz, scan.rgb, scan.intensity, scan.labels):
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


@pytest.mark.parametrize("name", ["room-0", "room-1"])
def test_a_scan_is_the_same_every_time_its_seed_is_drawn(name: str) -> None:
    first = _fingerprint(make_scan(name))
    make_scan.cache_clear()
    assert _fingerprint(make_scan(name)) == first


def test_a_street_is_the_same_every_time_its_seed_is_drawn() -> None:
    from bench.heldout_scenes.streets import street

    def parts(seed: int) -> list:
        return street(np.random.default_rng([seed, 0])).parts

    assert parts(620731) == parts(620731)
    assert parts(620731) != parts(620732)


def test_every_scan_has_a_seed_of_its_own_and_different_seeds_give_different_scenes() -> None:
    seeds = [s["seed"] for s in specs().values()]
    assert len(set(seeds)) == len(seeds)
    assert _fingerprint(make_scan("room-0")) != _fingerprint(make_scan("room-2"))


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_SCANS else n for n in specs()])
def test_every_scan_holds_each_coarse_class_it_declares_with_valid_labels(name: str) -> None:
    scan = make_scan(name)
    assert scan.labels.dtype == np.int32 and scan.labels.shape == (len(scan),)
    # Fine labels: master ids of the scan kind's classes (rooms get no street class and the reverse).
    allowed = {LABELS.index(c) for c in KIND_LABELS[scan.kind]}
    assert set(np.unique(scan.labels).tolist()) <= allowed
    present = {COARSE[c] for c in np.unique(COARSE_ID[scan.labels])}
    assert set(DECLARED_COARSE[scan.kind]) <= present
    assert np.isfinite(scan.xyz).all() and scan.rgb.dtype == np.uint8
    assert scan.intensity.min() >= 0 and scan.intensity.max() <= 1


def test_both_surface_sampled_and_ray_cast_scans_exist_for_rooms_and_streets() -> None:
    for kind in ("room", "street"):
        sensors = {s["sensor"] for s in specs().values() if s["kind"] == kind}
        assert sensors & set(SURFACE_SAMPLED) and sensors & set(RAY_CAST)
    quick = {specs()[n]["sensor"] for n in tier_scans("quick")}
    assert quick & set(SURFACE_SAMPLED) and quick & set(RAY_CAST)


def test_the_lidar_crowds_its_beams_around_the_horizon() -> None:
    from bench.heldout_scenes.params import section
    from bench.heldout_scenes.scanners import beam_elevations

    s = section("sensors", "lidar")
    beams = beam_elevations(s)
    assert len(beams) == s["beams"] and np.all(np.diff(beams) > 0)
    lo, hi = s["dense_band_deg"]
    band = (beams >= lo) & (beams <= hi)
    spacing = np.diff(beams)
    assert band.mean() >= s["dense_band_share"] - 0.05
    assert spacing[band[1:] & band[:-1]].max() < spacing[~(band[1:] & band[:-1])].min()


# -- the solids ------------------------------------------------------------------------------------

SOLIDS = [
    Box((1.0, 2.0, 0.5), (0.4, 0.2, 0.5), yaw=0.7),
    Cylinder((0.0, 0.0, 1.0), (1.0, 0.5, 2.0), 0.3),
    Ellipsoid((0.5, -1.0, 1.0), (0.6, 0.3, 0.4), yaw=-0.4),
]


@pytest.mark.parametrize("solid", SOLIDS, ids=lambda s: type(s).__name__)
def test_sampled_points_lie_on_the_surface_and_rays_towards_them_stop_there(solid) -> None:
    points, normals = solid.sample(np.random.default_rng(0), 2000)
    assert solid.contains(points, margin=1e-6).all()
    assert not solid.contains(points + 1e-3 * normals, margin=0.0).any()  # normals point outwards
    origin = np.array([5.0, 5.0, 5.0])
    dist = np.linalg.norm(points - origin, axis=1)
    dirs = (points - origin) / dist[:, None]
    t, hit_normal = solid.intersect(origin, dirs)
    cos = (normals * -dirs).sum(1)
    front, back = cos > 0.05, cos < -0.05
    # A convex solid: a point on a face turned to the ray's origin is where the ray enters, with
    # that face's normal; a point on a face turned away lies behind the entry.
    assert np.allclose(t[front], dist[front], atol=1e-6)
    assert np.allclose(hit_normal[front], normals[front], atol=1e-6)
    assert np.all(t[back] < dist[back] - 1e-6)


def test_a_box_is_sampled_in_proportion_to_its_faces_areas() -> None:
    box = Box((0.0, 0.0, 0.0), (1.0, 0.5, 0.25), yaw=0.3)
    _, normals = box.sample(np.random.default_rng(3), 60_000)
    local = normals @ box.rotation
    share = np.abs(local).argmax(1)
    hx, hy, hz = box.half
    areas = np.array([hy * hz, hx * hz, hx * hy])
    assert np.allclose(np.bincount(share, minlength=3) / len(share), areas / areas.sum(), atol=0.01)


def test_a_cylinder_puts_on_its_caps_their_share_of_the_area() -> None:
    cyl = Cylinder((0.0, 0.0, 0.0), (0.0, 2.0, 1.0), 0.4)
    _, normals = cyl.sample(np.random.default_rng(4), 60_000)
    axis = np.array([0.0, 2.0, 1.0]) / np.sqrt(5.0)
    on_caps = np.abs(normals @ axis) > 0.99
    assert abs(on_caps.mean() - 2 * np.pi * 0.4**2 / cyl.area()) < 0.01


def test_an_ellipsoid_is_sampled_uniformly_over_its_area_not_its_angles() -> None:
    a, b = 2.0, 0.5  # a prolate spheroid along x: its area per unit x is 2πb·sqrt(1 − x²/a² + b²x²/a⁴)
    spheroid = Ellipsoid((0.0, 0.0, 0.0), (a, b, b))
    x = np.linspace(-a, a, 200_001)
    per_x = 2 * np.pi * b * np.sqrt(1 - x**2 / a**2 + b**2 * x**2 / a**4)
    middle = np.abs(x) < 1.0
    expected = per_x[middle].sum() / per_x.sum()
    points, _ = spheroid.sample(np.random.default_rng(5), 60_000)
    assert abs((np.abs(points[:, 0]) < 1.0).mean() - expected) < 0.01
    assert abs(spheroid.area() / (per_x.sum() * (x[1] - x[0])) - 1) < 0.01


# -- evaluation ------------------------------------------------------------------------------------


def test_pooled_miou_counts_only_classes_present_in_the_truth() -> None:
    from bench.heldout_scenes.evaluate import confusion, miou

    truth = np.array([0, 0, 1, 1])
    pred = np.array([0, 2, 1, 1])  # class 2 is predicted but absent: it lowers class 0's IoU only
    value, per_class = miou(confusion(pred, truth, 3), ("a", "b", "c"))
    assert per_class == {"a": 0.5, "b": 1.0}
    assert value == 0.75


def test_a_room_file_is_segmented_as_the_job_does_indoors_with_its_colour(tmp_path) -> None:
    from bench.heldout_scenes.evaluate import DIAGNOSTIC, evaluate_scan, load_zoo
    from bench.heldout_scenes.scans import HeldoutScan

    full = make_scan("room-0")
    keep = np.random.default_rng(0).permutation(len(full))[:4000]
    arrays = (full.xyz[keep], full.rgb[keep], full.intensity[keep], full.labels[keep])
    scan = HeldoutScan(full.name, full.kind, full.sensor, *arrays)
    model, config = load_zoo()
    rows = evaluate_scan(model, config, scan, ["XYZ (numpy)", "LAS 1.4 pf6 intensity, UTM offsets (laspy)"], tmp_path)
    by = {r["encoding"]: r for r in rows}
    assert set(by) == {"XYZ (numpy)", "LAS 1.4 pf6 intensity, UTM offsets (laspy)", DIAGNOSTIC}
    assert all(r["chosen_kind"] == "indoor" and r["grid"] == 0.04 for r in rows)
    # XYZ holds geometry only; LAS point format 6 has no colour, and the job uses no intensity indoors.
    assert by["XYZ (numpy)"]["attributes"] == "geometry"
    assert by["LAS 1.4 pf6 intensity, UTM offsets (laspy)"]["attributes"] == "geometry"
    assert by[DIAGNOSTIC]["attributes"] == "colour"
    for row in rows:
        fine = np.asarray(row["fine_confusion"])
        assert fine.sum() == len(scan) and np.asarray(row["coarse_confusion"]).sum() == len(scan)
        assert fine[:, [LABELS.index(c) for c in KIND_LABELS["street"]]].sum() == 0  # no street class predicted
        assert row["max_error_mm"] < 1.0
    assert not list(tmp_path.iterdir())  # the written files are removed


def _row(scan: str, kind: str, encoding: str, right: int) -> dict:
    """A row of one scan whose points of the kind's ground class are ``right`` in 10 (the rest wall)."""
    from bench.heldout_scenes.evaluate import DIAGNOSTIC

    k = len(LABELS)
    fine = np.zeros((k, k), int)
    truth = LABELS.index("floor" if kind == "room" else "road")
    fine[truth, truth] = right
    fine[truth, LABELS.index("wall" if kind == "room" else "building")] = 10 - right
    coarse = np.zeros((len(COARSE), len(COARSE)), int)
    for i in range(k):
        for j in range(k):
            coarse[COARSE_ID[i], COARSE_ID[j]] += fine[i, j]
    return {
        "scan": scan,
        "kind": kind,
        "sensor": "surface",
        "encoding": encoding,
        "diagnostic": encoding == DIAGNOSTIC,
        "attributes": "colour",
        "chosen_kind": "indoor" if kind == "room" else "outdoor",
        "fine_confusion": fine.tolist(),
        "coarse_confusion": coarse.tolist(),
    }


def test_the_report_keeps_the_diagnostic_apart_and_says_how_far_from_the_goal() -> None:
    from bench.heldout_scenes.evaluate import DIAGNOSTIC, GOAL, model_summary, report

    rows = [
        _row("room-0", "room", "PLY binary LE (own writer)", 9),
        _row("street-0", "street", "PLY binary LE (own writer)", 4),
        _row("room-0", "room", DIAGNOSTIC, 10),
        _row("street-0", "street", DIAGNOSTIC, 10),
    ]
    summary = model_summary(rows)
    assert set(summary["by_encoding"]) == {"room | PLY binary LE (own writer)", "street | PLY binary LE (own writer)"}
    text = report(
        {
            "tier": "quick",
            "parameters_sha256": PARAMETERS_SHA256,
            "scans": [],
            "zoo": {"source": "test", "summary": summary},
            "seconds": 1.0,
            "machine": {"platform": "test"},
        }
    )
    street = summary["by_encoding"]["street | PLY binary LE (own writer)"]["coarse_miou"]
    assert f"{GOAL - street:.3f} short of {GOAL}" in text
    assert "Diagnostic" in text and "✗" in text


def test_the_report_sets_each_variant_beside_the_recipe_with_its_synmix_fit_and_both_held_out_scores() -> None:
    from bench.heldout_scenes.evaluate import GEOMETRY, REFERENCE, model_summary, report, seed_table

    def trained(right: int, geometry_right: int, seen: float) -> dict:
        per_seed = {}
        for seed in (0, 1):
            rows = [_row("room-0", "room", REFERENCE, right), _row("room-0", "room", GEOMETRY, geometry_right)]
            per_seed[seed] = model_summary(rows)
        synmix = {seed: {"A": seen, "B": seen, "C": seen, "D": seen, "E": 0.5, "F": 0.3} for seed in (0, 1)}
        return {"seeds": [0, 1], "note": "test", "per_seed": per_seed, "table": seed_table(per_seed), "synmix": synmix}

    recipe = trained(9, 5, 0.6)
    longer = trained(6, 2, 0.9)
    summary = model_summary([_row("room-0", "room", REFERENCE, 9)])
    text = report(
        {
            "tier": "full",
            "parameters_sha256": PARAMETERS_SHA256,
            "scans": [],
            "zoo": {"source": "test", "summary": summary},
            "seeds": recipe,
            "variants": {"longer": {**longer, "changes": {"steps": 1500}}},
            "seconds": 1.0,
            "machine": {"platform": "test"},
        }
    )
    table = text.split("## The recipe beside other trainings")[1].split("Coarse IoU per class")[0]
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines() if line.startswith("| ")}
    # SynMix: seen 0.9, zero-shot the mean of E and F. Held out: only ground is in the truth, so the
    # coarse mIoU is its IoU, 6 of 10 points with the attributes and 2 of 10 without.
    assert "| longer | 2 | 0.900 ± 0.000 | 0.400 ± 0.000 |" in rows["longer"]
    assert rows["longer"].endswith("| 0.600 ± 0.000 | 0.200 ± 0.000 |")
    zoo_row = rows["the zoo recipe (pointmoe-synmix)"]
    assert zoo_row.startswith("| the zoo recipe (pointmoe-synmix) | 2 | 0.600 ± 0.000")
    assert zoo_row.endswith("| 0.900 ± 0.000 | 0.500 ± 0.000 |")
    assert "| longer | room | ground 0.60 |" in text


def test_a_retired_variant_is_carried_over_from_the_last_report_and_marked_as_such(tmp_path) -> None:
    from bench.heldout_scenes.evaluate import VARIANTS, carry_variants, model_summary, report, seed_table

    per_seed = {0: model_summary([_row("room-0", "room", "PLY binary LE (own writer)", 7)])}
    old = {"changes": {"steps": 1500}, "per_seed": per_seed, "table": seed_table(per_seed), "synmix": {}}
    current = next(iter(VARIANTS))
    previous = tmp_path / "pointcloud-heldout.json"
    last = {"tier": "full", "written_at": "2026-12-05T22:18:58+00:00", "code_digest": "c04f88347e8d"}
    previous.write_text(json.dumps({**last, "variants": {"card budget": old, current: old}}))
    result = {"tier": "full", "variants": {current: {**old, "changes": VARIANTS[current]}}}
    carry_variants(result, previous)
    assert set(result["variants"]) == {"card budget", current}
    assert "carried_over" not in result["variants"][current]  # measured by this run: never replaced
    assert result["variants"]["card budget"]["carried_over"]["code_digest"] == "c04f88347e8d"
    # A quick report carries nothing from a full one.
    quick = {"tier": "quick", "variants": {}}
    carry_variants(quick, previous)
    assert quick["variants"] == {}

    text = report(
        {
            "tier": "full",
            "parameters_sha256": PARAMETERS_SHA256,
            "scans": [],
            "zoo": {"source": "test", "summary": per_seed[0]},
            "seeds": {"seeds": [0], "note": "test", "per_seed": per_seed, "table": seed_table(per_seed), "synmix": {}},
            "variants": result["variants"],
            "seconds": 1.0,
            "machine": {"platform": "test"},
        }
    )
    assert "| card budget (carried over) | 1 |" in text
    assert "*Carried over*: card budget: measured on 2026-12-05T22:18:58+00:00 by code `c04f88347e8d`" in text
