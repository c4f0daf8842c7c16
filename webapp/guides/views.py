"""``/docs/``: public pages rendered from the repository (see ``content``); thin views."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from mlcore.jobs.registry import UnknownKind, get_kind
from webapp.guides import content, openapi
from webapp.guides.markdown import render as markdown


def index(request: HttpRequest) -> HttpResponse:
    kinds = [(k.spec, content.kind_doc(k.name).meta) for k in content.kinds()]
    context = {
        "kinds": kinds,
        "pages": content.doc_pages(),
        "benches": content.bench_names(),
        "nav": "docs",
    }
    return render(request, "guides/index.html", context)


def kind(request: HttpRequest, name: str) -> HttpResponse:
    try:
        spec = get_kind(name).spec
    except UnknownKind:
        raise Http404(f"No job kind is called {name!r}.") from None
    doc = content.kind_doc(name)
    bench = doc.meta.get("bench", "")
    context = {
        "spec": spec,
        "meta": doc.meta,
        "guide": markdown(spec.guide) if spec.guide.strip() else "",
        "body": markdown(doc.body) if doc.body else "",
        "params": content.param_rows(spec),
        "sample": content.sample_rows(spec),
        "bench": bench if content.bench_report(bench) is not None else "",
        "nav": "docs",
    }
    return render(request, "guides/kind.html", context)


def page(request: HttpRequest, slug: str) -> HttpResponse:
    text = content.doc_page(slug)
    if text is None:
        raise Http404(f"No guide is called {slug!r}.")
    return render(request, "guides/page.html", {"body": markdown(text), "slug": slug, "nav": "docs"})


def bench(request: HttpRequest, name: str) -> HttpResponse:
    text = content.bench_report(name)
    if text is None:
        raise Http404(f"No benchmark report is called {name!r}.")
    context = {"body": markdown(text), "slug": name, "bench_name": name, "nav": "docs"}
    return render(request, "guides/page.html", context)


def api_reference(request: HttpRequest) -> HttpResponse:
    from webapp.api import api

    schema = api.get_openapi_schema()
    context = {
        "info": schema.get("info", {}),
        "description": markdown(schema.get("info", {}).get("description", "")),
        "operations": openapi.operations(schema),
        "schemas": openapi.schemas(schema),
        "cli": content.cli_help(),
        "nav": "docs",
    }
    return render(request, "guides/api.html", context)
