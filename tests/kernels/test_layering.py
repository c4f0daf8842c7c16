"""kernels/ sits below mlcore: it imports nothing from mlcore, the benchmark wing (bench/), webapp or
workers (docs/architecture.md)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import kernels

FORBIDDEN = ("mlcore", "bench", "webapp", "workers", "django", "celery")


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_no_kernel_module_imports_from_the_layers_above() -> None:
    package = Path(kernels.__file__).parent
    offenders = {
        str(path.relative_to(package)): sorted(imported_roots(path) & set(FORBIDDEN))
        for path in package.rglob("*.py")
        if imported_roots(path) & set(FORBIDDEN)
    }
    assert offenders == {}


def test_importing_kernels_loads_nothing_from_the_layers_above() -> None:
    code = (
        "import sys, kernels, kernels.dispatch, kernels.fused_moe, kernels.group_attention, kernels.timing\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r}))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert result.stdout.strip() == "[]"
