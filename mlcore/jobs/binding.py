"""Fill a method's config dataclass from a job's cleaned parameters.

A kind's spec declares every parameter with its default, and ``JobSpec.clean`` fills those
defaults in, so the spec is the one set of defaults a job runs with. :func:`bind` carries the
cleaned values into the method's config by name, so a kind never copies ``x=params["x"]`` by hand
and a default restated in the config cannot silently win over the spec's.

Every parameter must be accounted for: it fills the field of the same name, the field named in
``rename``, or is listed in ``skip`` (used by the kind itself or by another config). A parameter
that does neither raises :class:`BindingError`, so a parameter added to the spec, or a field renamed
in the config, fails the kind's tests instead of being dropped on the floor. Config fields that no
parameter fills keep the config's own default: those are the method's knobs a job does not expose.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

C = TypeVar("C")


class BindingError(TypeError):
    """A kind's parameters and its config do not line up: a mistake in the kind, not in the job's input."""


def bind(
    config_cls: type[C],
    params: Mapping[str, Any],
    *,
    rename: Mapping[str, str] | None = None,
    convert: Mapping[str, Callable[[Any], Any]] | None = None,
    skip: Collection[str] = (),
    **fixed: Any,
) -> C:
    """``config_cls`` with a field for every parameter in ``params`` not in ``skip``.

    ``rename`` maps a parameter's name to the field it fills when the two differ; ``convert``
    shapes a parameter's value on the way (keyed by the parameter's name, e.g. a Multi's list to a
    tuple); ``fixed`` gives fields that no parameter fills directly (values the kind derives).
    """
    if not (isinstance(config_cls, type) and dataclasses.is_dataclass(config_cls)):
        raise BindingError(f"bind fills dataclasses; {config_cls!r} is not one")
    rename = dict(rename or {})
    convert = dict(convert or {})
    name = config_cls.__name__
    fields = {f.name for f in dataclasses.fields(config_cls) if f.init}
    problems: list[str] = []
    # Options that name no parameter are stale: a renamed or removed parameter left its rule behind.
    for option, names in (("rename", rename), ("convert", convert), ("skip", skip)):
        problems += [f"{option} names {p!r}, which is not a parameter" for p in names if p not in params]
    problems += [f"{p!r} is both skipped and renamed or converted" for p in skip if p in rename or p in convert]
    problems += [f"fixed value {f!r} is not a field of {name}" for f in fixed if f not in fields]
    values: dict[str, Any] = {}
    source: dict[str, str] = {}
    for param, value in params.items():
        if param in skip:
            continue
        field = rename.get(param, param)
        if field not in fields:
            problems.append(f"parameter {param!r} fills no field of {name}; rename it to a field or skip it")
        elif field in fixed:
            problems.append(f"field {field!r} is given both by parameter {param!r} and as a fixed value")
        elif field in source:
            problems.append(f"field {field!r} is filled by both {source[field]!r} and {param!r}")
        else:
            source[field] = param
            values[field] = convert[param](value) if param in convert else value
    if problems:
        raise BindingError(f"binding {name}: " + "; ".join(problems))
    return config_cls(**values, **fixed)
