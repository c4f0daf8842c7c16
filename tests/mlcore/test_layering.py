"""mlcore's floor plan (docs/architecture.md): the ground floor imports only itself, method
packages never import the job layer, mlcore never imports the benchmark wing, the web or the
workers, and no two modules import each other. Imports inside functions count: a deferred import is
still a dependency, only a later one. Imports under ``if TYPE_CHECKING:`` do not: they name a type
for annotations and never run."""

from __future__ import annotations

import ast
from itertools import combinations
from pathlib import Path

import mlcore

PACKAGE = Path(mlcore.__file__).parent
#: Modules every layer may import; they import nothing of mlcore but each other.
GROUND_FLOOR = ("mlcore.errors", "mlcore.train", "mlcore.uploads")
#: The layers above the method packages.
UPPER = ("mlcore.jobs",)
#: Never imported by mlcore at all: the benchmark wing (top-level ``bench``), the web and the workers.
OUTSIDE = ("bench", "webapp", "workers", "django", "celery")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str, name: str, *, is_package: bool = False) -> set[str]:
    """Every module the module ``name`` imports, anywhere in its ``source``, relative imports resolved."""
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(source, filename=name)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            # ``from mlcore.x import y`` may import the module mlcore.x.y.
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of ``tree`` except those under ``if TYPE_CHECKING:``."""
    nodes: list[ast.AST] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        nodes.append(node)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and ast.unparse(child.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
                stack.extend(child.orelse)
                continue
            stack.append(child)
    return nodes


def within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}
IMPORTS = {
    name: {
        m
        for m in imports_of(path.read_text(), name, is_package=path.name == "__init__.py")
        if m in MODULES or not m.startswith("mlcore")
    }
    for name, path in MODULES.items()
}


def test_the_import_reader_sees_deferred_and_relative_imports() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from mlcore.hf.adapter import MoEAdapter\n"
        "def f():\n    from mlcore.jobs.spec import JobError\n    from ..train import warmup_cosine\n"
    )
    found = imports_of(source, "mlcore.pointcloud.io.ply")
    assert {"mlcore.jobs.spec", "mlcore.pointcloud.train"} <= found
    assert "mlcore.hf.adapter" not in found


def test_the_ground_floor_imports_nothing_of_mlcore_but_itself() -> None:
    offenders = {
        name: sorted(m for m in IMPORTS[name] if m.startswith("mlcore") and m not in GROUND_FLOOR)
        for name in GROUND_FLOOR
    }
    assert offenders == {name: [] for name in GROUND_FLOOR}


def test_no_method_package_imports_the_job_layer_or_the_benchmarks() -> None:
    offenders = {
        name: sorted(m for m in imports if within(m, UPPER))
        for name, imports in IMPORTS.items()
        if not within(name, UPPER) and any(within(m, UPPER) for m in imports)
    }
    assert offenders == {}


def test_no_mlcore_module_imports_the_web_or_the_workers() -> None:
    offenders = {
        name: sorted(m for m in imports if within(m, OUTSIDE))
        for name, imports in IMPORTS.items()
        if any(within(m, OUTSIDE) for m in imports)
    }
    assert offenders == {}


def test_no_two_modules_import_each_other() -> None:
    pairs = [
        (a, b)
        for a, b in combinations(sorted(MODULES), 2)
        if b in IMPORTS[a] and a in IMPORTS[b] and not (a.startswith(b + ".") or b.startswith(a + "."))
    ]
    assert pairs == []
