"""Run a job kind: validate, prepare inputs, fix seeds, call ``run``, classify the outcome.

The CLI and the worker both go through here, so a job behaves the same in a terminal and on
the platform. Inputs are checked (spec, sniffing, caps, ``validate``, ``estimate``) before
``run`` starts, so bad input fails fast and leaves nothing behind.
"""

from __future__ import annotations

import os
import random
import re
import secrets
import sys
import sysconfig
import tempfile
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mlcore import sniff, uploads
from mlcore.jobs.context import JobContext
from mlcore.jobs.params import REFERENCE_TYPES, Seed
from mlcore.jobs.references import Resolver
from mlcore.jobs.registry import Kind
from mlcore.jobs.spec import JobCancelled, JobError

Inputs = dict[str, Path | list[Path]]
ARCHIVES = sniff.ARCHIVES


@dataclass
class Outcome:
    status: Literal["succeeded", "failed", "cancelled"]
    #: What users see: a :class:`JobError`'s text as written, or for an internal error a short
    #: sentence with :attr:`reference`. Never a traceback.
    error: str = ""
    #: For staff only (the worker's log and the admin): never on a page, in the API or in ``moelab submit``.
    traceback: str = ""
    result: Any = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: An internal error's reference id, in :attr:`error` and at the top of :attr:`traceback`, so
    #: staff can find the traceback a user quotes.
    reference: str = ""
    #: An internal error's exception as one line (``RuntimeError: ...``): may name server paths, so
    #: only ``moelab run`` on the user's own machine prints it.
    detail: str = ""


INTERNAL_ERROR = "Internal error (reference {reference}): the job failed on our side; the staff have the details."


def internal_error(exc: BaseException, *, during: str = "") -> Outcome:
    """An unexpected exception as a failed :class:`Outcome`: a short sentence and a reference id for
    users, the traceback (headed by the reference) for staff. Call it inside the ``except`` block."""
    reference = secrets.token_hex(4)
    where = f" {during}" if during else ""
    trace = f"Reference {reference}{where}\n{traceback.format_exc()}"
    return Outcome(
        "failed",
        error=INTERNAL_ERROR.format(reference=reference),
        traceback=trace,
        reference=reference,
        detail=f"{type(exc).__name__}: {exc}",
    )


# -- paths in messages ----------------------------------------------------------------------------

_REPOSITORY = Path(__file__).resolve().parents[2]


def server_roots(extra: Iterable[str | Path] = ()) -> list[str]:
    """Folders whose paths mean nothing to a user and say too much about a server: the temporary
    folder (workers' job folders), the checkout, the Python installation and its site-packages, the
    built-in item cache and the home folder, plus ``extra`` (the platform adds media and cache roots)."""
    from mlcore.catalog import cache_root

    candidates: list[str | Path] = [
        # A running job's process may point its temporary folder into the job's scratch; the
        # system's own are server paths all the same.
        tempfile.gettempdir(),
        os.environ.get("TMPDIR", "/tmp"),
        "/tmp",
        "/var/tmp",
        _REPOSITORY,
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        *sysconfig.get_paths().values(),
        cache_root(),
        Path.home(),
        *extra,
    ]
    roots: set[str] = set()
    for candidate in candidates:
        for form in (str(candidate), os.path.realpath(candidate)):
            form = form.rstrip("/")
            if form.startswith("/"):  # never "/" itself: that would be every path
                roots.add(form)
    return sorted(roots, key=len, reverse=True)


def _shorten(match: re.Match[str]) -> str:
    rest = (match.group("rest") or "").rstrip("/")
    return f"…/{rest.rsplit('/', 1)[-1]}" if rest else "…"


def scrub_paths(message: str, *, extra_roots: Iterable[str | Path] = ()) -> str:
    """``message`` with every absolute path under a :func:`server_roots` folder cut to ``…/NAME``
    (its last part, which the user may recognise), or ``…`` for the folder itself.

    A safety net where an error is stored for users; messages should name files by what the user
    uploaded in the first place."""
    roots = server_roots(extra_roots)
    if not roots:
        return message
    pattern = re.compile(
        r"(?<![\w.~/-])(?:" + "|".join(re.escape(root) for root in roots) + r")(?![\w-])"
        r"(?P<rest>/[^\s'\"`<>|,;:()\[\]{}]*)?"
    )
    return pattern.sub(_shorten, message)


def check_files(kind: Kind, files: Mapping[str, list[Path]], workdir: Path) -> Inputs:
    """Validate uploads against the kind's file parameters; unpack archives into ``workdir``.

    The same checks as the team library's (:mod:`mlcore.uploads`): the web runs this at
    submission, before the job is queued, and the worker again on what it downloads, so a bad upload
    gets the same sentence either way. Messages start with the field's title and the upload's name.
    """
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
            label = f"{param.title} ({path.name})"
            ready.append(_check_upload(param.formats, path, workdir / "inputs" / param.name / str(index), label))
        inputs[param.name] = ready if param.multiple else ready[0]
    return inputs


def _check_upload(formats: tuple[str, ...], upload: Path, unpack_to: Path, label: str) -> Path:
    """One upload: its format from its content, then the deep check for that format; an archive is
    unpacked (safely, see :func:`sniff.unpack`) and its whole tree checked. Returns what ``run`` gets."""
    try:
        # A file named as safetensors gets the header check first: a corrupt header would otherwise
        # only be "a file of unknown format", which does not say what is wrong with it.
        named = "safetensors" in formats and upload.suffix.lower() == uploads.SAFETENSORS_SUFFIX
        if named:
            uploads.safetensors_header(upload)
        found = sniff.require_format(upload, formats, label=label)
        if found == "safetensors" and not named:
            uploads.safetensors_header(upload)
        if found not in ARCHIVES:
            return upload
        unpacked = sniff.unpack(upload, unpack_to)
        uploads.check_tree(unpacked)
        return unpacked
    except JobError as exc:
        message = str(exc)
        if message.startswith(label):
            raise
        # The field and the upload first (the form puts the message next to that field), then the
        # checks' own sentence, which names the file inside the archive.
        raise JobError(f"{label}: {message.removeprefix(f'{upload.name}: ')}") from None


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
    # What an upload replaced is not fetched, built or recorded; contradictions are refused here.
    params = kind.spec.apply_uploads(params, inputs)
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
        # A refusal meant for the user, as written: no traceback, it is not a fault of ours.
        return Outcome("failed", error=str(exc))
    except MemoryError:
        return Outcome("failed", error="The job ran out of memory. Reduce its size.", traceback=traceback.format_exc())
    except Exception as exc:
        if type(exc).__name__ == "OutOfMemoryError":
            message = "The GPU ran out of memory. Reduce the batch size or model size."
            return Outcome("failed", error=message, traceback=traceback.format_exc())
        return internal_error(exc)
    finally:
        ctx.close()
    if ctx.cancelled():
        return Outcome("cancelled", error="Cancelled.", result=result)
    return Outcome("succeeded", result=result)
