"""The job-kind spec: what a kind declares so the web, the API, the CLI and the worker can all
validate and run it the same way (``docs/architecture.md``, "The job-kind contract")."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from mlcore.errors import JobCancelled as JobCancelled
from mlcore.errors import JobError as JobError
from mlcore.jobs.params import SEED_MAX, Estimate, File, Param, ParamError, Seed

Queue = Literal["gpu", "cpu", "verify"]
QUEUES: tuple[str, ...] = ("gpu", "cpu", "verify")
FieldErrors = list[tuple[str, str]]


class ValidationError(JobError):
    """Parameters that do not fit the spec; ``errors`` pairs each field with its message."""

    def __init__(self, errors: FieldErrors) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{name}: {message}" for name, message in errors))


@dataclass(frozen=True, kw_only=True)
class JobSpec:
    name: str
    title: str
    summary: str
    version: int
    queue: Queue
    params: tuple[Param, ...]
    soft_time_limit: int = 3600
    time_limit: int = 3900
    validate: Callable[[dict[str, Any]], FieldErrors] | None = None
    estimate: Callable[[dict[str, Any]], Estimate] | None = None
    #: A short "how to read this" text shown beside the results.
    guide: str = ""
    #: Parameter values that run the kind on built-in samples in a few minutes on a CPU.
    sample: Mapping[str, Any] = field(default_factory=dict)
    #: The one line at the top of a finished job's page, from its scalar metrics (name → value);
    #: return "" when the metrics it needs are missing (an older or unfinished run).
    summarize: Callable[[Mapping[str, Any]], str] | None = None

    def summary_line(self, scalars: Mapping[str, Any]) -> str:
        """``summarize`` applied defensively: a page must render even if a kind's summary breaks."""
        if self.summarize is None:
            return ""
        try:
            return self.summarize(scalars)
        except (KeyError, TypeError, ValueError, ZeroDivisionError, IndexError):
            return ""

    def __post_init__(self) -> None:
        if self.queue not in QUEUES:
            raise ValueError(f"{self.name}: queue must be one of {QUEUES}, not {self.queue!r}")
        if self.soft_time_limit >= self.time_limit:
            raise ValueError(f"{self.name}: soft_time_limit must be below time_limit")
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.name}: parameter names repeat")

    @property
    def value_params(self) -> tuple[Param, ...]:
        """The parameters whose values travel in ``params`` (every type but files)."""
        return tuple(p for p in self.params if not isinstance(p, File))

    @property
    def file_params(self) -> tuple[File, ...]:
        return tuple(p for p in self.params if isinstance(p, File))

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def clean(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Validate raw values, fill defaults and fix the seed; raise :class:`ValidationError`.

        ``raw`` may hold strings (forms, CLI) or JSON values (API). Unknown names are errors, so
        a typo on the command line is not silently ignored.
        """
        errors: FieldErrors = []
        known = {p.name for p in self.params}
        errors += [(name, "Unknown parameter.") for name in raw if name not in known]
        cleaned: dict[str, Any] = {}
        for p in self.value_params:
            value = raw.get(p.name)
            if value is None or (isinstance(value, str) and not value.strip() and p.type != "text"):
                if isinstance(p, Seed) and p.default is None:
                    cleaned[p.name] = secrets.randbelow(SEED_MAX)
                elif p.default is not None:
                    cleaned[p.name] = p.default
                elif p.required:
                    errors.append((p.name, "This field is required."))
                else:
                    cleaned[p.name] = None
                continue
            try:
                cleaned[p.name] = p.clean(value)
            except ParamError as exc:
                errors.append((p.name, str(exc)))
        if not errors and self.validate is not None:
            errors += self.validate(cleaned)
        if errors:
            raise ValidationError(errors)
        return cleaned

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "summary": self.summary,
            "version": self.version,
            "queue": self.queue,
            "soft_time_limit": self.soft_time_limit,
            "time_limit": self.time_limit,
            "params": [p.describe() for p in self.params],
            "guide": self.guide,
            "sample": dict(self.sample),
        }

    def changed_params(self, old: Mapping[str, Any]) -> list[str]:
        """Names whose meaning changed since a job stored ``old`` (for Re-run after a version bump):
        parameters added, removed, or whose stored value no longer validates."""
        changed = [name for name in old if name not in {p.name for p in self.value_params}]
        for p in self.value_params:
            if p.name not in old:
                changed.append(p.name)
                continue
            try:
                if old[p.name] is not None:
                    p.clean(old[p.name])
            except ParamError:
                changed.append(p.name)
        return changed
