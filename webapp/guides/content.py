"""What the guide pages show, read from the repository: each job kind's spec, its
``docs/guides/NAME.md`` (optional front matter + Markdown), other ``docs/*.md`` pages and the
benchmark reports under ``bench/results/``. Nothing here imports torch."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from mlcore.jobs.params import File, Param, Seed
from mlcore.jobs.registry import Kind, all_kinds
from mlcore.jobs.spec import JobSpec
from webapp.jobs.forms import accepts_in_words

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
KIND_DOCS = DOCS / "guides"
BENCH_RESULTS = ROOT / "bench" / "results"
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")


@dataclass(frozen=True)
class KindDoc:
    """A kind's hand-written Markdown: front matter (``paper``, ``promise``, ``bench``) and body."""

    meta: dict[str, str] = field(default_factory=dict)
    body: str = ""


def _unquote(value: str) -> str:
    """A YAML-style quoted value without its quotes: ``"a \\"b\\""`` reads ``a "b"``, ``'it''s'`` reads
    ``it's`` (a value quoted because it holds a colon must not show its escapes on the page)."""
    if len(value) >= 2 and value[0] == value[-1] == '"':
        try:
            return str(json.loads(value))
        except ValueError:
            return value[1:-1]
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1].replace("''", "'")
    return value


def _front_matter(text: str) -> KindDoc:
    """``---\\nkey: value\\n---`` at the top of a file; the rest is the body."""
    if not text.startswith("---\n"):
        return KindDoc(body=text)
    head, _, body = text[4:].partition("\n---\n")
    meta = {}
    for line in head.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            meta[key.strip()] = _unquote(value.strip())
    return KindDoc(meta=meta, body=body.lstrip("\n"))


def kind_doc(name: str) -> KindDoc:
    path = KIND_DOCS / f"{name}.md"
    if not _NAME.match(name) or not path.is_file():
        return KindDoc()
    return _front_matter(path.read_text(encoding="utf-8"))


def kinds_missing_guides() -> list[str]:
    """Registered kinds whose result pages would not explain themselves (the guide test fails on any)."""
    return [kind.name for kind in all_kinds() if not kind.spec.guide.strip()]


def _constraints(param: Param) -> str:
    """Bounds, options, accepted references and file formats, in words."""
    info = param.describe()
    parts = []
    low, high = _number(info.get("min")), _number(info.get("max"))
    if low and high:
        parts.append(f"{low} to {high}")
    elif low:
        parts.append(f"at least {low}")
    elif high:
        parts.append(f"at most {high}")
    if info.get("options"):
        parts.append("one of " if param.type == "choice" else "any of ")
        parts[-1] += ", ".join(f"`{o}`" for o in info["options"])
    if getattr(param, "accepts", None):
        parts.append("takes " + accepts_in_words(param.accepts))  # type: ignore[attr-defined]
    if isinstance(param, File):
        parts.append(f"formats {', '.join(param.formats)}; up to {_bytes(param.max_bytes)}")
        if param.multiple:
            parts.append("several files")
    if getattr(param, "max_length", None):
        parts.append(f"up to {param.max_length} characters")  # type: ignore[attr-defined]
    return "; ".join(parts)


def _number(value: float | None) -> str:
    """``2147483647`` as ``2,147,483,647`` and ``0.99`` as ``0.99``; "" for no bound."""
    if value is None:
        return ""
    return f"{value:,}" if float(value).is_integer() and abs(value) >= 1000 else f"{value:g}"


def _bytes(size: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size} bytes"


def _default(param: Param) -> str:
    if isinstance(param, Seed) and param.default is None:
        return "random (recorded)"
    if param.default is None or param.default == "":
        return "—"
    if isinstance(param.default, list | tuple):
        return ",".join(str(v) for v in param.default)
    return str(param.default).lower() if isinstance(param.default, bool) else str(param.default)


def param_rows(spec: JobSpec) -> list[dict[str, Any]]:
    return [
        {
            "name": p.name,
            "label": p.title,
            "type": p.type,
            "default": _default(p),
            "required": p.required,
            "constraints": _constraints(p),
            "help": p.help,
        }
        for p in spec.params
    ]


def sample_rows(spec: JobSpec) -> list[tuple[str, str]]:
    return [(name, ",".join(map(str, v)) if isinstance(v, list | tuple) else str(v)) for name, v in spec.sample.items()]


def bench_names() -> list[str]:
    return sorted(p.stem for p in BENCH_RESULTS.glob("*.md") if _NAME.match(p.stem))


def bench_report(name: str) -> str | None:
    path = BENCH_RESULTS / f"{name}.md"
    return path.read_text(encoding="utf-8") if _NAME.match(name) and path.is_file() else None


def doc_pages() -> list[tuple[str, str]]:
    """``docs/*.md`` as (slug, title): the first heading, else the file name."""
    pages = []
    for path in sorted(DOCS.glob("*.md")):
        if not _NAME.match(path.stem):
            continue
        first = next((ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.startswith("# ")), "")
        pages.append((path.stem, first[2:].strip() or path.stem.replace("-", " ").capitalize()))
    return pages


def doc_page(slug: str) -> str | None:
    path = DOCS / f"{slug}.md"
    return path.read_text(encoding="utf-8") if _NAME.match(slug) and path.is_file() else None


def kinds() -> list[Kind]:
    return all_kinds()


@cache
def cli_help() -> list[tuple[str, str]]:
    """``moelab --help`` and each subcommand's help, as argparse prints them."""
    import argparse

    from mlcore.jobs.cli import build_parser

    parser = build_parser()
    pages = [("moelab", parser.format_help())]
    for action in parser._actions:  # argparse keeps subcommands here; there is no public accessor
        if isinstance(action, argparse._SubParsersAction):
            pages += [(f"moelab {name}", sub.format_help()) for name, sub in action.choices.items()]
    return pages
