"""The job-kind spec: what a kind declares so the web, the API, the CLI and the worker can all
validate and run it the same way (``docs/architecture.md``, "The job-kind contract")."""

from __future__ import annotations

import math
import re
import secrets
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from mlcore.errors import JobCancelled as JobCancelled
from mlcore.errors import JobError as JobError
from mlcore.jobs.params import SEED_MAX, Estimate, File, Param, ParamError, Seed

Queue = Literal["gpu", "cpu", "verify"]
QUEUES: tuple[str, ...] = ("gpu", "cpu", "verify")
FieldErrors = list[tuple[str, str]]


@dataclass(frozen=True)
class InputCheck:
    """What a kind's ``check_inputs`` says of a job's parameters together with its uploads."""

    #: Combinations that contradict each other, as (field, sentence); the job is refused.
    errors: FieldErrors = field(default_factory=list)
    #: References the job will not read with these parameters and uploads: cleared, not fetched.
    unused: frozenset[str] = frozenset()


class ValidationError(JobError):
    """Parameters that do not fit the spec; ``errors`` pairs each field with its message."""

    def __init__(self, errors: FieldErrors) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{name}: {message}" for name, message in errors))


Better = Literal["higher", "lower"]
#: How a value is shown: its unit after the number, and the factor from the recorded value
#: (bytes → MB is 1e-6, a fraction → % is 100).
UNITS: dict[str, tuple[str, float]] = {
    "": ("", 1.0),
    "%": ("%", 100.0),
    "pp": ("pp", 100.0),  # a difference of two fractions, in percentage points
    "MB": ("MB", 1e-6),
    "dB": ("dB", 1.0),
    "s": ("s", 1.0),
    "ms": ("ms", 1.0),
    "bits": ("bits", 1.0),
    "×": ("×", 1.0),
    "points/s": ("points/s", 1.0),
}
VARIANT = "{variant}"


