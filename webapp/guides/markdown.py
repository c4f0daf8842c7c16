"""Markdown → HTML for the guides, safe to show: raw HTML in the source is escaped, not passed on,
and markdown-it's link validation refuses ``javascript:``/``vbscript:``/``file:`` and non-image
``data:`` URLs. So a guide (or a benchmark report a job kind writes) cannot inject markup."""

from __future__ import annotations

import re
from functools import cache

from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

# Links between repository Markdown files (``[library](library.md)``) point at their /docs/ pages.
_MD_LINK = re.compile(r'href="(?![a-z]+:|/|#)([\w./-]+?)\.md(#[\w-]*)?"')


@cache
def _parser() -> MarkdownIt:
    # "commonmark" with html=False escapes raw HTML; tables and strikethrough come from GFM.
    return MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable(
        ["table", "strikethrough"]
    )


def _docs_link(match: re.Match[str]) -> str:
    target = match.group(1).removeprefix("./").removeprefix("docs/")
    return f'href="/docs/{target}/{match.group(2) or ""}"'


def render(text: str) -> SafeString:
    html = _parser().render(text)
    # Wide tables scroll inside their own box instead of widening the page.
    html = html.replace("<table>", '<div class="table-scroll" tabindex="0"><table class="table">').replace(
        "</table>", "</table></div>"
    )
    return mark_safe(_MD_LINK.sub(_docs_link, html))  # escaped by markdown-it above (html=False)


def render_inline(text: str) -> SafeString:
    """One line of Markdown (code spans, emphasis, links) without a wrapping paragraph."""
    return mark_safe(_parser().renderInline(text))  # escaped by markdown-it (html=False)
