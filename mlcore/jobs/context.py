"""``ctx``: the only way out of a job kind's ``run``.

:class:`JobContext` is the interface. :class:`InMemoryContext` keeps everything in memory for
tests; :class:`DirectoryContext` writes the CLI's output folder (``metrics.json``,
``charts/NAME.json``, ``artifacts/...``, ``log.txt``). The worker has its own subclass that
persists to the database and storage, throttled to about one write a second.
"""

from __future__ import annotations

import json
import math
import mimetypes
import shutil
import tempfile
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlcore.jobs.spec import JobCancelled

if TYPE_CHECKING:
    import torch

#: Vega-Lite specs whose inline data exceed this are refused: store the data as an artifact.
MAX_CHART_BYTES = 1_000_000
RENDERED_MEDIA_TYPES = (
    "image/png",
    "image/jpeg",
    "image/gif",
    "video/mp4",
    "application/x-ply",
    "text/csv",
    "application/json",
)


@dataclass
class Artifact:
    name: str
    path: Path
    media_type: str
    size: int


@dataclass
class Registration:
    kind: str
    path: Path
    card: dict[str, Any]


def guess_media_type(path: Path) -> str:
    if path.is_dir():
        return "application/zip"
    if path.suffix.lower() == ".ply":
        return "application/x-ply"
    return mimetypes.guess_type(path.name)[0] or "application/octet-stream"


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


@dataclass
class Metrics:
    """``metrics.json``: ``{"scalars": {name: value}, "series": {name: [[step, value], ...]}}``."""

    scalars: dict[str, float] = field(default_factory=dict)
    series: dict[str, list[list[float]]] = field(default_factory=dict)

    def add(self, name: str, value: float, step: float | None) -> None:
        value = float(value)
        if step is None:
            self.scalars[name] = value
        else:
            self.series.setdefault(name, []).append([step, value])

    def to_json(self) -> dict[str, Any]:
        # JSON has no NaN; a diverged loss is still worth showing, as null.
        def clean(v: float) -> float | None:
            return v if math.isfinite(v) else None

        return {
            "scalars": {k: clean(v) for k, v in self.scalars.items()},
            "series": {k: [[s, clean(v)] for s, v in pts] for k, pts in self.series.items()},
        }


class JobContext(ABC):
    """What ``run`` may call. Subclasses decide where things go."""

    def __init__(self, *, workdir: Path, device: str = "cpu") -> None:
        self.workdir = workdir
        self.device_name = device
        self.metrics = Metrics()
        self.charts: dict[str, dict[str, Any]] = {}
        self.artifacts: dict[str, Artifact] = {}
        self.registrations: list[Registration] = []
        self.fraction = 0.0
        self.stage = ""
        self._lock = threading.Lock()

    @property
    def device(self) -> torch.device:
        import torch

        return torch.device(self.device_name)

    # -- progress and logs -------------------------------------------------------------------
    def progress(self, fraction: float, stage: str = "") -> None:
        self.fraction = min(1.0, max(0.0, float(fraction)))
        self.stage = stage or self.stage
        self._on_progress()

    def log(self, line: str) -> None:
        self._on_log(str(line).rstrip("\n"))

    # -- results -----------------------------------------------------------------------------
    def metric(self, name: str, value: float, step: float | None = None) -> None:
        with self._lock:
            self.metrics.add(name, value, step)
        self._on_metrics()

    def chart(self, name: str, spec: dict[str, Any]) -> None:
        """Record a Vega-Lite spec; the same name again replaces the chart (live curves)."""
        encoded = json.dumps(spec, allow_nan=False)
        if len(encoded) > MAX_CHART_BYTES:
            raise ValueError(
                f"chart {name!r} is {len(encoded)} bytes; store its data as an artifact and "
                "reference it by URL instead of inlining more than 1 MB"
            )
        self.charts[name] = spec
        self._on_chart(name, spec)

    def artifact(self, name: str, path: Path | str, media_type: str | None = None) -> Artifact:
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"artifact {name!r}: {path} does not exist")
        item = Artifact(name, path, media_type or guess_media_type(path), _size(path))
        self.artifacts[name] = item
        self._on_artifact(item)
        return item

    def register(self, kind: str, path: Path | str, card: dict[str, Any] | None = None) -> None:
        """Offer an output (a model or dataset) to the team library."""
        item = Registration(kind, Path(path), dict(card or {}))
        self.registrations.append(item)
        self._on_register(item)

    # -- budgets -----------------------------------------------------------------------------
    def take_allowance(self, name: str, wanted: int) -> int:
        """Take up to ``wanted`` units of a budget the platform limits per team and client address
        (e.g. ``watermark-foreign-matches``: images a verify job may match against other teams'
        keys) and return how many were granted. Outside the platform nothing is limited."""
        wanted = max(0, int(wanted))
        return min(wanted, max(0, self._on_allowance(name, wanted)))

    def _on_allowance(self, name: str, wanted: int) -> int:
        return wanted

    # -- cancellation ------------------------------------------------------------------------
    @abstractmethod
    def cancelled(self) -> bool: ...

    def raise_if_cancelled(self) -> None:
        if self.cancelled():
            raise JobCancelled()

    # -- hooks for subclasses ----------------------------------------------------------------
    def _on_progress(self) -> None: ...
    def _on_log(self, line: str) -> None: ...
    def _on_metrics(self) -> None: ...
    def _on_chart(self, name: str, spec: dict[str, Any]) -> None: ...
    def _on_artifact(self, item: Artifact) -> None: ...
    def _on_register(self, item: Registration) -> None: ...

    def close(self) -> None:
        """Flush anything throttled. Called once when ``run`` returns or raises."""