@dataclass(frozen=True, kw_only=True)
class Metric:
    """One scalar a kind records, declared so every page can show it readably: a label, a unit,
    which direction is better, one line on what it measures, and the kind's own target if it
    states one. ``key`` is the recorded scalar's name; ``{variant}`` in it stands for a method or
    variant (``{variant}/ppl_mean`` matches ``mone@0.25/ppl_mean``), so pages can group by variant.

    ``n`` names a parameter or scalar that counts the items behind the value; with ``proportion``
    (a share of ``n`` items) the page adds a 95 % Wilson interval, so 0.533 against 0.550 reads as
    the one item of 20 that it is. ``low``/``high`` name recorded interval bounds instead.
    ``beside`` names another scalar shown next to this one (wall-clock beside a FLOP fraction)."""

    key: str
    label: str
    unit: str = ""
    better: Better | None = None
    description: str = ""
    target: float | None = None
    n: str | Callable[[Mapping[str, Any]], float] = ""
    proportion: bool = False
    low: str = ""
    high: str = ""
    beside: str = ""
    digits: int = 3

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"metric {self.key}: unit must be one of {sorted(UNITS)}, not {self.unit!r}")
        if self.key.count(VARIANT) > 1:
            raise ValueError(f"metric {self.key}: {VARIANT} may appear once")

    @property
    def pattern(self) -> re.Pattern[str]:
        head, _, tail = self.key.partition(VARIANT)
        if not _:
            return re.compile(re.escape(self.key) + r"\Z")
        return re.compile(re.escape(head) + r"(?P<variant>.+?)" + re.escape(tail) + r"\Z")

    def match(self, name: str) -> str | None:
        """The variant ``name`` records this metric for ("" for a metric without variants), or None."""
        found = self.pattern.match(name)
        if found is None:
            return None
        return found.groupdict().get("variant") or ""

    def scalar(self, template: str, variant: str) -> str:
        """The recorded name of ``template`` (a key with ``{variant}``) for ``variant``."""
        return template.replace(VARIANT, variant)

    def count(self, params: Mapping[str, Any], scalars: Mapping[str, Any]) -> int | None:
        """How many items the value is a share of, from a parameter or a scalar; None if unknown."""
        if not self.n:
            return None
        try:
            found = self.n(params) if callable(self.n) else scalars.get(self.n, params.get(self.n))
        except (KeyError, TypeError, ValueError):
            return None
        if isinstance(found, bool) or not isinstance(found, int | float) or not math.isfinite(found) or found < 1:
            return None
        return int(found)

    def shown(self, value: float) -> float:
        return value * UNITS[self.unit][1]

    def misses_target(self, value: float) -> bool:
        if self.target is None or self.better is None or not math.isfinite(value):
            return False
        return value < self.target if self.better == "higher" else value > self.target

    def describe(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "label": self.label,
            "unit": self.unit,
            "better": self.better,
            "description": self.description,
            "target": self.target,
        }


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """The method-versus-baseline table a kind's result page opens with: one row per variant,
    ``baseline`` (the original model, or the baseline method) first, a column per metric in
    ``metrics`` (keys of the kind's declared metrics, with ``{variant}``) and its difference from the
    baseline. ``chart`` names a chart the job draws of the same comparison, shown beside the table.
    A kind without one says why in ``reason`` (``Comparison.none("...")``)."""

    baseline: str = ""
    metrics: tuple[str, ...] = ()
    chart: str = ""
    reason: str = ""

    @classmethod
    def none(cls, reason: str) -> Comparison:
        return cls(reason=reason)

    @property
    def exists(self) -> bool:
        return bool(self.metrics)

    def __post_init__(self) -> None:
        if self.metrics and any(VARIANT not in key for key in self.metrics):
            raise ValueError("a comparison's metrics are per variant: each key holds {variant}")
        if not self.metrics and not self.reason:
            raise ValueError("a kind without a comparison says why (Comparison.none(reason))")


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
    #: Cross-checks of the cleaned parameters against the names of the uploaded files, at submission
    #: and again before ``run`` (see :meth:`apply_uploads`): no input may be ignored silently.
    check_inputs: Callable[[dict[str, Any], frozenset[str]], InputCheck] | None = None
    #: The scalars a reader should understand, with units, direction, a description and targets.
    metrics: tuple[Metric, ...] = ()
    #: What the result page compares first (or why the kind compares nothing); None: not declared.
    comparison: Comparison | None = None

    def metric_for(self, name: str) -> tuple[Metric, str] | None:
        """The declared metric a recorded scalar ``name`` is, and its variant ("" if none)."""
        for metric in self.metrics:
            variant = metric.match(name)
            if variant is not None:
                return metric, variant
        return None

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
        keys = {m.key for m in self.metrics}
        if len(keys) != len(self.metrics):
            raise ValueError(f"{self.name}: metric keys repeat")
        if self.comparison is not None and not keys.issuperset(self.comparison.metrics):
            raise ValueError(f"{self.name}: the comparison names metrics the spec does not declare")

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
            # An empty string is "not given" (the default), except for text and for a multiple choice,
            # where it is the empty list, as the form sends it: `--set sources=` must not mean all of them.
            if value is None or (isinstance(value, str) and not value.strip() and p.type not in ("text", "multi")):
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

    def apply_uploads(self, params: Mapping[str, Any], uploaded: Collection[str]) -> dict[str, Any]:
        """``params`` given the file parameters that got uploads: references that an upload replaces
        (``replaced_by``) or that ``check_inputs`` calls unused become ``None``, so they are neither
        fetched, built nor recorded; contradictory combinations raise :class:`ValidationError`."""
        names = frozenset(uploaded)
        unused = {
            p.name for p in self.value_params if set(getattr(p, "replaced_by", ())) & names and params.get(p.name)
        }
        if self.check_inputs is not None:
            check = self.check_inputs(dict(params), names)
            if check.errors:
                raise ValidationError(list(check.errors))
            unused |= set(check.unused)
        return {name: None if name in unused else value for name, value in params.items()}

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
            "metrics": [m.describe() for m in self.metrics],
            "comparison": None
            if self.comparison is None
            else {
                "baseline": self.comparison.baseline,
                "metrics": list(self.comparison.metrics),
                "reason": self.comparison.reason,
            },
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
