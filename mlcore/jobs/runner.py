"""Run a job kind: validate, prepare inputs, fix seeds, call ``run``, classify the outcome.

The CLI and the worker both go through here, so a job behaves the same in a terminal and on
the platform. Inputs are checked (spec, sniffing, caps, ``validate``, ``estimate``) before
``run`` starts, so bad input fails fast and leaves nothing behind.
"""

from __future__ import annotations

import os
import random
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mlcore.jobs import sniff
from mlcore.jobs.context import JobContext
from mlcore.jobs.params import REFERENCE_TYPES, Seed
from mlcore.jobs.references import Resolver
from mlcore.jobs.registry import Kind
from mlcore.jobs.spec import JobCancelled, JobError

Inputs = dict[str, Path | list[Path]]
ARCHIVES = ("zip", "tar")


@dataclass
class Outcome:
    status: Literal["succeeded", "failed", "cancelled"]
    error: str = ""
    traceback: str = ""
    result: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


def check_files(kind: Kind, files: Mapping[str, list[Path]], workdir: Path) -> Inputs:
    """Validate uploads against the kind's file parameters; unpack archives into ``workdir``."""
    spec = kind.spec
    unknown = set(files) - {p.name for p in spec.file_params}
    if unknown:
        raise JobError(f"Unexpected file input(s): {', '.join(sorted(unknown))}.")
    inputs: Inputs = {}
    for param in spec.file_params:
        paths = list(files.get(param.name, []))
        if not paths:
            if param.required:
                raise JobError(f"{param.title}: a file is required.")
            continue
        if not param.multiple and len(paths) > 1:
            raise JobError(f"{param.title}: only one file is accepted.")
        if len(paths) > param.max_files:
            raise JobError(f"{param.title}: at most {param.max_files} files.")
        ready: list[Path] = []
        for index, path in enumerate(paths):
            size = path.stat().st_size
            if size > param.max_bytes:
                raise JobError(
                    f"{param.title}: {path.name} is {size} bytes; the limit is {param.max_bytes}. Upload a smaller "
                    "file, or ask an admin to register a large input in the team library."
                )
            if size == 0:
                raise JobError(f"{param.title}: {path.name} is empty. Upload it again; it may have been cut off.")
            found = sniff.require_format(path, param.formats, label=f"{param.title} ({path.name})")
            if found in ARCHIVES:
                path = sniff.unpack(path, workdir / "inputs" / param.name / str(index))
            ready.append(path)
        inputs[param.name] = ready if param.multiple else ready[0]
    return inputs


def resolve_references(kind: Kind, params: Mapping[str, Any], resolver: Resolver) -> Inputs:
    inputs: Inputs = {}
    for param in kind.spec.value_params:
        if isinstance(param, REFERENCE_TYPES) and params.get(param.name) is not None:
            inputs[param.name] = resolver.resolve(param, params[param.name])
    return inputs


def check_estimate(kind: Kind, params: dict[str, Any], *, memory_limit: int | None) -> None:
    if kind.spec.estimate is None or memory_limit is None:
        return
    estimate = kind.spec.estimate(params)
    if estimate.memory_bytes > memory_limit:
        need, have = estimate.memory_bytes / 2**30, memory_limit / 2**30
        raise JobError(f"This job needs about {need:.1f} GiB; workers have {have:.1f} GiB. Reduce its size.")


def prepare(
    kind: Kind,
    raw_params: Mapping[str, Any],
    files: Mapping[str, list[Path]],
    *,
    resolver: Resolver,
    workdir: Path,
    memory_limit: int | None = None,
) -> tuple[dict[str, Any], Inputs]:
    """Everything that can refuse a job before it runs; returns cleaned params and inputs."""
    params = kind.spec.clean(raw_params)
    check_estimate(kind, params, memory_limit=memory_limit)
    inputs = check_files(kind, files, workdir)
    inputs.update(resolve_references(kind, params, resolver))
    return params, inputs


def seed_of(kind: Kind, params: Mapping[str, Any]) -> int | None:
    for param in kind.spec.value_params:
        if isinstance(param, Seed):
            return params[param.name]
    return None


def seed_everything(seed: int) -> None:
    random.seed(seed)
    os.environ.setdefault("PYTHONHASHSEED", str(seed))
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:
        pass
    import sys

    # Seed torch only if the kind (or the worker) already imported it: importing torch just to
    # seed it would cost every light job a second.
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(seed)


def execute(
    kind: Kind,
    params: dict[str, Any],
    inputs: Inputs,
    ctx: JobContext,
    *,
    passthrough: tuple[type[BaseException], ...] = (),
) -> Outcome:
    """Call ``run`` and turn whatever happens into an :class:`Outcome`.

    Only exceptions in ``passthrough`` escape (the worker passes Celery's soft time limit, which
    it reports as a timeout rather than as an internal error).
    """
    seed = seed_of(kind, params)
    if seed is not None:
        seed_everything(seed)
    try:
        result = kind.run(params, inputs, ctx)
    except passthrough:
        raise
    except JobCancelled:
        return Outcome("cancelled", error="Cancelled.")
    except JobError as exc:
        return Outcome("failed", error=str(exc), traceback=traceback.format_exc())
    except MemoryError:
        return Outcome("failed", error="The job ran out of memory. Reduce its size.", traceback=traceback.format_exc())
    except Exception as exc:  # everything else is an internal error, shown with its traceback
        message = f"Internal error: {type(exc).__name__}: {exc}"
        if type(exc).__name__ == "OutOfMemoryError":
            message = "The GPU ran out of memory. Reduce the batch size or model size."
        return Outcome("failed", error=message, traceback=traceback.format_exc())
    finally:
        ctx.close()
    if ctx.cancelled():
        return Outcome("cancelled", error="Cancelled.", result=result)
    return Outcome("succeeded", result=result)
