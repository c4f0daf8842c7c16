"""Run every job kind once, through ``moelab run``, on inputs in the formats users bring.

    .venv/bin/python scripts/user-data-tour.py [--out DIR] [--only KIND ...] [--device cpu]

Why: the tests feed each kind the files its authors thought of; this tour makes the files a user
would make with the tools they have (transformers' ``save_pretrained`` of a tiny MoE in bfloat16,
Pillow photos with EXIF rotation and CMYK, laspy LAS and hand-written PLY scans, GIF and MP4 clips,
CSV/TSV/JSONL text with a byte-order mark and Windows line ends, a runs CSV, a networkx graph set)
and hands them to the same command line users run, one subprocess per kind, with the smallest
sensible settings. A kind that fails on these files is a bug; a refusal must be a sentence.

Writes a markdown table to stdout and ``DIR/tour.md`` + ``DIR/tour.json`` (per kind: the inputs
given, the outcome, one key metric from ``metrics.json``, wall seconds); the inputs stay in
``DIR/inputs`` and every job's output folder in ``DIR/runs/KIND``. Three kinds read what an earlier
one wrote, as a user would chain them: moe-planner the routing-analysis report, watermark-verify the
images watermark-embed marked (and watermark-generate made), video-generate the model video-train
trained. Exits 1 when a kind fails or is refused, the text reader misreads an input, or an artifact
names a folder of the machine that ran it (the repository, the cache, the output folder).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
ZOO_TOKENIZER = REPO / "mlcore" / "zoo" / "checkpoints" / "moe-lm-olmoe" / "tokenizer.json"
#: Keys as a user writes them for the zoo's molm-tiny markers, which read 48 bits.
KEY_BITS = "".join(str(b) for b in np.random.default_rng(26).integers(0, 2, 48))
OTHER_KEY_BITS = "".join(str(b) for b in np.random.default_rng(62).integers(0, 2, 48))


@dataclass
class Step:
    """One ``moelab run``: the kind, its ``--set`` values, its ``--input`` files and what they are."""

    kind: str
    sets: dict[str, str]
    inputs: list[tuple[str, Path]] = field(default_factory=list)
    described: str = "nothing to upload"
    #: Reads ``runs/KIND`` of an earlier step; fills ``sets``/``inputs`` from it just before running.
    after: str = ""
    chain: Callable[[Step, Path], str | None] | None = None
    #: Text uploads (file name → records written): the tour checks that the platform's text reader
    #: sees as many documents, since a misread table still "succeeds".
    texts: dict[str, int] = field(default_factory=dict)


@dataclass
class Result:
    kind: str
    inputs: str
    outcome: str
    metric: str
    seconds: float
    notes: list[str] = field(default_factory=list)
    detail: str = ""


# -- text as users export it ---------------------------------------------------------------------


def _topics() -> list[str]:
    """Real prose with commas, quotes and code: the stdlib's pydoc topics."""
    from pydoc_data.topics import topics

    return [topics[name].strip() for name in sorted(topics) if len(topics[name]) > 400]


def _paragraphs() -> list[str]:
    return [p.strip() for text in _topics() for p in text.split("\n\n") if len(p.strip()) > 80]


def _code_blocks() -> list[str]:
    """Python source as users paste it: the functions of a few stdlib modules."""
    import inspect
    import json as json_module
    import textwrap as textwrap_module

    blocks = []
    for module in (textwrap_module, json_module.decoder, json_module.encoder, csv):
        source = inspect.getsource(module)
        blocks += [b.strip() for b in source.split("\n\n\n") if len(b.strip()) > 80]
    return blocks


def write_bom_crlf(path: Path, text: str) -> Path:
    """As Windows tools save UTF-8: a byte-order mark and CRLF line ends."""
    path.write_bytes(b"\xef\xbb\xbf" + text.replace("\r\n", "\n").replace("\n", "\r\n").encode("utf-8"))
    return path


def calibration_csv(path: Path) -> Path:
    """A spreadsheet export: id, text, source; the text column quoted, holding commas and line breaks."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(["id", "text", "source"])
    for i, text in enumerate(_topics()[:40]):
        writer.writerow([i, text[:3000], "Python docs, topics"])
    return write_bom_crlf(path, buffer.getvalue())


def notes_jsonl(path: Path, count: int = 400) -> Path:
    """JSON Lines with a ``text`` field (and others), BOM and CRLF, as a notes app exports it."""
    paragraphs = _paragraphs()
    lines = [
        json.dumps({"id": i, "title": f"note {i}", "text": paragraphs[i % len(paragraphs)], "tags": ["docs"]})
        for i in range(count)
    ]
    return write_bom_crlf(path, "\n".join(lines) + "\n")


def docs_tsv(path: Path) -> Path:
    """A tab-separated table (title, text) with quoted fields, as spreadsheets save TSV."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter="\t", lineterminator="\n")
    writer.writerow(["title", "text"])
    for i, paragraph in enumerate(_paragraphs()[:300]):
        writer.writerow([f"paragraph {i}", paragraph])
    path.write_text(buffer.getvalue(), encoding="utf-8")
    return path


