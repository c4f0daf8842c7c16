"""Verification latency and throughput ("goal p95 under 500 ms end to end through the
portal on CPU"). ``section(tier)`` is called by the watermark benchmark; ``run`` writes it alone
as ``bench/results/watermark-latency.md``.

Three measurements, each on the CPU:

1. **Portal, end to end**: anonymous POSTs to ``/verify/`` through Django's test client against a
   real verify worker process (``bench.portal``, run in a subprocess with its own
   database and broker): upload checks, rate limit, queue, decode, match, answer, page render.
   On the embedded default (SQLite + Kombu's file-system broker, which polls every 0.1 s)
   and, when ``MOELAB_BENCH_BROKER_URL`` names a Redis, on Redis as deployed. And ``make run``
   itself while a long ``moe-profile`` job keeps both cores busy (``bench.portal
   busy``): a 4-megapixel JPEG and a small PNG through the real HTTP endpoint, with the fraction
   of checks answered rather than told the verifier is busy.
2. **Worker component**: what a verify worker does per check (open the image, extractor, match
   against the keyring), in this process.
3. **Batch throughput**: images per second through one ``verify`` call (what a
   ``watermark-verify`` job does per batch).

Latencies are measured afresh every run (a cached latency would describe another machine state),
so nothing is cached under ``bench/cache``.
"""

from __future__ import annotations

import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import write_results
from webapp.portal.conf import DEFAULT_EXTRACTORS

ROOT = Path(__file__).resolve().parents[1]
TIERS = {
    "quick": {"checks": 20, "component": 50, "batch": 256, "keys": 100},
    "full": {"checks": 200, "component": 300, "batch": 2048, "keys": 1000},
}
GOAL_P95_MS = 500.0
#: 2000 × 2000 pixels: the 4-megapixel case of the portal's latency goal.
PHOTO_SIDE = 2000


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _image_bytes(size: int, fmt: str, seed: int) -> bytes:
    import numpy as np
    from PIL import Image

    buffer = io.BytesIO()
    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(buffer, fmt)
    return buffer.getvalue()


