"""Joint multi-dataset training and evaluation of PTv3-lite / Point-MoE (method card, section 2.6).

- Scans are grid-sampled at their dataset's grid (0.04 m indoors, 0.1 m outdoors), cropped to at
  most ``points`` points around a random centre (the card's sphere crop), rotated about z, flipped
  and scaled a little.
- **Mixed batches** (the paper's largest single gain): every batch draws its samples from random
  datasets; the ablation draws each batch from one dataset only.
- **Attribute augmentation** (``attribute_augment``, off unless asked for): each crop's colour and
  intensity dropped, re-mapped as another sensor would report them, or synthesised where the scan
  had none (:mod:`mlcore.pointcloud.augment`), so the model does not collapse without the
  attribute it trained with.
- **Surveys** (``surveys``, off unless asked for): that share of each LiDAR dataset's training scans
  are mobile-mapping surveys of the same streets (:func:`~mlcore.pointcloud.datasets.make_survey`,
  3 to 24 positions merged), so the model also sees surfaces filled in as a user's survey fills them:
  trained on single scans only, a model labels a 2M-point survey worse than a 100k sample of it.
- **Heights** of training crops are measured from the crop's lowest point unless ``height="scan"``:
  then from the scan's ground as the model will segment it (its ``PTv3Config.ground``: the lowest
  point, or a robust low percentile), the same ground :func:`evaluate` and ``segment_cloud`` use.
- Loss: cross-entropy over the sample's dataset label set (logits of other classes masked, merged
  or unannotated points ignored) + α·balance loss (α = 0 by default, card "do this instead").
  Lovász is left out. AdamW, linear warm-up then cosine decay (OneCycle's shape), clip 1.0.
- Evaluation: whole scans, predictions on grid-sampled points carried to every input point
  through the inverse map; mIoU over the dataset's classes; expert usage per dataset.

Segmenters are saved as ``config.json`` + fp16 ``model.safetensors`` (:func:`save_segmenter`);
what their classes are is :mod:`mlcore.pointcloud.segmenter_classes`'s to read.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.nn import functional as F

from mlcore.pointcloud import augment, presence
from mlcore.pointcloud.datasets import (
    FEATURES,
    IGNORE,
    DatasetSpec,
    crop,
    get_dataset,
    grid_sample,
    ground_level,
    make_scan,
    make_survey,
    point_features,
)
from mlcore.pointcloud.ptv3 import PointBatch, PTv3, PTv3Config, restrict_logits
from mlcore.pointcloud.scenes import LABELS
from mlcore.pointcloud.segmenter_classes import SegmenterError, read_classes
from mlcore.pointcloud.sensors import Scan
from mlcore.train import warmup_cosine

FORMAT = "moelab-pointcloud-segmenter"
#: BatchNorm statistics per attribute presence (:mod:`mlcore.pointcloud.presence`), when kept.
PRESENCE_FILE = "presence_stats.safetensors"
GRIDS = {"indoor": 0.04, "outdoor": 0.1}
#: ``TrainConfig.height`` choices.
HEIGHTS = ("crop", "scan")


@dataclass
class Sample:
    coord: np.ndarray  #: [n, 3] float32 voxel units
    feat: np.ndarray  #: [n, F] float32
    labels: np.ndarray  #: [n] int64 (IGNORE = −1)
    allowed: np.ndarray  #: [K] bool: the dataset's label set
    dataset: str


def prepare(
    scan: Scan,
    spec: DatasetSpec,
    *,
    points: int | None,
    rng: np.random.Generator | None,
    augment: bool,
    voxels: tuple[np.ndarray, np.ndarray] | None = None,
    ground: float | None = None,
) -> tuple[Sample, np.ndarray]:
    """Grid-sample (and crop) a scan; returns the sample and, per input point, its sample row (−1 if
    cropped away). ``voxels``: the scan's :func:`grid_sample` at ``spec.grid``, when the caller kept
    it (it draws no random numbers, so reusing it changes nothing but the time). ``ground``: the
    height (m) the height channel starts at (:func:`scan_ground`); None: the crop's lowest point."""
    keep, inverse = voxels if voxels is not None else grid_sample(scan.xyz, spec.grid)
    rows = np.arange(len(keep))
    if points is not None and rng is not None:
        rows = crop(scan.xyz[keep], points, rng)
    xyz = scan.xyz[keep[rows]].astype(np.float64)
    if augment and rng is not None:
        angle = rng.uniform(0, 2 * np.pi)
        rot = np.array([[np.cos(angle), -np.sin(angle), 0], [np.sin(angle), np.cos(angle), 0], [0, 0, 1]])
        xyz = xyz @ rot.T * rng.uniform(0.9, 1.1)
        if rng.random() < 0.5:
            xyz[:, 0] = -xyz[:, 0]
    coord = ((xyz - xyz.min(0)) / spec.grid).astype(np.float32)
    sel = keep[rows]
    feat = point_features(
        scan.xyz[sel],
        None if scan.rgb is None else scan.rgb[sel],
        None if scan.intensity is None else scan.intensity[sel],
        ground=ground,
    )
    allowed = np.zeros(len(LABELS), bool)
    allowed[list(spec.class_ids)] = True
    where = np.full(len(keep), -1, np.int64)
    where[rows] = np.arange(len(rows))
    return Sample(coord, feat, scan.labels[sel].astype(np.int64), allowed, spec.name), where[inverse]