def plain_crlf(path: Path, blocks: list[str]) -> Path:
    return write_bom_crlf(path, "\n\n".join(blocks) + "\n")


def code_jsonl(path: Path) -> Path:
    """Source code as JSON Lines, one function or class per record (as a scraper writes it)."""
    path.write_text("".join(json.dumps({"text": b, "lang": "python"}) + "\n" for b in _code_blocks()))
    return path


def semicolon_csv(path: Path, texts: list[str]) -> Path:
    """A spreadsheet in a comma-decimal locale saves CSV with semicolons."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter=";", lineterminator="\r\n")
    writer.writerow(["text", "score"])
    for i, text in enumerate(texts):
        writer.writerow([text, f"{i % 5},5"])
    path.write_text(buffer.getvalue(), encoding="utf-8")
    return path


REVIEWS = (
    ("great coffee, friendly staff", "pos"),
    ("the soup was cold and bland", "neg"),
    ("lovely view, we will come back", "pos"),
    ("rude waiter; never again", "neg"),
    ("fresh bread and fast service", "pos"),
    ("overpriced, noisy and slow", "neg"),
    ("the best pancakes in town", "pos"),
    ("my order was wrong twice", "neg"),
)


def task_rows(count: int) -> list[tuple[str, str, str]]:
    """(text, label, split) rows of a two-label review task; every text distinct."""
    rows = []
    for i in range(count):
        text, label = REVIEWS[i % len(REVIEWS)]
        rows.append((f"review {i}: {text}", label, "test" if i % 5 == 4 else "train"))
    return rows


def task_tsv(path: Path) -> Path:
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter="\t", lineterminator="\r\n")
    writer.writerow(["text", "label", "split"])
    writer.writerows(task_rows(60))
    return write_bom_crlf(path, buffer.getvalue())


def task_jsonl(path: Path) -> Path:
    lines = [json.dumps({"text": text, "label": label}) for text, label, _ in task_rows(80)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# -- Hugging Face checkpoints as transformers saves them ----------------------------------------------


def hf_checkpoint(folder: Path, family: str, dtype: str) -> Path:
    """A tiny random MoE of ``family`` saved with save_pretrained in ``dtype``, with a fast tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
    from transformers.utils import logging

    logging.disable_progress_bar()

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(ZOO_TOKENIZER),
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        model_max_length=256,
    )
    special = {"bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0, "vocab_size": len(tokenizer)}
    shape = {
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 256,
    }
    if family == "qwen2_moe":
        from transformers import Qwen2MoeConfig

        config = Qwen2MoeConfig(
            **shape,
            **special,
            intermediate_size=128,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=64,
            num_experts=8,
            num_experts_per_tok=2,
        )
    elif family == "olmoe":
        from transformers import OlmoeConfig

        config = OlmoeConfig(**shape, **special, intermediate_size=32, num_experts=16, num_experts_per_tok=2)
    elif family == "mixtral":
        from transformers import MixtralConfig

        config = MixtralConfig(**shape, **special, intermediate_size=64, num_local_experts=4, num_experts_per_tok=2)
    elif family == "qwen3_moe":
        from transformers import Qwen3MoeConfig

        config = Qwen3MoeConfig(
            **shape, **special, head_dim=16, moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2
        )
    elif family == "granitemoe":
        from transformers import GraniteMoeConfig

        config = GraniteMoeConfig(**shape, **special, intermediate_size=32, num_local_experts=4, num_experts_per_tok=2)
    else:
        raise ValueError(family)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).to(getattr(torch, dtype))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def zipped(folder: Path, archive: Path, *, prefix: str = "") -> Path:
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                zf.write(path, f"{prefix}{path.relative_to(folder)}")
    return archive


def tarred(folder: Path, archive: Path, *, prefix: str = "", mode: str = "w") -> Path:
    with tarfile.open(archive, mode) as tar:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                tar.add(path, arcname=f"{prefix}{path.relative_to(folder)}")
    return archive


# -- planner and graph tables ------------------------------------------------------------------------


def runs_csv(path: Path) -> Path:
    """A lab's runs table: dense runs at four budgets and MoE runs over sparsity and granularity, with
    an extra free-text column (ignored by the planner), written as Excel writes CSV."""
    rng = np.random.default_rng(0)
    budgets = (1e15, 1e16, 1e17, 1e18)
    from mlcore.analysis.runs import REQUIRED

    header = [*REQUIRED, "budget", "notes"]
    rows: list[list[Any]] = []
    for c in budgets:
        rows.append(
            [f"dense-{c:.0e}", "dense", 1e6, 1e6, 1, 1, 0, 1, c / 6e6, c, 20 * c**-0.05, f"{c:.0e}", "baseline"]
        )
    for c in budgets:
        for experts in (4, 8, 16, 32, 64):
            for granularity in (1, 2, 4, 8):
                sparsity = experts / 2
                log_g = math.log(granularity)
                exponent = 0.55 + 0.01 * math.log(c / 1e15) + 0.1 * log_g - 0.03 * log_g**2
                el = sparsity**exponent * math.exp(rng.normal(scale=0.01))
                loss = 20 * (el * c) ** -0.05
                rows.append(
                    [
                        f"moe-E{experts}-G{granularity}-{c:.0e}",
                        "moe",
                        1e6 * experts / 2,
                        1e6,
                        experts,
                        2,
                        0,
                        granularity,
                        c / 6e6,
                        c,
                        round(loss, 6),
                        f"{c:.0e}",
                        "top-2, aux loss 0.01, seed 0",
                    ]
                )
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(header)
    writer.writerows(rows)
    return write_bom_crlf(path, buffer.getvalue())


