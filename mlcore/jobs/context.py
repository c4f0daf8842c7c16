"""``ctx``: the only way out of a job kind's ``run``.

:class:`JobContext` is the interface. :class:`InMemoryContext` keeps everything in memory for
tests; :class:`DirectoryContext` writes the CLI's output folder (``metrics.json``,
``charts/NAME.json``, ``artifacts/...``, ``log.txt``). The worker has its own subclass that
persists to the database and storage, throttled to about one write a second.

Progress only moves forward: a report below the last one keeps the bar where it is and changes
only the stage text. A long loop inside a stage reports through a :class:`ProgressSpan`
(``ctx.span(start, end, label)``), so the page says where in the stage the job is ("calibrating:
batch 5 of 16") instead of sitting still and then jumping.
"""

from __future__ import annotations

import json
import math
import mimetypes
import shutil
import tempfile
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
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
        #: A folder that outlives a failed attempt, named by what the job computes, for progress a
        #: later attempt continues from (``None``: nothing is kept). Kinds create it when they write.
        self.resume_dir: Path | None = None
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
        """Move the bar to ``fraction`` (0–1) and say what the job is doing.

        The bar never goes back: a stage that starts below where the last one ended (a kind whose
        phases each count from 0, a rounding in a span) keeps the higher value, so a watcher never
        sees the job undo work. The stage text always updates.
        """
        self.fraction = max(self.fraction, min(1.0, max(0.0, float(fraction))))
        self.stage = stage or self.stage
        self._on_progress()

    def span(
        self, start: float, end: float, label: str = "", *, every_seconds: float = 1.0, every_fraction: float = 0.05
    ) -> ProgressSpan:
        """The stretch ``[start, end]`` of the bar for a long loop; see :class:`ProgressSpan`."""
        return ProgressSpan(self, start, end, label, every_seconds=every_seconds, every_fraction=every_fraction)

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


class ProgressSpan:
    """One stretch ``[start, end]`` of a job's bar, filled in by a long loop as it goes.

    A loop (calibration batches, evaluation windows, training steps) calls the span with its own
    fraction done (0–1) and where it is (``"batch 5 of 16"``); the span maps the fraction into
    ``[start, end]``, prefixes ``label`` to the text and passes both to ``ctx.progress``.

    It checks for cancellation on every call (an event read, so a stop request lands within one
    batch), but reports at most once per ``every_seconds`` or per ``every_fraction`` of the span,
    plus the first and the last call. A tiny model's loop of thousands of batches thus makes a
    few dozen reports instead of thousands; the worker's context then writes at most one of them
    a second to the database whatever it is given.

    :meth:`part` cuts a sub-span for one of several loops in a stage (planning, then evaluating, a
    compressed variant). Library code only ever sees a plain ``(fraction, stage)`` callable.
    """

    def __init__(
        self,
        ctx: JobContext,
        start: float,
        end: float,
        label: str = "",
        *,
        every_seconds: float = 1.0,
        every_fraction: float = 0.05,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0.0 <= start <= end <= 1.0 + 1e-9:  # a computed end may overshoot 1 by a rounding
            raise ValueError(f"a progress span needs 0 <= start <= end <= 1, not [{start}, {end}]")
        self.ctx = ctx
        self.start, self.end, self.label = start, min(end, 1.0), label
        self.every_seconds, self.every_fraction = every_seconds, every_fraction
        self._clock = clock
        self._last: tuple[float, float] | None = None  # (fraction within the span, clock) of the last report

    def at(self, fraction: float) -> float:
        """The job's fraction when this span's loop is ``fraction`` done."""
        return self.start + (self.end - self.start) * min(1.0, max(0.0, fraction))

    def text(self, stage: str) -> str:
        return f"{self.label}: {stage}" if self.label and stage else self.label or stage

    def __call__(self, fraction: float, stage: str = "") -> None:
        self.ctx.raise_if_cancelled()
        fraction = min(1.0, max(0.0, float(fraction)))
        now = self._clock()
        if self._last is not None and fraction < 1.0:
            last_fraction, last_time = self._last
            if fraction - last_fraction < self.every_fraction and now - last_time < self.every_seconds:
                return
        self._last = (fraction, now)
        self.ctx.progress(self.at(fraction), self.text(stage))

    def count(self, done: int, total: int, noun: str) -> None:
        """Report ``done`` of ``total`` things as ``"noun done of total"``."""
        self(done / total if total else 1.0, f"{noun} {done} of {total}")

    def part(self, start: float, end: float, label: str | None = None) -> ProgressSpan:
        """The sub-span from ``start`` to ``end`` of this one (both 0–1 of this span), labelled
        ``label`` (this span's label when none is given)."""
        return ProgressSpan(
            self.ctx,
            self.at(start),
            self.at(end),
            self.label if label is None else label,
            every_seconds=self.every_seconds,
            every_fraction=self.every_fraction,
            clock=self._clock,
        )


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
