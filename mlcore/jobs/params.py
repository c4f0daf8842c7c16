"""Typed job parameters: the vocabulary every job-kind spec is written in.

One class per parameter type of the job-kind contract (``docs/architecture.md``). Each one knows
how to *clean* a raw value — a string from a form or ``--set NAME=VALUE``, or a JSON value from
the API — into the typed value a kind's ``run`` receives, and how to *describe* itself as JSON,
which is what forms, ``moelab kinds --json`` and the OpenAPI document are rendered from.

Nothing here imports torch: the web process renders forms from these classes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar


class ParamError(ValueError):
    """A raw value does not fit its parameter; the message is shown next to the field."""


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _split_list(raw: Any) -> list[Any]:
    if isinstance(raw, str):
        return [part.strip() for part in raw.split(",") if part.strip()]
    if isinstance(raw, Sequence):
        return list(raw)
    raise ParamError("Expected a list.")


@dataclass(frozen=True, kw_only=True)
class Param:
    """Fields common to every parameter type."""

    name: str
    label: str = ""
    help: str = ""
    default: Any = None
    required: bool = False

    type: ClassVar[str] = "param"

    @property
    def title(self) -> str:
        return self.label or self.name.replace("_", " ").capitalize()

    def clean(self, raw: Any) -> Any:
        """Return the typed value for ``raw``, or raise :class:`ParamError`."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """JSON description used by forms, ``moelab kinds --json`` and the API schema."""
        return {
            "name": self.name,
            "type": self.type,
            "label": self.title,
            "help": self.help,
            "default": self.default,
            "required": self.required,
        }

    def json_schema(self) -> dict[str, Any]:
        return {"description": self.help or self.title}


@dataclass(frozen=True, kw_only=True)
class _Number(Param):
    min: float | None = None
    max: float | None = None

    def _bounded(self, value: float) -> None:
        if self.min is not None and value < self.min:
            raise ParamError(f"Must be at least {self.min:g}.")
        if self.max is not None and value > self.max:
            raise ParamError(f"Must be at most {self.max:g}.")

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "min": self.min, "max": self.max}

    def _schema_bounds(self) -> dict[str, Any]:
        bounds: dict[str, Any] = {}
        if self.min is not None:
            bounds["minimum"] = self.min
        if self.max is not None:
            bounds["maximum"] = self.max
        return bounds


@dataclass(frozen=True, kw_only=True)
class Int(_Number):
    type: ClassVar[str] = "int"

    def clean(self, raw: Any) -> int:
        if isinstance(raw, bool):
            raise ParamError("Enter a whole number.")
        try:
            value = int(raw.strip()) if isinstance(raw, str) else int(raw)
            if not isinstance(raw, str) and value != raw:
                raise ValueError
        except (TypeError, ValueError, OverflowError):
            raise ParamError("Enter a whole number.") from None
        self._bounded(value)
        return value

    def json_schema(self) -> dict[str, Any]:
        return {**super().json_schema(), "type": "integer", **self._schema_bounds()}


@dataclass(frozen=True, kw_only=True)
class Float(_Number):
    type: ClassVar[str] = "float"

    def clean(self, raw: Any) -> float:
        if isinstance(raw, bool):
            raise ParamError("Enter a number.")
        try:
            value = float(raw.strip()) if isinstance(raw, str) else float(raw)
        except (TypeError, ValueError):
            raise ParamError("Enter a number.") from None
        if not math.isfinite(value):
            raise ParamError("Enter a finite number.")
        self._bounded(value)
        return value

    def json_schema(self) -> dict[str, Any]:
        return {**super().json_schema(), "type": "number", **self._schema_bounds()}


@dataclass(frozen=True, kw_only=True)
class Bool(Param):
    default: bool = False
    type: ClassVar[str] = "bool"

    def clean(self, raw: Any) -> bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in _TRUE | _FALSE:
            return raw.strip().lower() in _TRUE
        raise ParamError("Enter true or false.")

    def json_schema(self) -> dict[str, Any]:
        return {**super().json_schema(), "type": "boolean"}


@dataclass(frozen=True, kw_only=True)
class Choice(Param):
    options: tuple[str, ...] = ()
    type: ClassVar[str] = "choice"

    def clean(self, raw: Any) -> str:
        value = str(raw).strip()
        if value not in self.options:
            raise ParamError(f"Choose one of: {', '.join(self.options)}.")
        return value

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "options": list(self.options)}

    def json_schema(self) -> dict[str, Any]:
        return {**super().json_schema(), "type": "string", "enum": list(self.options)}


@dataclass(frozen=True, kw_only=True)
class Multi(Param):
    options: tuple[str, ...] = ()
    min_count: int = 0
    type: ClassVar[str] = "multi"

    def clean(self, raw: Any) -> list[str]:
        values = [str(v).strip() for v in _split_list(raw)]
        unknown = [v for v in values if v not in self.options]
        if unknown:
            raise ParamError(f"Unknown option {unknown[0]!r}; choose from: {', '.join(self.options)}.")
        if len(values) < self.min_count:
            raise ParamError(f"Choose at least {self.min_count}.")
        # Keep the spec's order and drop repeats so two equal submissions compare equal.
        return [option for option in self.options if option in values]

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "options": list(self.options), "min_count": self.min_count}

    def json_schema(self) -> dict[str, Any]:
        return {
            **super().json_schema(),
            "type": "array",
            "items": {"type": "string", "enum": list(self.options)},
        }


@dataclass(frozen=True, kw_only=True)
class Numbers(_Number):
    """A list of numbers, e.g. pruning ratios ``0.25,0.5``."""

    integer: bool = False
    max_count: int = 64
    type: ClassVar[str] = "numbers"

    def clean(self, raw: Any) -> list[float] | list[int]:
        items = _split_list(raw)
        if not items:
            raise ParamError("Enter at least one number.")
        if len(items) > self.max_count:
            raise ParamError(f"Enter at most {self.max_count} numbers.")
        one: _Number = (
            Int(name=self.name, min=self.min, max=self.max)
            if self.integer
            else Float(name=self.name, min=self.min, max=self.max)
        )
        return [one.clean(item) for item in items]

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "integer": self.integer, "max_count": self.max_count}

    def json_schema(self) -> dict[str, Any]:
        item = {"type": "integer" if self.integer else "number", **self._schema_bounds()}
        return {**super().json_schema(), "type": "array", "items": item, "maxItems": self.max_count}


@dataclass(frozen=True, kw_only=True)
class Text(Param):
    max_length: int = 1000
    multiline: bool = False
    type: ClassVar[str] = "text"

    def clean(self, raw: Any) -> str:
        if not isinstance(raw, str):
            raise ParamError("Enter text.")
        value = raw.strip()
        if len(value) > self.max_length:
            raise ParamError(f"At most {self.max_length} characters.")
        if "\x00" in value:
            raise ParamError("Text may not contain NUL characters.")
        return value

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "max_length": self.max_length, "multiline": self.multiline}

    def json_schema(self) -> dict[str, Any]:
        return {**super().json_schema(), "type": "string", "maxLength": self.max_length}


SEED_MAX = 2**31 - 1


@dataclass(frozen=True, kw_only=True)
class Seed(Int):
    """A random seed. Left empty it is drawn at submission and recorded, so a run can be repeated."""

    label: str = "Seed"
    help: str = "Leave empty for a random seed; the seed used is recorded."
    min: float | None = 0
    max: float | None = SEED_MAX
    type: ClassVar[str] = "seed"


@dataclass(frozen=True, kw_only=True)
class _Reference(Param):
    """A reference to a model or dataset: ``zoo:NAME``, ``library:ID`` or, in ``moelab run`` only,
    a local path. ``accepts`` lists the item kinds the job can use; ``replaced_by`` the file
    parameters whose upload takes its place (the reference is then cleared: neither fetched, built
    nor recorded as an input; see ``JobSpec.apply_uploads``)."""

    accepts: tuple[str, ...] = ()
    replaced_by: tuple[str, ...] = ()

    def clean(self, raw: Any) -> str:
        if not isinstance(raw, str | int) or isinstance(raw, bool):
            raise ParamError("Pick an item.")
        value = str(raw).strip()
        if not value:
            raise ParamError("Pick an item.")
        if len(value) > 1024 or "\x00" in value:
            raise ParamError("Not a valid reference.")
        return value

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "accepts": list(self.accepts)}

    def json_schema(self) -> dict[str, Any]:
        return {
            **super().json_schema(),
            "type": "string",
            "description": f"{self.help or self.title} (zoo:NAME or library:ID; accepts {', '.join(self.accepts)})",
        }


@dataclass(frozen=True, kw_only=True)
class _LibraryReference(_Reference):
    """A model or dataset: the API also takes a library item's bare id (``12`` is ``library:12``)."""

    def clean(self, raw: Any) -> str:
        value = super().clean(raw)
        return f"library:{value}" if value.isascii() and value.isdigit() else value

    def json_schema(self) -> dict[str, Any]:
        return {**super().json_schema(), "type": ["string", "integer"]}