def graphs_json(path: Path, count: int = 160) -> Path:
    """A moelab-graphs file built with networkx: is a 5-cycle or a 4-clique hung on a random tree?
    Training trees are small; the OOD splits hang the pattern on much larger trees (a size shift)."""
    import networkx as nx

    rng = np.random.default_rng(0)
    splits = ["train"] * 6 + ["id_val", "ood_val", "ood_test", "ood_test"]
    graphs = []
    for i in range(count):
        split = splits[i % len(splits)]
        label = int(rng.integers(2))
        size = int(rng.integers(6, 12) if split in ("train", "id_val") else rng.integers(25, 40))
        base = nx.random_labeled_tree(size, seed=int(rng.integers(1 << 30)))
        motif = nx.cycle_graph(5) if label == 0 else nx.complete_graph(4)
        graph = nx.disjoint_union(base, motif)
        graph.add_edge(int(rng.integers(size)), size)
        motif_edges = {tuple(sorted((u + size, v + size))) for u, v in motif.edges}
        edges = sorted(tuple(sorted(e)) for e in graph.edges)
        graphs.append(
            {
                "nodes": graph.number_of_nodes(),
                "edges": [list(e) for e in edges],
                "label": label,
                "split": split,
                "edge_mask": [int(e in motif_edges) for e in edges],
            }
        )
    doc = {"format": "moelab-graphs", "version": 1, "name": "cycles and cliques", "classes": ["cycle5", "clique4"]}
    path.write_text(json.dumps({**doc, "graphs": graphs}))
    return path


# -- photos, scans and clips ----------------------------------------------------------------------


def photo(width: int, height: int, seed: int) -> Any:
    """A photo-like RGB picture: a vertical colour gradient, a few soft discs and sensor noise."""
    from PIL import Image, ImageDraw, ImageFilter

    rng = np.random.default_rng(seed)
    y = np.linspace(0, 1, height)[:, None, None]
    top, bottom = rng.uniform(60, 220, 3), rng.uniform(20, 180, 3)
    pixels = np.broadcast_to(top * (1 - y) + bottom * y, (height, width, 3)).copy()
    image = Image.fromarray(pixels.astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(6):
        x0, y0 = rng.uniform(0, width), rng.uniform(0, height)
        r = rng.uniform(0.05, 0.3) * min(width, height)
        draw.ellipse((x0 - r, y0 - r, x0 + r, y0 + r), fill=tuple(int(v) for v in rng.uniform(0, 255, 3)))
    image = image.filter(ImageFilter.GaussianBlur(1.5))
    noisy = np.asarray(image, dtype=np.float32) + rng.normal(0, 4, (height, width, 3))
    return Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8))


def phone_jpeg(path: Path, seed: int) -> Path:
    """A phone photo: stored landscape with EXIF orientation 6 (shown rotated), camera make and model."""
    from PIL import Image

    image = photo(320, 240, seed)
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90° clockwise to display
    exif[0x010F], exif[0x0110] = "Pixel", "Pixel 8"
    image.save(path, "JPEG", quality=88, exif=exif.tobytes())
    return path


def photo_set(folder: Path) -> dict[str, Path]:
    """Photos as people keep them: an EXIF-rotated phone JPEG, a PNG with transparency, a WebP, a CMYK
    JPEG from a print workflow and a greyscale scan."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    photos = {"phone": phone_jpeg(folder / "IMG_2041.jpg", 1)}
    rgba = photo(256, 256, 2).convert("RGBA")
    alpha = np.full((256, 256), 255, np.uint8)
    alpha[:40, :40] = 0  # a transparent corner
    rgba.putalpha(Image.fromarray(alpha))
    photos["png"] = folder / "logo-on-photo.png"
    rgba.save(photos["png"])
    photos["webp"] = folder / "holiday.webp"
    photo(300, 200, 3).save(photos["webp"], "WEBP", quality=85)
    photos["cmyk"] = folder / "brochure-cmyk.jpg"
    photo(240, 180, 4).convert("CMYK").save(photos["cmyk"], "JPEG", quality=90)
    photos["grey"] = folder / "scan-grey.jpg"
    photo(200, 260, 5).convert("L").save(photos["grey"], "JPEG", quality=90)
    return photos


def street(seed: int, points: int = 1500) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(xyz, rgb, intensity, class code) of a street scan: ground (2), building (6), vegetation (5)."""
    rng = np.random.default_rng(seed)
    n = points // 3
    ground = np.c_[rng.uniform(0, 20, n), rng.uniform(0, 10, n), rng.normal(0, 0.02, n)]
    wall = np.c_[rng.uniform(0, 20, n), np.full(n, 10.0) + rng.normal(0, 0.03, n), rng.uniform(0, 8, n)]
    tree = rng.normal([10, 5, 4], [1.2, 1.2, 1.0], (points - 2 * n, 3))
    xyz = np.concatenate([ground, wall, tree])
    codes = np.repeat([2, 6, 5], [n, n, points - 2 * n]).astype(np.uint8)
    palette = {2: (120, 110, 100), 5: (40, 120, 40), 6: (180, 170, 160)}
    rgb = np.array([palette[int(c)] for c in codes], dtype=np.float64)
    rgb = np.clip(rgb + rng.normal(0, 8, rgb.shape), 0, 255).astype(np.uint8)
    intensity = rng.integers(100, 4000, points).astype(np.uint16)
    return xyz, rgb, intensity, codes