def scan_ground(scan: Scan, keep: np.ndarray, how: str) -> float:
    """Where a scan's height channel starts when a model whose ``PTv3Config.ground`` is ``how``
    segments it: :func:`~mlcore.pointcloud.datasets.ground_level` of its grid-sampled points
    (``keep``), as ``segment_cloud`` computes it, so training and evaluation see the heights a job does."""
    return ground_level(scan.xyz[keep, 2], how)


def domain_index(name: str, domains: Sequence[str]) -> int:
    """A PPT-style model's norm for dataset ``name``: its own if it was trained on it, else (zero-shot)
    that of the first training dataset of the same kind of scene (indoor / outdoor)."""
    if name in domains:
        return list(domains).index(name)
    kind = get_dataset(name).kind
    for i, seen in enumerate(domains):
        if get_dataset(seen).kind == kind:
            return i
    raise ValueError(f"the model was trained on no {kind} dataset, so it has no norm for {name}")


def collate(
    samples: Sequence[Sample], device: torch.device | str = "cpu", *, domains: Sequence[str] = ()
) -> tuple[PointBatch, Tensor, Tensor]:
    """(points, labels [N], allowed [N, K]) for a list of samples; ``domains``: a PPT-style model's
    datasets, whose index each sample then carries (:func:`domain_index`)."""
    coord = torch.from_numpy(np.concatenate([s.coord for s in samples]))
    feat = torch.from_numpy(np.concatenate([s.feat for s in samples]))
    batch = torch.repeat_interleave(torch.arange(len(samples)), torch.tensor([len(s.coord) for s in samples]))
    labels = torch.from_numpy(np.concatenate([s.labels for s in samples]))
    allowed = torch.from_numpy(np.stack([s.allowed for s in samples]))[batch]
    domain = torch.tensor([domain_index(s.dataset, domains) for s in samples]) if domains else None
    points = PointBatch(
        coord.to(device), feat.to(device), batch.to(device), None if domain is None else domain.to(device)
    )
    return points, labels.to(device), allowed.to(device)


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    datasets: tuple[str, ...] = ("A", "B", "C", "D")
    steps: int = 300
    batch_size: int = 4  #: samples (crops) per step
    points: int = 2048  #: max points per crop
    #: Training scans per dataset, generated once and re-cropped every step. No default: the job's
    #: spec, the zoo recipes and the benchmark tiers each give their own.
    scenes: int
    lr: float = 3e-3
    weight_decay: float = 0.05
    warmup_fraction: float = 0.05  #: the warm-up, as a fraction of the steps
    balance: float = 0.0  #: α of the balance loss
    mixed: bool = True  #: mixed-dataset batches; False draws each batch from one dataset
    clip: float = 1.0
    seed: int = 0
    eval_every: int = 0
    eval_scenes: int = 3  #: validation scans per dataset for the evaluations during training
    #: Attribute augmentation (:data:`mlcore.pointcloud.augment.PRESETS`: "off", "robust" or
    #: "balanced"). None is the caller's default: off here, so the zoo recipes and the benchmark
    #: caches reproduce; "balanced" for a user's scans (:func:`~mlcore.pointcloud.user_train.replace_datasets`).
    attribute_augment: str | None = None
    #: What the height channel of a training crop is measured from: "crop" (its lowest point, as the
    #: earliest recipes were trained) or "scan" (the scan's ground by the model's ``PTv3Config.ground``:
    #: what ``segment_cloud`` and :func:`evaluate` compute, so a crop of ceiling is not a floor at
    #: height 0). None is the caller's default: "crop" here, so recipes and caches reproduce; "scan"
    #: for the zoo recipes and a user's scans.
    height: str | None = None
    #: The share of each LiDAR dataset's training scans that are surveys (:func:`survey_loader`); 0:
    #: single scans only, as every recipe so far.
    surveys: float = 0.0
    #: Once trained, keep BatchNorm statistics per attribute-presence pattern, estimated on
    #: ``presence_crops`` training crops (:mod:`mlcore.pointcloud.presence`); off: the statistics as trained.
    presence_stats: bool = False
    presence_crops: int = 64

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def heights_from(cfg: TrainConfig, model: PTv3) -> str | None:
    """The ground rule training crops' heights start at (:meth:`ScanPool.draw`'s ``ground``): None
    for the crop's own lowest point, else the model's."""
    height = cfg.height or "crop"
    if height not in HEIGHTS:
        raise ValueError(f"height must be one of {', '.join(HEIGHTS)}, got {height!r}")
    return model.cfg.ground if height == "scan" else None