def photo_jpeg(side: int, seed: int) -> bytes:
    """A photograph's statistics, roughly: smooth shapes and a little sensor noise, so the file has a
    camera JPEG's size (about a megabyte at 4 megapixels) rather than random noise's."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    coarse = Image.fromarray(rng.integers(0, 256, (side // 50, side // 50, 3), dtype=np.uint8))
    smooth = np.asarray(coarse.resize((side, side), Image.Resampling.BICUBIC), dtype=np.int16)
    buffer = io.BytesIO()
    Image.fromarray((smooth + rng.integers(-12, 13, smooth.shape)).clip(0, 255).astype(np.uint8)).save(
        buffer, "JPEG", quality=90
    )
    return buffer.getvalue()


#: The portal's default extractors (``webapp.portal.conf.DEFAULT_EXTRACTORS``): every check reads with each.
PORTAL_EXTRACTORS = tuple(reference.removeprefix("zoo:") for reference in DEFAULT_EXTRACTORS.split(","))
#: The reader the portal's default gained last; the worker's 4-MP read is measured without it too, in the same
#: run, so what it costs is a ratio on one machine (it shares its extractor's tile reads with molm-photo-tiles').
NEWEST_READER = "molm-photo-parity"


def extractor_folders(workdir: Path, *, leave_out: str | None = None) -> tuple[list[Path], str]:
    """The portal's default extractors (less ``leave_out``) whose checkpoints are committed, else one of the same
    architecture with random weights (latency depends on the architecture and the reading mode, not on the
    weights)."""
    from mlcore.catalog import materialize
    from mlcore.jobs.references import builtin_items

    items = builtin_items()
    committed = [name for name in PORTAL_EXTRACTORS if name != leave_out and (ROOT / items[name].stamp).is_file()]
    if committed:
        return [materialize(items[name]) for name in committed], " + ".join(f"zoo:{name}" for name in committed)
    import torch

    from mlcore.watermark.extractor import Extractor

    torch.manual_seed(0)
    Extractor().save_pretrained(workdir / "extractor")
    return [workdir], "random-weight Extractor (default config; zoo checkpoint not committed yet)"


def _keyring(n: int, num_bits: int) -> list[Any]:
    import random

    from mlcore.watermark.keys import KeyRecord, new_key_bits

    rng = random.Random(0)
    bits: list[str] = []
    for _ in range(n):
        bits.append(new_key_bits(num_bits, bits, rng=rng))
    return [KeyRecord(id=str(i), name="", organisation=f"org {i % 50}", bits=b) for i, b in enumerate(bits)]


def component_latency(folders: list[Path], keys: int, repeats: int, *, only: str | None = None) -> dict[str, Any]:
    """A verify worker's part of a check: open the image, read it with every extractor, match (``only``: that
    image alone)."""
    from mlcore.watermark.readers import verify_all
    from mlcore.watermark.verification import cached_extractor, open_image

    extractors = [cached_extractor(folder) for folder in folders]
    ring = _keyring(keys, extractors[0].num_bits)

    def verify(images: list[Any]) -> None:
        verify_all(extractors, images, ring)

    out: dict[str, Any] = {}
    images = {
        "32px PNG": _image_bytes(32, "PNG", 0),
        "512px JPEG": _image_bytes(512, "JPEG", 1),
        "4 MP JPEG": photo_jpeg(PHOTO_SIDE, 1),
    }
    for label, data in images.items():
        if only is not None and label != only:
            continue
        verify([open_image(data)])  # warm-up
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            verify([open_image(data)])
            times.append(time.perf_counter() - started)
        out[label] = {"p50_ms": 1000 * statistics.median(times), "p95_ms": 1000 * _percentile(times, 0.95)}
    return out


def batch_throughput(folder: Path, keys: int, images: int) -> dict[str, Any]:
    import numpy as np
    from PIL import Image

    from mlcore.watermark.verification import cached_extractor, verify

    extractor = cached_extractor(folder)
    ring = _keyring(keys, extractor.num_bits)
    rng = np.random.default_rng(2)
    batch = [Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype="uint8")) for _ in range(images)]
    verify(extractor, batch[:16], ring)
    started = time.perf_counter()
    verify(extractor, batch, ring)
    seconds = time.perf_counter() - started
    return {"images": images, "seconds": seconds, "images_per_s": images / seconds}


def portal_latency(
    folders: list[Path], checks: int, keys: int, *, broker: str | None, busy: bool = False
) -> dict[str, Any]:
    """``bench.portal`` in a subprocess: the embedded default, or ``broker`` (Redis);
    ``busy``: ``make run`` with a long job running (always the embedded default)."""
    work = Path(tempfile.mkdtemp(prefix="portal-latency-"))
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL")}
    env.update(
        MOELAB_VAR_DIR=str(work / "var"),
        MOELAB_MEDIA_ROOT=str(work / "media"),
        MOELAB_WATERMARK_EXTRACTOR=",".join(map(str, folders)),
        MOELAB_PORTAL_RATE_PER_MINUTE="1000000",
        MOELAB_PORTAL_WAIT_SECONDS="300",
        MOELAB_MAX_TASKS_PER_CHILD="0",
        DJANGO_SETTINGS_MODULE="webapp.settings",
    )
    if broker:
        env["CELERY_BROKER_URL"] = broker
    mode = []
    if busy:
        # The web's own wait (15 s), so a check the verifier cannot take in time counts as unanswered.
        env.pop("MOELAB_PORTAL_WAIT_SECONDS")
        env["MOELAB_WATERMARK_DAILY_MATCH_BUDGET"] = "1000000"
        mode = ["busy"]
    done = subprocess.run(
        [sys.executable, "-m", "bench.portal", *mode, str(checks), str(keys)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the portal probe failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return json.loads(lines[-1].removeprefix("RESULT "))


def section(tier: str) -> tuple[str, dict[str, Any]]:
    """Markdown and data for the latency part of the watermark benchmark."""
    sizes = TIERS[tier]
    workdir = Path(tempfile.mkdtemp(prefix="wm-latency-"))
    folders, source = extractor_folders(workdir)
    data: dict[str, Any] = {"tier": tier, "extractor": source, "goal_p95_ms": GOAL_P95_MS}
    # Each configuration starts a worker that imports torch (tens of seconds on a busy CPU): the quick
    # tier measures one, Redis when given (as deployed), the full tier the embedded default as well.
    redis_url = os.environ.get("MOELAB_BENCH_BROKER_URL")
    brokers: list[tuple[str, str | None]] = [("embedded (SQLite + file-system broker)", None)]
    if redis_url:
        brokers = [("Redis broker", redis_url)] + (brokers if tier == "full" else [])
    data["portal"] = {}
    for label, broker in brokers:
        try:
            data["portal"][label] = portal_latency(folders, sizes["checks"], sizes["keys"], broker=broker)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            data["portal"][label] = {"error": str(exc)[-1500:]}
    try:
        data["busy"] = portal_latency(folders, sizes["checks"], sizes["keys"], broker=None, busy=True)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        data["busy"] = {"error": str(exc)[-1500:]}
    data["component"] = component_latency(folders, sizes["keys"], sizes["component"])
    before, before_source = extractor_folders(workdir, leave_out=NEWEST_READER)
    if len(before) < len(folders):
        data["component_before"] = {
            "extractors": before_source,
            **component_latency(before, sizes["keys"], sizes["component"], only="4 MP JPEG"),
        }
    data["batch"] = batch_throughput(folders[0], sizes["keys"], sizes["batch"])  # a job reads with one extractor

    rows = []
    for label, result in data["portal"].items():
        if "error" in result:
            rows.append(f"| portal end to end, {label} | failed: see JSON | | |")
            continue
        for image in ("32px PNG", "512px JPEG"):
            r = result[image]
            verdict = "meets" if r["p95_ms"] < GOAL_P95_MS else "misses"
            rows.append(
                f"| portal end to end, {label}, {image} | {r['p50_ms']:.0f} | {r['p95_ms']:.0f} | {verdict} the goal |"
            )
    for image, r in data["component"].items():
        rows.append(f"| worker: open + extract + match, {image} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | |")
    if "component_before" in data:
        r, now = data["component_before"]["4 MP JPEG"], data["component"]["4 MP JPEG"]
        rows.append(
            f"| worker, 4 MP JPEG, without zoo:{NEWEST_READER} (the default before it) | {r['p50_ms']:.1f} "
            f"| {r['p95_ms']:.1f} | with it: ×{now['p50_ms'] / r['p50_ms']:.2f} at p50 |"
        )
    busy = data["busy"]
    busy_rows = []
    if "error" in busy:
        busy_rows.append("| failed: see JSON | | | | | |")
    else:
        for image in ("4 MP JPEG", "32px PNG"):
            r = busy[image]
            verdict = "meets" if r["p95_ms"] <= GOAL_P95_MS and r["answered"] == 1 else "misses"
            busy_rows.append(
                f"| {image} ({busy['image_bytes'][image] / 1e6:.2f} MB) | {r['p50_ms']:.0f} | {r['p95_ms']:.0f} "
                f"| {r['max_ms']:.0f} | {r['answered']:.0%} | {verdict} the goal |"
            )
    first = [f"{label}: {r['first_check_s']:.1f} s" for label, r in data["portal"].items() if "first_check_s" in r]
    batch = data["batch"]
    markdown = "\n".join(
        [
            "## Verification latency (CPU)",
            "",
            f"Extractors: {source} (every check reads with each, as the portal's default does). Keyring: "
            f"{sizes['keys']} keys. {sizes['checks']} portal checks per image type; goal: p95 < {GOAL_P95_MS:.0f} ms "
            "end to end.",
            "",
            "| measurement | p50 ms | p95 ms | goal |",
            "|---|---:|---:|---|",
            *rows,
            "",
            f"Batch throughput (one `verify` call with the first extractor, as a `watermark-verify` job reads, "
            f"{batch['images']} 32×32 images, {sizes['keys']} keys): "
            f"**{batch['images_per_s']:.0f} images/s**.",
            "",
            "### The portal on `make run` while a long job runs",
            "",
            f"`scripts/run.sh` as a person starts it (SQLite, the file-system broker, the job worker at nice 10, "
            f"a separate verify worker), a `moe-profile` job in its timed rounds "
            f"({busy.get('job', {}).get('cores_used', float('nan')):.1f} cores busy with it during the checks), and "
            f"{sizes['checks']} anonymous checks per image through `POST /verify/` over HTTP; goal: p95 ≤ "
            f"{GOAL_P95_MS:.0f} ms, every check answered.",
            "",
            "| image | p50 ms | p95 ms | max ms | answered | goal |",
            "|---|---:|---:|---:|---:|---|",
            *busy_rows,
            "",
            "The first check on a fresh worker imports torch and loads the extractor "
            f"({'; '.join(first) or 'n/a'}); later checks reuse the loaded model. The file-system broker "
            "of the embedded default polls its queue folder every 0.1 s (`polling_interval` in "
            "webapp/settings.py), most of its end-to-end time; deployments use Redis.",
        ]
    )
    return markdown, data


def run(tier: str, results: Path) -> None:
    markdown, data = section(tier)
    write_results(results, "watermark-latency", "# Watermark verification latency\n\n" + markdown, data)