def write_las(path: Path, seed: int) -> Path:
    """LAS 1.4, point format 7 (RGB), georeferenced: UTM-sized coordinates with scales and offsets."""
    import laspy

    xyz, rgb, intensity, codes = street(seed)
    xyz = xyz + np.array([552_000.0, 5_411_000.0, 310.0])
    header = laspy.LasHeader(point_format=7, version="1.4")
    header.offsets = xyz.min(axis=0)
    header.scales = np.array([0.001, 0.001, 0.001])
    las = laspy.LasData(header)
    las.x, las.y, las.z = xyz[:, 0], xyz[:, 1], xyz[:, 2]
    las.red, las.green, las.blue = (rgb[:, i].astype(np.uint16) * 257 for i in range(3))
    las.intensity = intensity
    las.classification = codes
    las.write(str(path))
    return path


def write_ascii_ply(path: Path, seed: int) -> Path:
    """ASCII PLY with colour and an integer ``label`` per vertex, as a short script writes it."""
    xyz, rgb, _, codes = street(seed)
    header = (
        "ply\nformat ascii 1.0\ncomment written by hand\n"
        f"element vertex {len(xyz)}\n"
        "property float x\nproperty float y\nproperty float z\n"
        "property uchar red\nproperty uchar green\nproperty uchar blue\n"
        "property int label\nend_header\n"
    )
    body = "".join(
        f"{x:.4f} {y:.4f} {z:.4f} {r} {g} {b} {c}\n" for (x, y, z), (r, g, b), c in zip(xyz, rgb, codes, strict=True)
    )
    path.write_text(header + body)
    return path