@dataclass
class TrainResult:
    loss: list[tuple[int, float]] = field(default_factory=list)
    balance: list[tuple[int, float]] = field(default_factory=list)
    evals: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    seconds: float = 0.0
    #: Steps trained so far; below ``cfg.steps`` when :func:`train` stopped at its ``deadline``.
    steps: int = 0


class ScanPool:
    """Training scans generated once per dataset and kept in memory (a few MB each), with their grid
    samples: grid-sampling a scan costs several times the crop and augmentation drawn from it every
    step, which at 16k-point crops on a GPU would make the data the bottleneck.

    ``load(name, index, split)`` makes a scan (default :func:`make_scan`; the benchmark passes one
    that reads scans pre-generated on disk, so parallel runs do not each ray-cast the same scenes)."""

    def __init__(
        self,
        datasets: Sequence[str],
        count: int,
        split: str = "train",
        *,
        load: Callable[[str, int, str], Scan] = make_scan,
    ) -> None:
        self.scans = {name: [load(name, i, split) for i in range(count)] for name in datasets}
        self._voxels: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
        self._grounds: dict[tuple[str, int, str], float] = {}

    def draw(self, name: str, rng: np.random.Generator, points: int, ground: str | None = None) -> Sample:
        """A training crop of one of dataset ``name``'s scans, heights from the crop's lowest point
        (``ground`` None) or from the scan's ground by that rule (:func:`scan_ground`)."""
        scans = self.scans[name]
        i = int(rng.integers(len(scans)))
        return self.crop_of(name, i, scans[i], get_dataset(name), rng, points, ground)

    def crop_of(
        self,
        name: str,
        i: int,
        scan: Scan,
        spec: DatasetSpec,
        rng: np.random.Generator,
        points: int,
        ground: str | None,
    ) -> Sample:
        """A crop of ``scan`` (scan ``i`` of ``name``), its grid sample and ground computed once."""
        if (name, i) not in self._voxels:
            self._voxels[name, i] = grid_sample(scan.xyz, spec.grid)
        voxels = self._voxels[name, i]
        level = None
        if ground is not None:
            if (name, i, ground) not in self._grounds:
                self._grounds[name, i, ground] = scan_ground(scan, voxels[0], ground)
            level = self._grounds[name, i, ground]
        return prepare(scan, spec, points=points, rng=rng, augment=True, voxels=voxels, ground=level)[0]


