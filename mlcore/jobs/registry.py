"""The registry of job kinds: an explicit list of module paths.

Each module declares ``spec`` (a :class:`~mlcore.jobs.spec.JobSpec`) and
``run(params, inputs, ctx)``. ``MOELAB_EXTRA_KINDS`` (comma-separated module paths) adds more,
which is how tests give a separately started worker a test-only kind. Importing this module and
every spec must not import torch: ``run`` imports what it needs.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from mlcore.jobs.spec import JobSpec

KIND_MODULES: tuple[str, ...] = (
    "mlcore.jobs.compress_moe",
    "mlcore.jobs.moe_profile",
    "mlcore.jobs.routing_analysis",
    "mlcore.jobs.moe_planner",
    "mlcore.jobs.distill",
    "mlcore.jobs.data_mixture",
    "mlcore.jobs.lora_moe_finetune",
    "mlcore.jobs.router_align",
    "mlcore.jobs.graph_ood",
    "mlcore.jobs.watermark_verify",
    "mlcore.jobs.watermark_train",
    "mlcore.jobs.watermark_generate",
    "mlcore.jobs.watermark_embed",
    "mlcore.jobs.watermark_robustness",
    "mlcore.jobs.pointcloud_segment",
    "mlcore.jobs.pointcloud_train",
    "mlcore.jobs.video_generate",
    "mlcore.jobs.video_train",
)


class UnknownKind(LookupError):
    pass


@dataclass(frozen=True)
class Kind:
    spec: JobSpec
    module: ModuleType

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def run(self) -> Callable[[dict[str, Any], dict[str, Path | list[Path]], Any], Any]:
        return self.module.run


def module_paths() -> list[str]:
    extra = [m.strip() for m in os.environ.get("MOELAB_EXTRA_KINDS", "").split(",") if m.strip()]
    return [*KIND_MODULES, *extra]


@cache
def _load(path: str) -> Kind:
    module = importlib.import_module(path)
    spec = getattr(module, "spec", None)
    if not isinstance(spec, JobSpec) or not callable(getattr(module, "run", None)):
        raise TypeError(f"{path} must define `spec: JobSpec` and `run(params, inputs, ctx)`")
    return Kind(spec=spec, module=module)


def all_kinds() -> list[Kind]:
    kinds = [_load(path) for path in module_paths()]
    names = [k.name for k in kinds]
    duplicated = {n for n in names if names.count(n) > 1}
    if duplicated:
        raise TypeError(f"job kinds registered twice: {sorted(duplicated)}")
    return kinds


def get_kind(name: str) -> Kind:
    for kind in all_kinds():
        if kind.name == name:
            return kind
    raise UnknownKind(f"Unknown job kind {name!r}. Known kinds: {', '.join(k.name for k in all_kinds())}.")