@dataclass(frozen=True, kw_only=True)
class Model(_LibraryReference):
    type: ClassVar[str] = "model"


@dataclass(frozen=True, kw_only=True)
class Dataset(_LibraryReference):
    type: ClassVar[str] = "dataset"


@dataclass(frozen=True, kw_only=True)
class Key(_Reference):
    """A watermark key of the submitting team, by id."""

    type: ClassVar[str] = "key"


@dataclass(frozen=True, kw_only=True)
class File(Param):
    """One or more uploads. ``formats`` are sniffed from content (see :mod:`mlcore.sniff`)."""

    formats: tuple[str, ...] = ()
    max_bytes: int = 100 * 2**20
    multiple: bool = False
    max_files: int = 32
    type: ClassVar[str] = "file"

    def clean(self, raw: Any) -> Any:
        # Files do not travel in ``params``; they arrive as ``inputs``. See ``JobSpec.check_files``.
        raise ParamError("Files are passed as inputs, not as parameter values.")

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "formats": list(self.formats),
            "max_bytes": self.max_bytes,
            "multiple": self.multiple,
            "max_files": self.max_files,
        }

    def json_schema(self) -> dict[str, Any]:
        item = {"type": "string", "format": "binary"}
        if self.multiple:
            return {"type": "array", "items": item, "description": self.help or self.title}
        return {**item, "description": self.help or self.title}


REFERENCE_TYPES = (Model, Dataset, Key)


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """What a job will need, from ``spec.estimate(params)``; used to refuse a job before it starts."""

    memory_bytes: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
