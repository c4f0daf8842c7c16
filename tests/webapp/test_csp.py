"""Every HTML page carries the Content-Security-Policy, and no template needs what it forbids: an
inline script, an inline event handler or a style attribute (``webapp/security.py``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client

from tests.webapp.views.conftest import make_job  # noqa: F401  (fixture)
from webapp.jobs.models import Job

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = sorted((ROOT / "webapp").glob("**/templates/**/*.html"))

INLINE_SCRIPT = re.compile(r"<script\b(?![^>]*\bsrc=)(?![^>]*type=\"application/(?:json|ld\+json)\")[^>]*>", re.I)
EVENT_HANDLER = re.compile(r"<[a-z][^>]*\son[a-z]+\s*=", re.I)
STYLE_ATTRIBUTE = re.compile(r"<[a-z][^>]*\sstyle\s*=", re.I)
#: htmx evaluates trigger filters ("every 2s [cond]"), hx-on handlers and "js:" values with eval,
#: which the policy forbids (htmx.config.allowEval is off): such an attribute silently stops working.
HTMX_EVAL = re.compile(r"\shx-trigger=\"[^\"]*\[|\shx-on[:-]|\shx-(?:vals|headers)=\"\s*(?:js|javascript):", re.I)


def directives(policy: str) -> dict[str, list[str]]:
    parts = [part.split() for part in policy.split(";") if part.strip()]
    return {part[0]: part[1:] for part in parts}


def test_the_policy_allows_only_our_own_scripts_and_styles_and_never_eval() -> None:
    policy = directives(settings.CONTENT_SECURITY_POLICY)
    assert policy["default-src"] == ["'self'"]
    assert policy["script-src"] == ["'self'"] and policy["style-src"] == ["'self'"]
    assert policy["object-src"] == ["'none'"] and policy["frame-ancestors"] == ["'none'"]
    assert "unsafe" not in settings.CONTENT_SECURITY_POLICY


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_template_holds_an_inline_script_an_event_handler_a_style_attribute_or_an_htmx_eval(template: Path) -> None:
    text = template.read_text()
    assert not INLINE_SCRIPT.findall(text), "move the script into frontend/src/js"
    assert not EVENT_HANDLER.findall(text), "use a data- attribute and a listener in frontend/src/js"
    assert not STYLE_ATTRIBUTE.findall(text), "use a class in moelab.css (or set the style from a script)"
    assert not HTMX_EVAL.findall(text), "htmx may not eval: use a listener in frontend/src/js instead of a filter"


def test_the_template_scan_would_catch_each_forbidden_form() -> None:
    assert INLINE_SCRIPT.findall('<script>alert(1)</script><script type="module">x</script>')
    assert not INLINE_SCRIPT.findall('<script src="/static/a.js"></script><script type="application/json">{}</script>')
    assert EVENT_HANDLER.findall('<form onsubmit="return confirm(1)">')
    assert not EVENT_HANDLER.findall('<form data-confirm="Delete?">')
    assert STYLE_ATTRIBUTE.findall('<div class="x" style="width: 0">')
    assert HTMX_EVAL.findall('<div hx-get="/x" hx-trigger="every 2s [!document.hidden]">')
    assert HTMX_EVAL.findall('<button hx-on:click="alert(1)">')
    assert HTMX_EVAL.findall('<div hx-vals="js:{a: 1}">')
    assert not HTMX_EVAL.findall('<div hx-get="/x" hx-trigger="every 2s, visibilitychange from:document">')


@pytest.mark.django_db
def test_every_html_page_carries_the_policy(team, owner, make_job) -> None:  # noqa: F811
    job = make_job(Job.Status.SUCCEEDED, steps=3)
    assert job.charts  # the job page draws a chart
    anonymous, signed_in = Client(), Client()
    signed_in.force_login(owner)
    pages = {
        anonymous: ["/", "/login/", "/signup/", "/docs/", "/docs/api/", "/verify/", "/no-such-page/", "/api/v1/docs"],
        signed_in: [
            "/",
            "/welcome/",
            f"/t/{team.slug}/",
            f"/t/{team.slug}/jobs/",
            f"/t/{team.slug}/submit/",
            f"/t/{team.slug}/submit/test-exercise/",
            f"/jobs/{job.pk}/",
            f"/jobs/{job.pk}/live/",
            f"/jobs/{job.pk}/results/",
            f"/t/{team.slug}/library/",
            f"/t/{team.slug}/library/add/",
            f"/t/{team.slug}/team/",
            f"/t/{team.slug}/keys/",
            "/account/tokens/",
            "/jobs/00000000-0000-4000-8000-000000000000/",  # a 404 page
        ],
    }
    for client, paths in pages.items():
        for path in paths:
            response = client.get(path)
            assert response["Content-Type"].startswith("text/html"), path
            assert response["Content-Security-Policy"] == settings.CONTENT_SECURITY_POLICY, path


@pytest.mark.django_db
def test_a_forbidden_page_carries_the_policy_too(team, owner) -> None:
    from django.contrib.auth.models import User

    from webapp.accounts.models import Membership, Role

    viewer = User.objects.create_user("vee", password="x")
    Membership.objects.create(team=team, user=viewer, role=Role.VIEWER)
    client = Client()
    client.force_login(viewer)
    response = client.get(f"/t/{team.slug}/submit/")
    assert response.status_code == 403
    assert response["Content-Security-Policy"] == settings.CONTENT_SECURITY_POLICY


@pytest.mark.django_db
def test_json_and_artifacts_keep_their_own_headers(team, owner, make_job) -> None:  # noqa: F811
    job = make_job(Job.Status.SUCCEEDED, steps=2)
    client = Client()
    client.force_login(owner)
    assert "Content-Security-Policy" not in client.get("/api/v1/openapi.json")
    artifact = client.get(f"/jobs/{job.pk}/artifacts/summary.json")
    # A file of the user's is a sandbox, never a page of ours: its own stricter policy stays.
    assert artifact["Content-Security-Policy"].startswith("sandbox; default-src 'none'")
