"""The submit form of any job kind, rendered from its spec's parameter objects.

There is no Django form class per kind: a kind added to ``mlcore/jobs/`` gets its page without
touching the web app. Validation is the spec's (through ``job_submit``), so the browser, the API
and the CLI refuse the same values with the same messages; this module only turns parameters into
widgets and a POST back into raw values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.http import QueryDict
from django.template.defaultfilters import filesizeformat

from mlcore.items.registry import platform_references
from mlcore.jobs.params import REFERENCE_TYPES, Bool, File, Float, Int, Key, Multi, Numbers, Param, Seed, Text
from mlcore.jobs.references import builtin_items
from mlcore.jobs.spec import JobSpec
from webapp.accounts.models import Team
from webapp.jobs.references import options_for

#: Extensions for the file picker's ``accept`` hint (the server sniffs content; this only filters the dialog).
_EXTENSIONS: dict[str, tuple[str, ...]] = {
    "csv": (".csv", ".tsv"),
    "jpeg": (".jpg", ".jpeg"),
    "tar": (".tar", ".tar.gz", ".tgz"),
    "txt": (".txt", ".text"),
}


@dataclass
class FieldView:
    """What the template needs to draw one parameter."""

    param: Param
    widget: str
    value: Any = ""
    errors: list[str] = field(default_factory=list)
    options: list[tuple[str, str]] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    constraints: str = ""
    #: One line per option (a method's description), shown beside the option.
    notes: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.param.name

    @property
    def id(self) -> str:
        return f"param-{self.param.name}"


def _display(param: Param, value: Any) -> Any:
    """A typed value (a default, or a stored job's parameter) as the widget shows it."""
    if value is None:
        return ""
    if isinstance(param, Multi):
        return list(value)
    if isinstance(param, Bool):
        return bool(value)
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return value


def _number_step(param: Int | Float) -> str:
    return "1" if isinstance(param, Int) else "any"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _bounds(param: Int | Float | Numbers) -> str:
    low, high = param.min, param.max
    if low is not None and high is not None:
        return f"{_number(low)} to {_number(high)}"
    if low is not None:
        return f"at least {_number(low)}"
    if high is not None:
        return f"at most {_number(high)}"
    return ""


def _reference_options(param: Param, team: Team | None) -> list[tuple[str, str]]:
    """The references the platform builds for a kind the parameter accepts (the keyring), the team's
    ready library items that it accepts, then the built-in (zoo) ones."""
    accepts = getattr(param, "accepts", ())
    items = [item for item in builtin_items().values() if not accepts or item.kind in accepts]
    library = [] if team is None else options_for(param, team)
    builtin = [(f"zoo:{i.name}", f"{i.title} ({i.kind})") for i in sorted(items, key=lambda i: i.title)]
    # Not an item of anyone's library (every registered key, for the keyring): declared by its item kind.
    platform = [(ref.reference, ref.label) for ref in platform_references(accepts)]
    return platform + library + builtin


def _key_options(param: Key, team: Team | None) -> list[tuple[str, str]]:
    """The team's active watermark keys, as the portal's source lists them."""
    return [] if team is None else options_for(param, team)


def _file_hint(param: File) -> tuple[str, str]:
    accept = ",".join(ext for fmt in param.formats for ext in _EXTENSIONS.get(fmt, (f".{fmt}",)))
    formats = ", ".join(param.formats) if param.formats else "any format"
    many = f"up to {param.max_files} files, " if param.multiple else ""
    return accept, f"{formats}; {many}at most {filesizeformat(param.max_bytes)} each"


#: What a reference parameter accepts, in words a newcomer reads (the item kinds' names are ids).
PLAIN_KINDS: dict[str, str] = {
    "hf-moe-lm": "a Mixture-of-Experts language model (Hugging Face format)",
    "hf-lm": "a language model (Hugging Face format)",
    "text": "a text corpus",
    "images": "a set of images",
    "pointclouds": "point clouds",
    "labelled-scans": "labelled point-cloud scans",
    "graphs": "a graph dataset",
    "watermark-markers": "an image generator with MOLM watermark markers",
    "video-dit": "a video diffusion transformer",
    "keyring": "a watermark keyring",
}

#: One line on each method a form offers, keyed by (kind, parameter): the names alone are papers' acronyms.
OPTION_NOTES: dict[tuple[str, str], dict[str, str]] = {
    ("compress-moe", "methods"): {
        "mone": "MoNE: drop the least-used, least-varied experts; each leaves a novice (its mean output)",
        "mone-zero": "MoNE's ranking; dropped experts output zero (an ablation)",
        "mone-delete": "MoNE's ranking; dropped experts are removed from routing (an ablation)",
        "random": "drop experts at random (the floor any method should beat)",
        "frequency": "drop the experts the router picks least often",
        "rs": "drop by routing score, ranked across the whole model",
        "ean": "EAN: drop by the size of each expert's activations",
        "reap": "REAP: drop by router-weighted activation size",
        "naee": "NAEE: try every subset per layer, keep the one that changes outputs least",
        "hc-smoe": "HC-SMoE: merge similar experts by clustering their outputs",
    },
    ("video-generate", "attention"): {
        "full": "every token attends to every token (the reference)",
        "moga": "MoGA: a router sends tokens to groups; attention stays within a group",
        "local": "spatial windows and per-frame attention only",
    },
    ("video-train", "attention"): {
        "full": "every token attends to every token (the reference)",
        "moga": "MoGA: a router sends tokens to groups; attention stays within a group",
        "local": "spatial windows and per-frame attention only",
    },
}


def accepts_in_words(accepts: tuple[str, ...] | list[str]) -> str:
    return " or ".join(PLAIN_KINDS.get(kind, kind) for kind in accepts)


def build_field(param: Param, value: Any, team: Team | None = None, notes: dict[str, str] | None = None) -> FieldView:
    view = FieldView(param=param, widget=param.type, value=_display(param, value))
    if isinstance(param, Bool):
        view.widget = "checkbox"
    elif isinstance(param, Int | Float):
        view.widget = "number"
        view.attrs = {"step": _number_step(param), "min": param.min, "max": param.max}
        view.constraints = _bounds(param)
        if isinstance(param, Seed):
            view.attrs["placeholder"] = "random"
    elif isinstance(param, Numbers):
        view.widget = "text"
        kind = "whole numbers" if param.integer else "numbers"
        view.constraints = ", ".join(filter(None, [f"comma-separated {kind}", _bounds(param)]))
        view.attrs = {"inputmode": "decimal", "placeholder": "e.g. 0.25,0.5"}
    elif isinstance(param, Multi):
        view.widget = "multi"
        view.options = [(option, option) for option in param.options]
        view.notes = dict(notes or {})
        view.value = view.value or []
    elif param.type == "choice":
        view.widget = "select"
        notes = notes or {}
        view.options = [
            (option, f"{option} — {notes[option]}" if option in notes else option)
            for option in getattr(param, "options", ())
        ]
    elif isinstance(param, Text):
        view.widget = "textarea" if param.multiline else "text"
        view.attrs = {"maxlength": param.max_length}
    elif isinstance(param, Key):
        view.options = _key_options(param, team)
        view.widget = "select" if view.options else "text"
        if view.options and not view.value:
            # The team's only active key, or its newest (the options come newest first).
            view.value = view.options[0][0]
        if not view.options:
            view.constraints = "your team has no active watermark key yet: create one under Keys"
            view.attrs = {"placeholder": "key:ID"}
    elif isinstance(param, REFERENCE_TYPES):
        view.options = _reference_options(param, team)
        view.widget = "select" if view.options else "text"
        view.constraints = f"takes {accepts_in_words(param.accepts)}" if param.accepts else ""
        if not view.options:
            view.attrs = {"placeholder": "library:ID"}
    elif isinstance(param, File):
        view.widget = "file"
        accept, view.constraints = _file_hint(param)
        view.attrs = {"accept": accept, "multiple": param.multiple}
        view.value = ""
    return view


class SpecForm:
    """A kind's parameters as form fields, bound to a POST or pre-filled from values."""

    def __init__(
        self,
        spec: JobSpec,
        *,
        data: QueryDict | None = None,
        initial: Mapping[str, Any] | None = None,
        with_files: bool = True,
        team: Team | None = None,
    ) -> None:
        """``with_files=False`` leaves out file inputs (a re-run copies the original job's files)."""
        self.spec = spec
        self.data = data
        self.non_field_errors: list[str] = []
        params = spec.params if with_files else spec.value_params
        values: Mapping[str, Any] = initial if initial is not None else {p.name: p.default for p in params}
        self.fields = [build_field(p, values.get(p.name), team, OPTION_NOTES.get((spec.name, p.name))) for p in params]
        if data is not None:
            for view in self.fields:
                view.value = self._posted(view)

    def _posted(self, view: FieldView) -> Any:
        assert self.data is not None
        if view.widget == "checkbox":
            return view.name in self.data
        if view.widget == "multi":
            return self.data.getlist(view.name)
        if view.widget == "file":
            return ""
        return self.data.get(view.name, "")

    def raw_params(self) -> dict[str, Any]:
        """The posted values as the spec's ``clean`` takes them (strings and lists, files excluded)."""
        raw: dict[str, Any] = {}
        for view in self.fields:
            if view.widget == "file":
                continue
            # An unticked checkbox is absent from a POST; it still means "false", not "default".
            raw[view.name] = ("true" if view.value else "false") if view.widget == "checkbox" else view.value
        return raw

    def add_errors(self, errors: list[tuple[str, str]]) -> None:
        by_name = {view.name: view for view in self.fields}
        for name, message in errors:
            if name in by_name:
                by_name[name].errors.append(message)
            else:
                self.non_field_errors.append(message if name == "__all__" else f"{name}: {message}")

    @property
    def has_files(self) -> bool:
        return any(view.widget == "file" for view in self.fields)

    @property
    def error_count(self) -> int:
        return len(self.non_field_errors) + sum(len(view.errors) for view in self.fields)