class InMemoryContext(JobContext):
    """A context for tests: everything stays in attributes; ``cancel()`` requests cancellation."""

    def __init__(
        self, *, workdir: Path | None = None, device: str = "cpu", allowances: dict[str, int] | None = None
    ) -> None:
        super().__init__(workdir=workdir or Path(tempfile.mkdtemp(prefix="moelab-")), device=device)
        self.lines: list[str] = []
        self.progress_history: list[tuple[float, str]] = []
        self._cancel = threading.Event()
        #: Budgets left by name (a test sets them); a name not listed is unlimited.
        self.allowances = dict(allowances or {})

    def cancel(self) -> None:
        self._cancel.set()

    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def _on_progress(self) -> None:
        self.progress_history.append((self.fraction, self.stage))

    def _on_log(self, line: str) -> None:
        self.lines.append(line)

    def _on_allowance(self, name: str, wanted: int) -> int:
        if name not in self.allowances:
            return wanted
        granted = min(wanted, self.allowances[name])
        self.allowances[name] -= granted
        return granted


class DirectoryContext(InMemoryContext):
    """Writes the CLI's output folder as the job goes, so an interrupted run leaves its results."""

    def __init__(self, out: Path, *, device: str = "cpu", echo: bool = False) -> None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "charts").mkdir(exist_ok=True)
        (out / "artifacts").mkdir(exist_ok=True)
        self.out = out
        self.echo = echo
        super().__init__(workdir=Path(tempfile.mkdtemp(prefix="moelab-work-")), device=device)
        self._log_file = (out / "log.txt").open("a", encoding="utf-8")

    def _on_log(self, line: str) -> None:
        super()._on_log(line)
        self._log_file.write(line + "\n")
        self._log_file.flush()
        if self.echo:
            print(line, flush=True)

    def _on_metrics(self) -> None:
        (self.out / "metrics.json").write_text(json.dumps(self.metrics.to_json(), indent=1))

    def _on_chart(self, name: str, spec: dict[str, Any]) -> None:
        (self.out / "charts" / f"{name}.json").write_text(json.dumps(spec, indent=1))

    def _on_artifact(self, item: Artifact) -> None:
        target = self.out / "artifacts" / item.name
        if item.path.resolve() == target.resolve():
            return
        if target.exists():
            shutil.rmtree(target) if target.is_dir() else target.unlink()
        if item.path.is_dir():
            shutil.copytree(item.path, target)
        else:
            shutil.copy2(item.path, target)

    def _on_register(self, item: Registration) -> None:
        registered = self.out / "registered.json"
        entries = json.loads(registered.read_text()) if registered.exists() else []
        entries.append({"kind": item.kind, "path": str(self._kept(item.path, len(entries))), "card": item.card})
        registered.write_text(json.dumps(entries, indent=1))

    def _kept(self, path: Path, index: int) -> Path:
        """Where a registered output stays after the run: the work folder is deleted on close, so
        the copy in ``artifacts/`` when the output is also an artifact, else a copy in ``registered/``."""
        for artifact in self.artifacts.values():
            if artifact.path.resolve() == path.resolve():
                return (self.out / "artifacts" / artifact.name).resolve()
        if not path.resolve().is_relative_to(Path(self.workdir).resolve()):
            return path.resolve()  # already outside the work folder (e.g. in the output folder)
        target = self.out / "registered" / f"{index}-{path.name}"
        if target.exists():
            shutil.rmtree(target) if target.is_dir() else target.unlink()
        target.parent.mkdir(exist_ok=True)
        shutil.copytree(path, target) if path.is_dir() else shutil.copy2(path, target)
        return target.resolve()

    def close(self) -> None:
        self._on_metrics()
        self._log_file.close()
        shutil.rmtree(self.workdir, ignore_errors=True)
