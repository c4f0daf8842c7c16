"""Import what jobs need in a worker's parent, before it forks its pool, so that every process
forked from it (a pool child, and on GPU workers each job's own process) starts with torch, the job
machinery and the kinds already loaded instead of importing them for seconds per job.

Only imports: nothing here may initialise CUDA. A CUDA context does not survive a fork, so a
parent that created one would leave every job process unable to use the GPU; :func:`preload`
checks that torch still has none and refuses to start otherwise.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Sequence

log = logging.getLogger(__name__)

#: What "default" stands for in ``WORKER_PRELOAD_MODULES``, besides every registered kind's module.
DEFAULT_MODULES: tuple[str, ...] = ("numpy", "torch", "workers.lifecycle", "workers.forked")


class PreloadError(RuntimeError):
    pass


def modules_to_preload(setting: Sequence[str]) -> list[str]:
    """The module names ``setting`` (``WORKER_PRELOAD_MODULES``) stands for, in order, once each."""
    names: list[str] = []
    for item in setting:
        if item == "default":
            from mlcore.jobs.registry import module_paths

            names += [*DEFAULT_MODULES, *module_paths()]
        else:
            names.append(item)
    return list(dict.fromkeys(names))


def preload(setting: Sequence[str]) -> list[str]:
    """Import the modules ``setting`` names; returns them. Raises :class:`PreloadError` for a
    module that is missing or that initialised CUDA while being imported."""
    names = modules_to_preload(setting)
    if not names:
        return []
    started = time.monotonic()
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise PreloadError(f"MOELAB_WORKER_PRELOAD names {name!r}, which cannot be imported: {exc}") from exc
        if _cuda_initialised():
            raise PreloadError(
                f"importing {name} initialised CUDA in the worker's parent; forked job processes could not "
                "use the GPU. Remove it from MOELAB_WORKER_PRELOAD or make its import lazy."
            )
    log.info("preloaded %d modules in %.1f s", len(names), time.monotonic() - started)
    return names


def _cuda_initialised() -> bool:
    import sys

    torch = sys.modules.get("torch")
    # torch.cuda.is_initialized() reads a flag; it never starts CUDA itself.
    return torch is not None and hasattr(torch, "cuda") and bool(torch.cuda.is_initialized())