#: LiDAR positions merged into a training survey, in turn: from a sparse pass to one denser than
#: most vans drive (a spot every 2 m of the 50 m surveyed).
SURVEY_POSITIONS: tuple[int, ...] = (3, 6, 12, 24)


def survey_loader(share: float) -> Callable[[str, int, str], Scan]:
    """:func:`make_scan`, except that ``share`` of a LiDAR dataset's training scans (every
    round(1 / share)-th index) are :func:`make_survey` surveys of the same street, their positions
    taking :data:`SURVEY_POSITIONS` in turn."""
    every = max(1, round(1 / share))

    def load(name: str, index: int, split: str) -> Scan:
        spec = get_dataset(name)
        if split == "train" and spec.sensor == "lidar" and index % every == 0:
            positions = SURVEY_POSITIONS[(index // every) % len(SURVEY_POSITIONS)]
            return make_survey(spec, index, split, positions=positions)
        return make_scan(spec, index, split)

    return load


def segmentation_loss(logits: Tensor, labels: Tensor, allowed: Tensor) -> Tensor:
    """Cross-entropy over each point's dataset label set; ignored points do not count."""
    valid = labels != IGNORE
    if not bool(valid.any()):
        return logits.sum() * 0
    return F.cross_entropy(restrict_logits(logits[valid], allowed[valid]), labels[valid])


def train(
    model: PTv3,
    cfg: TrainConfig,
    *,
    pool: ScanPool | None = None,
    on_step: Callable[[int, TrainResult], None] | None = None,
    device: torch.device | str = "cpu",
    state_path: Path | None = None,
    checkpoint_every: int = 50,
    deadline: float | None = None,
) -> TrainResult:
    """Train ``model`` in place on ``cfg.datasets``; evaluations every ``eval_every`` steps. With
    ``state_path`` the model, optimiser, random state and curves are saved every
    ``checkpoint_every`` steps and an interrupted run resumes from there.

    ``device``: where the model and batches live; crops are drawn on the CPU with numpy and the
    model is initialised by the caller, so a run draws the same data on any device.
    ``deadline`` (a :func:`time.perf_counter` value): after the step that reaches it, the state is
    saved and training stops early (``result.steps < cfg.steps``), so a wall-clock-limited run ends
    cleanly and the next call resumes it."""
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    attributes = augment.preset(cfg.attribute_augment or "off")
    ground = heights_from(cfg, model)
    pool = pool or ScanPool(cfg.datasets, cfg.scenes, load=survey_loader(cfg.surveys) if cfg.surveys else make_scan)
    val = (
        {name: [make_scan(name, i, "val") for i in range(cfg.eval_scenes)] for name in cfg.datasets}
        if cfg.eval_every
        else {}
    )
    model.to(device).train()
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "class_embed" not in n]
    other = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "class_embed" not in n)]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": other, "weight_decay": 0.0}], lr=cfg.lr
    )
    result = TrainResult()
    first = 0
    if state_path is not None and state_path.is_file():
        # On the CPU first: a state saved on a GPU resumes on a CPU and the reverse (load_state_dict
        # copies into the parameters' device; the optimiser casts its state to theirs).
        state = torch.load(state_path, map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        rng.bit_generator.state = state["rng"]
        torch.set_rng_state(state["torch_rng"])
        result = state["result"]
        first = state["step"]
    result.steps = first
    start = time.perf_counter() - result.seconds
    warmup_steps = max(1, int(cfg.warmup_fraction * cfg.steps))
    for step in range(first, cfg.steps):
        for group in opt.param_groups:
            group["lr"] = cfg.lr * warmup_cosine(step, steps=cfg.steps, warmup_steps=warmup_steps)
        if cfg.mixed:
            names = [cfg.datasets[i] for i in rng.integers(len(cfg.datasets), size=cfg.batch_size)]
        else:
            names = [cfg.datasets[step % len(cfg.datasets)]] * cfg.batch_size
        samples = [pool.draw(n, rng, cfg.points, ground) for n in names]
        keeps = augment.batch_keeps(rng, attributes) if attributes is not None else None
        for sample in samples:
            if attributes is not None:
                sample.feat = augment.augment_features(sample.feat, sample.coord, rng, attributes, keeps)
        points, labels, allowed = collate(samples, device, domains=model.cfg.domains)
        logits = model(points)
        loss = segmentation_loss(logits, labels, allowed)
        balance = model.balance_loss() if model.cfg.is_moe else torch.zeros((), device=logits.device)
        total = loss + cfg.balance * balance
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        opt.step()
        result.loss.append((step, float(loss.detach())))
        result.balance.append((step, float(balance.detach())))
        if cfg.eval_every and ((step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps):
            result.evals.append((step + 1, evaluate(model, val, device=device)))
            model.train()
        result.steps = step + 1
        if on_step is not None:
            on_step(step, result)
        stop = deadline is not None and step + 1 < cfg.steps and time.perf_counter() >= deadline
        if state_path is not None and ((step + 1) % checkpoint_every == 0 or step + 1 == cfg.steps or stop):
            result.seconds = time.perf_counter() - start
            state_path.parent.mkdir(parents=True, exist_ok=True)
            torch.save(
                {
                    "model": model.state_dict(),
                    "opt": opt.state_dict(),
                    "rng": rng.bit_generator.state,
                    "torch_rng": torch.get_rng_state(),
                    "result": result,
                    "step": step + 1,
                },
                state_path.with_suffix(".tmp"),
            )
            state_path.with_suffix(".tmp").replace(state_path)  # atomic: a kill mid-save keeps the old state
        if stop:
            break
    result.seconds = time.perf_counter() - start
    if cfg.presence_stats and result.steps == cfg.steps:
        model.presence_stats = presence_statistics(model, cfg, pool, ground, device)
    model.eval()
    return result


def presence_statistics(
    model: PTv3, cfg: TrainConfig, pool: ScanPool, ground: str | None, device: torch.device | str
) -> presence.Statistics:
    """:func:`mlcore.pointcloud.presence.calibrate` on ``cfg.presence_crops`` training crops, drawn as
    training draws them (the datasets in turn, heights as trained) but neither augmented nor re-mapped:
    what inference sees. Its own random stream, so a run with it draws the same training crops."""
    rng = np.random.default_rng((cfg.seed, 71))
    crops = []
    for i in range(cfg.presence_crops):
        crops.append(pool.draw(cfg.datasets[i % len(cfg.datasets)], rng, cfg.points, ground))

    def forward(samples: list[Sample]) -> None:
        model(collate(samples, device, domains=model.cfg.domains)[0])

    return presence.calibrate(model, crops, forward, batch_size=cfg.batch_size)


@torch.no_grad()
def _scan_prediction(
    model: PTv3, scan: Scan, spec: DatasetSpec, device: torch.device | str
) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """For every input point of a whole scan: the dataset-restricted prediction, per MoE layer the
    top-1 expert, and whether its logits were all finite."""
    model.eval()
    keep, inverse = grid_sample(scan.xyz, spec.grid)
    sample, where = prepare(
        scan, spec, points=None, rng=None, augment=False, voxels=(keep, inverse),
        ground=scan_ground(scan, keep, model.cfg.ground),
    )  # fmt: skip
    points, _, allowed = collate([sample], device, domains=model.cfg.domains)
    with presence.statistics(model, presence.pattern_of(sample.feat)):
        logits = model(points)
    pred = restrict_logits(logits, allowed).argmax(-1).cpu().numpy()[where]
    routing = [r.cpu().numpy()[where] for r in model.point_routing()] if model.cfg.is_moe else []
    return pred, routing, torch.isfinite(logits).all(-1).cpu().numpy()[where]


def predict_scan(
    model: PTv3, scan: Scan, spec: DatasetSpec, *, device: torch.device | str = "cpu"
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Dataset-restricted predictions for every point of a scan, and per MoE layer the top-1 expert
    of every point."""
    pred, routing, _ = _scan_prediction(model, scan, spec, device)
    return pred, routing


def confusion(pred: np.ndarray, labels: np.ndarray, k: int = len(LABELS)) -> np.ndarray:
    valid = labels != IGNORE
    return np.bincount(labels[valid] * k + pred[valid], minlength=k * k).reshape(k, k)


def miou(conf: np.ndarray, classes: Sequence[int]) -> tuple[float, dict[str, float]]:
    """Mean IoU over ``classes`` that occur (in labels or predictions)."""
    ious = {}
    for c in classes:
        inter = conf[c, c]
        union = conf[c, :].sum() + conf[:, c].sum() - inter
        if union > 0:
            ious[LABELS[c]] = float(inter / union)
    return (float(np.mean(list(ious.values()))) if ious else 0.0), ious


@torch.no_grad()
def evaluate(model: PTv3, scans: dict[str, list[Scan]], *, device: torch.device | str = "cpu") -> dict[str, Any]:
    """Per dataset: mIoU, per-class IoU, (MoE) the fraction of points whose top-1 expert is e per
    MoE layer, and the fraction of points whose logits were not finite (their prediction is noise);
    plus the mean mIoU over datasets."""
    out: dict[str, Any] = {"miou": {}, "iou": {}, "usage": {}, "nonfinite": {}}
    for name, items in scans.items():
        spec = get_dataset(name)
        conf = np.zeros((len(LABELS), len(LABELS)), np.int64)
        usage: list[np.ndarray] = []
        bad = total = 0
        for scan in items:
            pred, routing, finite = _scan_prediction(model, scan, spec, device)
            bad += int((~finite).sum())
            total += len(finite)
            conf += confusion(pred, scan.labels.astype(np.int64))
            for i, ids in enumerate(routing):
                counts = np.bincount(ids, minlength=model.cfg.experts)
                if i < len(usage):
                    usage[i] += counts
                else:
                    usage.append(counts)
        out["miou"][name], out["iou"][name] = miou(conf, spec.class_ids)
        out["nonfinite"][name] = bad / max(1, total)
        if usage:
            out["usage"][name] = [(u / max(1, u.sum())).round(4).tolist() for u in usage]
    out["mean_miou"] = float(np.mean(list(out["miou"].values()))) if out["miou"] else 0.0
    return out


# -- saving and loading ------------------------------------------------------------------------------


def save_segmenter(model: PTv3, folder: Path, *, card: dict[str, Any] | None = None) -> Path:
    """``config.json`` (architecture, labels, grids, features) + fp16 ``model.safetensors``."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    state = {k: (v.half() if v.is_floating_point() else v).contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(state, str(folder / "model.safetensors"))
    config = {
        "format": FORMAT,
        "version": 1,
        "model": model.cfg.to_dict(),
        "labels": list(LABELS),
        "features": list(FEATURES),
        "grids": GRIDS,
        "card": card or {},
    }
    stats = getattr(model, "presence_stats", None)
    if stats:
        # fp32, unlike the weights: a few kB, and these are the statistics the scans are read with.
        flat = {
            f"{pattern}/{key}": t.float().contiguous().cpu() for pattern, ts in stats.items() for key, t in ts.items()
        }
        save_file(flat, str(folder / PRESENCE_FILE))
        config["presence_stats"] = sorted(stats)
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    return folder


def load_segmenter(folder: Path, *, device: torch.device | str = "cpu") -> tuple[PTv3, dict[str, Any]]:
    """The model and its config, or a :class:`SegmenterError` naming what is missing or inconsistent:
    its class names are checked against the model's outputs and the weights' head
    (:func:`~mlcore.pointcloud.segmenter_classes.read_classes` says what they mean)."""
    from safetensors.torch import load_file

    path = folder / "config.json"
    if not path.is_file() or not (folder / "model.safetensors").is_file():
        raise SegmenterError(
            f"{folder.name} is not a point-cloud segmenter: config.json and model.safetensors are needed"
        )
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise SegmenterError(f"config.json is not valid JSON ({exc.msg})") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise SegmenterError(f"config.json does not describe a {FORMAT} (format field missing or different)")
    if list(config.get("features", [])) != list(FEATURES):
        raise SegmenterError(
            f"the segmenter was trained on another feature set than this version's ({', '.join(FEATURES)}); "
            "retrain it with pointcloud-train"
        )
    try:
        cfg = PTv3Config.from_dict(config["model"])
    except Exception as exc:
        raise SegmenterError(f"config.json's model section is not a PTv3-lite configuration ({_first(exc)})") from None
    classes = read_classes(config, cfg.num_classes)
    try:
        state = load_file(str(folder / "model.safetensors"))
    except Exception as exc:
        raise SegmenterError(f"model.safetensors cannot be read ({_first(exc)})") from None
    head = state.get("class_embed")
    if head is not None and head.ndim == 2 and head.shape[0] != len(classes.names):
        raise SegmenterError(
            f"model.safetensors has a head of {head.shape[0]} classes but config.json names {len(classes.names)}, so "
            "the names cannot belong to these weights; use the config.json saved with them or retrain the segmenter "
            "with pointcloud-train"
        )
    try:
        model = PTv3(cfg)
        model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in state.items()})
    except Exception as exc:
        raise SegmenterError(f"model.safetensors does not match config.json: {_first(exc)}") from None
    if config.get("presence_stats"):
        model.presence_stats = _presence_stats(folder, model, config["presence_stats"])
    return model.to(device).eval(), config


def _presence_stats(folder: Path, model: PTv3, patterns: Any) -> presence.Statistics:
    """The BatchNorm statistics per presence pattern that config.json says the segmenter keeps."""
    from safetensors.torch import load_file

    path = folder / PRESENCE_FILE
    if not path.is_file():
        raise SegmenterError(f"config.json names presence statistics but {PRESENCE_FILE} is missing")
    try:
        flat = load_file(str(path))
    except Exception as exc:
        raise SegmenterError(f"{PRESENCE_FILE} cannot be read ({_first(exc)})") from None
    stats: presence.Statistics = {}
    for name, tensor in flat.items():
        pattern, _, key = name.partition("/")
        stats.setdefault(pattern, {})[key] = tensor.float()
    try:
        if sorted(stats) != sorted(patterns):
            raise ValueError(f"it holds {', '.join(sorted(stats)) or 'none'}, config.json names {', '.join(patterns)}")
        presence.check(model, stats)
    except (ValueError, TypeError) as exc:
        raise SegmenterError(f"{PRESENCE_FILE} does not match the segmenter: {_first(exc)}") from None
    return stats


def _first(exc: Exception) -> str:
    """The first line of an exception's message, short enough for a sentence."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