def scans_zip(folder: Path, archive: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_las(folder / "tile_552_5411.las", 0)
    write_las(folder / "tile_552_5412.las", 1)
    write_ascii_ply(folder / "backyard.ply", 2)
    (folder / "classes.json").write_text(json.dumps({"2": "ground", "5": "vegetation", "6": "building"}))
    return zipped(folder, archive, prefix="my-scans/")


def room_pcd(path: Path) -> Path:
    """An unlabelled room (floor, two walls, a table top) in colour, saved by open3d as binary PCD."""
    import open3d as o3d

    rng = np.random.default_rng(7)
    n = 4000
    floor = np.c_[rng.uniform(0, 5, n), rng.uniform(0, 4, n), rng.normal(0, 0.005, n)]
    wall_a = np.c_[rng.uniform(0, 5, n), np.full(n, 4.0), rng.uniform(0, 2.6, n)]
    wall_b = np.c_[np.zeros(n), rng.uniform(0, 4, n), rng.uniform(0, 2.6, n)]
    table = np.c_[rng.uniform(2, 3.2, n // 4), rng.uniform(1.5, 2.3, n // 4), np.full(n // 4, 0.75)]
    xyz = np.concatenate([floor, wall_a, wall_b, table])
    shades = ((0.5, 0.4, 0.3), (0.9, 0.9, 0.85), (0.85, 0.85, 0.8), (0.4, 0.2, 0.1))
    parts = (floor, wall_a, wall_b, table)
    colours = np.concatenate([np.tile(c, (len(p), 1)) for c, p in zip(shades, parts, strict=True)])
    cloud = o3d.geometry.PointCloud()
    cloud.points = o3d.utility.Vector3dVector(xyz)
    cloud.colors = o3d.utility.Vector3dVector(np.clip(colours + rng.normal(0, 0.02, colours.shape), 0, 1))
    o3d.io.write_point_cloud(str(path), cloud, write_ascii=False)
    return path


def clip_frames(kind: str, seed: int, frames: int = 10, size: int = 48) -> list[np.ndarray]:
    """A coloured disc that rises (``waves``) or circles (``spins``) over a soft background."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:size, :size]
    colour = rng.uniform(80, 255, 3)
    out = []
    for t in range(frames):
        if kind == "waves":
            cx, cy = size / 2 + 10 * math.sin(t / 2 + seed), size - 6 - t * (size - 12) / frames
        else:
            cx, cy = size / 2 + 12 * math.cos(t / 1.5 + seed), size / 2 + 12 * math.sin(t / 1.5 + seed)
        disc = ((xx - cx) ** 2 + (yy - cy) ** 2) < 36
        frame = np.full((size, size, 3), 30.0) + 20 * (yy / size)[..., None]
        frame[disc] = colour
        out.append(frame.astype(np.uint8))
    return out


def clips_zip(folder: Path, archive: Path) -> Path:
    """Clips in class folders: MP4s written with imageio (ffmpeg), animated GIFs written with Pillow."""
    import imageio.v2 as imageio
    from PIL import Image

    for kind in ("waves", "spins"):
        (folder / kind).mkdir(parents=True, exist_ok=True)
        for i in range(3):
            frames = clip_frames(kind, i + (10 if kind == "spins" else 0))
            if i < 2:
                imageio.mimwrite(folder / kind / f"{kind}-{i}.mp4", frames, fps=8, macro_block_size=16)
            else:
                images = [Image.fromarray(f) for f in frames]
                gif = folder / kind / f"{kind}-{i}.gif"
                images[0].save(gif, save_all=True, append_images=images[1:], duration=120, loop=0)
    return zipped(folder, archive)


# -- the steps -----------------------------------------------------------------------------------------


def key_file(path: Path) -> Path:
    """A key file as a user writes one for ``moelab run``: id, name and 48 bits."""
    path.write_text(json.dumps({"id": "acme-1", "name": "Acme photos", "bits": KEY_BITS}))
    return path


def keyring(path: Path) -> Path:
    keys = [
        {"id": "acme-1", "name": "Acme photos", "organisation": "Acme", "bits": KEY_BITS, "revoked": False},
        {"id": "acme-0", "name": "old key", "organisation": "Acme", "bits": OTHER_KEY_BITS, "revoked": True},
    ]
    path.write_text(json.dumps({"version": 1, "keys": keys}, indent=1))
    return path


def _registered(out: Path, kind: str) -> Path | None:
    entries = json.loads((out / "registered.json").read_text()) if (out / "registered.json").is_file() else []
    return next((Path(e["path"]) for e in entries if e.get("kind") == kind), None)


def chain_planner(step: Step, upstream: Path) -> str | None:
    report = upstream / "artifacts" / "report.json"
    if not report.is_file():
        return "routing-analysis wrote no report.json"
    step.inputs.append(("routing_report", report))
    return None


def chain_verify(step: Step, upstream: Path) -> str | None:
    """The photos watermark-embed marked and, if it ran, the images watermark-generate made."""
    marked = sorted(p for p in (upstream / "artifacts" / "images").glob("*") if p.is_file())
    if not marked:
        return "watermark-embed wrote no marked images"
    generated = sorted((upstream.parent / "watermark-generate" / "artifacts" / "images").glob("*.png"))
    step.inputs = [("images", p) for p in (*generated, *marked)] + step.inputs
    return None


def chain_generate(step: Step, upstream: Path) -> str | None:
    model = _registered(upstream, "video-dit")
    if model is None:
        return "video-train registered no model"
    step.sets["model"] = str(model)
    return None


def build_steps(inputs: Path) -> list[Step]:
    """Make every input file and the steps that use them."""
    t = inputs
    photos = photo_set(t / "photos")
    qwen2 = hf_checkpoint(t / "qwen2-moe-bf16", "qwen2_moe", "bfloat16")
    olmoe = hf_checkpoint(t / "olmoe-fp16", "olmoe", "float16")
    mixtral = hf_checkpoint(t / "mixtral-fp32", "mixtral", "float32")
    qwen3 = hf_checkpoint(t / "qwen3-moe-bf16", "qwen3_moe", "bfloat16")
    granite = hf_checkpoint(t / "granitemoe-fp32", "granitemoe", "float32")
    paragraphs = _paragraphs()
    photos_zip = zipped(t / "photos", t / "photos.zip", prefix="camera-roll/")
    return [
        Step(
            "compress-moe",
            {
                "samples": "8",
                "seq_len": "64",
                "ratios": "0.25",
                "methods": "mone,frequency",
                "eval_windows": "8",
                "cloze_items": "5",
                "seed": "0",
            },
            [
                ("checkpoint", zipped(qwen2, t / "qwen2-moe-bf16.zip", prefix="my-qwen2-moe/")),
                ("calibration_file", calibration_csv(t / "calibration.csv")),
            ],
            "checkpoint: zip of a bf16 Qwen2-MoE (shared expert) saved with save_pretrained, one folder down; "
            "calibration_file: CSV with BOM, CRLF, quoted commas and line breaks",
            texts={"calibration.csv": 40},
        ),
        Step(
            "moe-profile",
            {"hidden": "128", "intermediate": "256", "experts": "8", "top_k": "2", "tokens": "512", "repeats": "3"},
            described="nothing to upload (layer shape only)",
        ),
        Step(
            "routing-analysis",
            {
                "model": str(olmoe),
                "samples": "8",
                "seq_len": "64",
                "windows": "4,16",
                "multiples": "1,2,4",
                "resamples": "50",
                "seed": "0",
            },
            [("text_file", notes_jsonl(t / "notes.jsonl"))],
            "model: local folder of an fp16 OLMoE (save_pretrained); text_file: JSONL with BOM and CRLF",
            texts={"notes.jsonl": 400},
        ),
        Step(
            "moe-planner",
            {
                "d_model": "512",
                "layers": "8",
                "experts": "16",
                "top_k": "2",
                "d_expert": "256",
                "tokens": "1e10",
                "resamples": "20",
            },
            [("runs", runs_csv(t / "runs.csv"))],
            "runs: runs CSV (BOM, CRLF, extra notes column); routing_report: report.json of the routing-analysis above",
            after="routing-analysis",
            chain=chain_planner,
        ),
        Step(
            "distill",
            {
                "steps": "4",
                "train_windows": "8",
                "eval_windows": "4",
                "eval_every": "0",
                "seq_len": "32",
                "batch_size": "4",
                "seed": "0",
            },
            [
                ("checkpoint", tarred(mixtral, t / "mixtral-fp32.tar.gz", mode="w:gz")),
                ("text_file", docs_tsv(t / "docs.tsv")),
            ],
            "checkpoint: tar.gz of an fp32 Mixtral, files at the archive root; text_file: .tsv with quoted fields",
            texts={"docs.tsv": 300},
        ),
        Step(
            "data-mixture",
            {
                "sources": "",
                "steps": "20",
                "interval": "5",
                "confirm_steps": "10",
                "width": "32",
                "batch_per_source": "8",
                "seed": "0",
            },
            [
                ("source_files", plain_crlf(t / "manual.txt", paragraphs[:200])),
                ("source_files", code_jsonl(t / "code.jsonl")),
                ("source_files", semicolon_csv(t / "forum.csv", paragraphs[200:400])),
                ("target_file", plain_crlf(t / "target.txt", paragraphs[400:500] + _code_blocks()[:40])),
            ],
            "source_files: plain text (BOM, CRLF), code as JSONL, semicolon CSV; target_file: plain text",
            texts={"manual.txt": 1, "code.jsonl": len(_code_blocks()), "forum.csv": 200, "target.txt": 1},
        ),
        Step(
            "lora-moe-finetune",
            {"steps": "6", "batch_size": "8", "experts": "4", "rank": "2", "seed": "0"},
            [
                ("checkpoint", tarred(qwen3, t / "qwen3-moe-bf16.tar", prefix="qwen3-moe/")),
                ("task_file", task_tsv(t / "reviews.tsv")),
            ],
            "checkpoint: plain .tar of a bf16 Qwen3-MoE; task_file: TSV text/label/split with BOM and CRLF",
        ),
        Step(
            "router-align",
            {"epochs": "1", "oracle_steps": "2", "layers": "1", "k": "3", "seed": "0"},
            [
                ("checkpoint", zipped(granite, t / "granitemoe-fp32.zip")),
                ("task_file", task_jsonl(t / "reviews.jsonl")),
            ],
            "checkpoint: zip of an fp32 GraniteMoE, files at the root; task_file: JSONL text/label",
        ),
        Step(
            "graph-ood",
            {"methods": "erm,disco", "epochs": "2", "hidden": "16", "batch_size": "16", "seed": "0"},
            [("graphs_file", graphs_json(t / "graphs.json"))],
            "graphs_file: moelab-graphs JSON built with networkx (5-cycles vs 4-cliques on trees, size shift)",
        ),
        Step(
            "watermark-train",
            {"image_source": "mine", "rank": "2", "steps": "2", "batch_size": "4", "seed": "0"},
            [("images", photos_zip), ("images", phone_jpeg(t / "IMG_2042.jpg", 6))],
            "images: zip of a camera roll (EXIF-rotated JPEG, RGBA PNG, WebP, CMYK JPEG, greyscale JPEG) "
            "plus one loose JPEG",
        ),
        Step(
            "watermark-generate",
            {"key": str(key_file(t / "acme-key.json")), "count": "2", "steps": "2", "seed": "0"},
            described="nothing to upload (key: a key file the user wrote)",
        ),
        Step(
            "watermark-embed",
            {"key": str(t / "acme-key.json")},
            [("images", photos["phone"]), ("images", photos["png"]), ("images", photos["webp"])],
            "images: an EXIF-rotated phone JPEG, an RGBA PNG and a WebP; key: a key file the user wrote",
        ),
        Step(
            "watermark-verify",
            {"keyring": str(keyring(t / "keyring.json"))},
            [("images", photos["cmyk"])],
            "images: the PNGs watermark-generate made, the files watermark-embed marked and an unmarked CMYK "
            "JPEG; keyring: JSON with a live and a revoked key",
            after="watermark-embed",
            chain=chain_verify,
        ),
        Step(
            "watermark-robustness",
            {
                "images": "8",
                "clean_images": "1000",
                "keys": "1",
                "attacks": "jpeg-50,crop-0.7,rotate-15",
                "averaging": "0",
                "query_budget": "0",
                "baseline": "false",
                "seed": "0",
            },
            described="nothing to upload (attacks its own marked images)",
        ),
        Step(
            "pointcloud-train",
            {
                "steps": "2",
                "batch_size": "1",
                "points": "256",
                "eval_every": "0",
                "architecture": "moe-proj",
                "experts": "2",
                "top_k": "1",
                "seed": "0",
            },
            [("scans", scans_zip(t / "scans", t / "scans.zip"))],
            "scans: zip of two georeferenced LAS 1.4 tiles (point format 7, RGB, ASPRS classes), an ASCII PLY with "
            "a label property, and classes.json",
        ),
        Step(
            "pointcloud-segment",
            {"preview_points": "2000", "seed": "0"},
            [("cloud", room_pcd(t / "living-room.pcd"))],
            "cloud: binary PCD with colours, saved by open3d",
        ),
        Step(
            "video-train",
            {
                "dim": "16",
                "depth": "1",
                "heads": "2",
                "frames": "4",
                "resolution": "8",
                "steps": "3",
                "batch_size": "2",
                "sample_every": "0",
                "attention": "moga",
                "ffn": "moe",
                "experts": "2",
                "judge_steps": "5",
                "seed": "0",
            },
            [("clips", clips_zip(t / "clips", t / "clips.zip"))],
            "clips: zip of class folders (waves/, spins/) holding MP4s (imageio/ffmpeg) and animated GIFs (Pillow)",
        ),
        Step(
            "video-generate",
            {"class_name": "spins", "clips": "1", "steps": "3", "seed": "0"},
            described="nothing to upload (model: the video-train model above, class_name spins)",
            after="video-train",
            chain=chain_generate,
        ),
    ]


# -- running ------------------------------------------------------------------------------------


def _metric(kind: str, scalars: dict[str, Any]) -> str:
    """``key = value`` of the kind's preferred metric (else the first scalar the job wrote)."""
    keys = [k for k in PREFERRED.get(kind, ()) if k in scalars]
    key = keys[0] if keys else next(iter(scalars), "")
    if not key:
        return ""
    value = scalars[key]
    return f"{key} = {value:.4g}" if isinstance(value, int | float) else f"{key} = {value}"


#: The metric shown for each kind, first found wins (else the first scalar the job wrote).
PREFERRED: dict[str, tuple[str, ...]] = {
    "compress-moe": ("mone@0.25/delta_ppl",),
    "moe-profile": ("speedup_vs_loop",),
    "routing-analysis": ("recommended_hit_rate",),
    "moe-planner": ("efficiency_leverage",),
    "distill": ("forward_kl",),
    "data-mixture": ("confirm_bpb_found",),
    "lora-moe-finetune": ("accuracy",),
    "router-align": ("test_accuracy_roma",),
    "graph-ood": ("disco/ood_test_accuracy",),
    "watermark-train": ("bit_accuracy",),
    "watermark-generate": ("self_check_bit_accuracy",),
    "watermark-embed": ("psnr",),
    "watermark-verify": ("detected", "images"),
    "watermark-robustness": ("molm_jpeg-50_bit_accuracy",),
    "pointcloud-train": ("user_miou",),
    "pointcloud-segment": ("points",),
    "video-train": ("heldout_rf_loss",),
    "video-generate": ("flop_fraction",),
}


def _refusal(stderr: str, out: Path) -> str:
    """The sentence the user saw: ``outcome.json``'s error, else the CLI's ``moelab: ...`` lines."""
    outcome = out / "outcome.json"
    if outcome.is_file():
        error = json.loads(outcome.read_text()).get("error")
        if error:
            return str(error)
    lines = [line.removeprefix("moelab: ") for line in stderr.splitlines() if line.startswith("moelab: ")]
    return " ".join(lines) or (stderr.strip().splitlines() or ["no message"])[-1]


def misread(path: Path, records: int) -> str:
    """Whether the text reader every text kind uses sees ``records`` documents in ``path`` (a table's
    rows, a JSONL file's records, one document for plain text); a sentence saying otherwise."""
    from mlcore.data.textset import TextDatasetError, load_text_dataset

    try:
        documents = len(load_text_dataset(path).documents)
    except TextDatasetError as exc:
        return f"{path.name}: the text reader refuses it ({exc})"
    if documents == records:
        return ""
    return f"{path.name} (written as {records} records) is read as {documents} document(s)"


def warnings(out: Path) -> list[str]:
    """The first sentence of each of the job's WARNING lines."""
    log = out / "log.txt"
    lines = log.read_text().splitlines() if log.is_file() else []
    sentences = [line.removeprefix("WARNING: ").split(". ")[0] for line in lines if line.startswith("WARNING")]
    return [sentence if len(sentence) < 300 else sentence[:299] + "…" for sentence in sentences]


def run_step(step: Step, runs: Path, device: str, timeout: int) -> Result:
    out = runs / step.kind
    shutil.rmtree(out, ignore_errors=True)  # an earlier tour's files would pass for this run's
    command = [sys.executable, "-m", "mlcore.jobs.cli", "run", step.kind, "--out", str(out)]
    if device:
        command += ["--device", device]
    for name, value in step.sets.items():
        command += ["--set", f"{name}={value}"]
    for name, path in step.inputs:
        command += ["--input", f"{name}={path}"]
    start = time.monotonic()
    try:
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        seconds = time.monotonic() - start
        return Result(step.kind, step.described, f"timed out after {timeout} s", "", seconds)
    seconds = time.monotonic() - start
    out.mkdir(parents=True, exist_ok=True)
    (out / "tour-stderr.txt").write_text(done.stderr)
    texts = [(path, step.texts[path.name]) for _, path in step.inputs if path.name in step.texts]
    notes = [f"misread: {note}" for path, records in texts if (note := misread(path, records))]
    notes += [f"warned: {warning}" for warning in warnings(out)]
    notes += [f"leak: {leak}" for leak in server_paths(out)]
    if done.returncode == 0:
        metrics = out / "metrics.json"
        scalars = json.loads(metrics.read_text()).get("scalars", {}) if metrics.is_file() else {}
        return Result(step.kind, step.described, "succeeded", _metric(step.kind, scalars), seconds, notes)
    sentence = _refusal(done.stderr, out)
    word = "failed" if "Internal error" in sentence else "refused"
    return Result(step.kind, step.described, f"{word}: {sentence}", "", seconds, notes, done.stderr[-4000:])


#: Outputs a user downloads must not name a folder of the machine that ran the job.
_TEXT_SUFFIXES = (".json", ".jsonl", ".txt", ".csv", ".md", ".py", ".html")


def server_paths(out: Path) -> list[str]:
    """Text files among a job's artifacts (what a worker hands a user) that name the repository,
    the cache or the output folder: on a worker, its own paths, which must not reach a user. The
    CLI's own ``job.json`` and ``log.txt`` are the local user's and may name their files."""
    from mlcore.catalog import cache_root

    roots = {str(REPO), str(cache_root()), str(out.resolve())}
    found = []
    for path in sorted((out / "artifacts").rglob("*")):
        if path.suffix not in _TEXT_SUFFIXES or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if any(root in text for root in roots):
            found.append(str(path.relative_to(out)))
    return found


def table(results: list[Result]) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| kind | inputs given | outcome | key metric | seconds |", "|---|---|---|---|---:|"]
    for r in results:
        outcome = "; ".join([r.outcome, *r.notes])
        lines.append(f"| {r.kind} | {cell(r.inputs)} | {cell(outcome)} | {cell(r.metric)} | {r.seconds:.0f} |")
    total = sum(r.seconds for r in results)
    ok = sum(r.outcome == "succeeded" for r in results)
    misread = sum(any(n.startswith("misread") for n in r.notes) for r in results)
    lines.append(
        f"\n{ok} of {len(results)} kinds succeeded ({misread} of them misreading an input); "
        f"{total:.0f} s of jobs in all."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(REPO / "var" / "user-data-tour"), help="output folder")
    parser.add_argument("--only", action="append", default=[], metavar="KIND", help="run only these kinds")
    parser.add_argument("--device", default="", help="torch device for every job (default: the CLI's choice)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds one job may take")
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    inputs, runs = out / "inputs", out / "runs"
    inputs.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    print(f"making inputs in {inputs} ...", file=sys.stderr)
    steps = build_steps(inputs)
    prepared = time.monotonic() - began
    unknown = set(args.only) - {s.kind for s in steps}
    if unknown:
        parser.error(f"unknown kind(s): {', '.join(sorted(unknown))}")
    results: list[Result] = []
    for step in steps:
        if args.only and step.kind not in args.only:
            continue
        if step.chain is not None:
            upstream = runs / step.after
            problem = step.chain(step, upstream) if upstream.is_dir() else f"{step.after} has not run"
            if problem:
                results.append(Result(step.kind, step.described, f"skipped: {problem}", "", 0.0))
                continue
        print(f"running {step.kind} ...", file=sys.stderr)
        result = run_step(step, runs, args.device, args.timeout)
        print(f"  {result.outcome[:200]} ({result.seconds:.0f} s)", file=sys.stderr)
        results.append(result)
    markdown = table(results) + f" Inputs made in {prepared:.0f} s; the tour took {time.monotonic() - began:.0f} s."
    print(markdown)
    (out / "tour.md").write_text(markdown + "\n")
    record = {
        "python": sys.version.split()[0],
        "device": args.device or os.environ.get("MOELAB_DEVICE", "CLI default"),
        "inputs_seconds": prepared,
        "total_seconds": time.monotonic() - began,
        "results": [vars(r) for r in results],
    }
    (out / "tour.json").write_text(json.dumps(record, indent=1))
    misread = any(note.startswith(("misread", "leak")) for r in results for note in r.notes)
    return 0 if all(r.outcome == "succeeded" for r in results) and not misread else 1


if __name__ == "__main__":
    sys.exit(main())
