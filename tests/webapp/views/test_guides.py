"""The in-app guides (/docs/), the home page's "Try with a sample", and job pages that explain
themselves: a guide for every registered kind (a kind without one fails here), every parameter in
a table generated from the spec, the API and CLI reference from the live OpenAPI document, and
error messages that name the field, say what was wrong and what to do."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from mlcore.jobs.registry import all_kinds, get_kind
from tests.webapp.views.conftest import record_run
from webapp.accounts.models import Team
from webapp.api import api
from webapp.guides import content
from webapp.guides.markdown import render
from webapp.jobs import services
from webapp.jobs.models import Job

pytestmark = pytest.mark.django_db

ClientFor = Callable[[User | None], Client]
FLAGSHIP_PREFIXES = ("compress-", "watermark-", "pointcloud-", "video-")


def test_every_registered_kind_has_a_guide() -> None:
    assert content.kinds_missing_guides() == [], "set guide= on these kinds' JobSpec"


def test_a_kind_registered_without_a_guide_is_caught(monkeypatch: pytest.MonkeyPatch, csrf_client: ClientFor) -> None:
    monkeypatch.setenv("MOELAB_EXTRA_KINDS", "tests.jobkinds.exercise,tests.webapp.views.guideless_kind")
    assert content.kinds_missing_guides() == ["test-guideless"]
    page = csrf_client(None).get("/docs/kinds/test-guideless/").content.decode()
    assert "data-guide-missing" in page and "set <code>guide=</code>" in page


@pytest.mark.parametrize("name", [kind.name for kind in all_kinds()])
def test_the_guide_page_of_each_kind_shows_its_guide_and_every_parameter(name: str, csrf_client: ClientFor) -> None:
    spec = get_kind(name).spec
    response = csrf_client(None).get(f"/docs/kinds/{name}/")
    assert response.status_code == 200
    page = response.content.decode()
    assert spec.title in page
    guide = re.search(r"data-guide-text>(.*?)</div>", page, re.S)
    assert guide and guide.group(1).strip(), "the 'How to read the results' section is empty"
    assert [m for m in re.findall(r'<tr data-param="([^"]+)"', page)] == [p.name for p in spec.params]
    if spec.sample:
        assert f'href="/try/{name}/"' in page


def test_a_guide_page_lists_bounds_and_formats_from_the_spec(csrf_client: ClientFor) -> None:
    page = csrf_client(None).get("/docs/kinds/compress-moe/").content.decode()
    samples = re.search(r'<tr data-param="samples">(.*?)</tr>', page, re.S).group(1)
    assert "1 to 4,096" in samples and "64" in samples
    checkpoint = re.search(r'<tr data-param="checkpoint">(.*?)</tr>', page, re.S).group(1)
    assert "zip, tar" in checkpoint and "20 GiB" in checkpoint
    assert 'href="/docs/bench/compress/"' in page  # what our benchmark measured


def test_the_guides_index_links_every_kind_the_reference_and_the_deployment_guide(csrf_client: ClientFor) -> None:
    page = csrf_client(None).get("/docs/").content.decode()
    for kind in all_kinds():
        assert f'href="/docs/kinds/{kind.name}/"' in page
    assert 'href="/docs/api/"' in page and 'href="/docs/deployment/"' in page and 'href="/docs/bench/compress/"' in page


def test_the_deployment_guide_covers_compose_gpu_workers_and_s3(csrf_client: ClientFor) -> None:
    page = csrf_client(None).get("/docs/deployment/").content.decode()
    assert "<h2>GPU workers</h2>" in page and "MOELAB_S3_BUCKET" in page and "docker compose up" in page
    # A link between repository pages leads to the rendered page, not to a raw .md file.
    assert 'href="/docs/configuration/"' in page


def test_a_benchmark_report_renders_its_tables(csrf_client: ClientFor) -> None:
    page = csrf_client(None).get("/docs/bench/compress/").content.decode()
    assert '<table class="table">' in page and "<th>method</th>" in page


def test_the_api_reference_shows_every_operation_of_the_openapi_document(csrf_client: ClientFor) -> None:
    page = csrf_client(None).get("/docs/api/").content.decode()
    schema = api.get_openapi_schema()
    for path, methods in schema["paths"].items():
        for method in methods:
            assert f'data-operation="{method.upper()} {path}"' in page
    assert "moelab run" in page and "--set" in page  # the CLI reference, from argparse


def test_markdown_cannot_inject_markup() -> None:
    html = str(render('<script>alert(1)</script> [x](javascript:alert(1)) <img src=x onerror="a()">'))
    assert "<script" not in html and 'href="javascript:' not in html and "<img" not in html
    assert "&lt;script&gt;" in html


def test_unknown_guides_are_404(csrf_client: ClientFor) -> None:
    client = csrf_client(None)
    for url in ("/docs/kinds/no-such-kind/", "/docs/no-such-page/", "/docs/bench/nothing/", "/try/no-such-kind/"):
        assert client.get(url).status_code in (404, 302), url
    assert csrf_client(None).get("/docs/..%2Fsettings/").status_code == 404


def test_the_home_page_shows_flagships_and_research_tools_to_a_visitor(csrf_client: ClientFor) -> None:
    response = csrf_client(None).get("/")
    assert response.status_code == 200
    page = response.content.decode()
    registered = {kind.name for kind in all_kinds()}
    for prefix in FLAGSHIP_PREFIXES:
        if any(name.startswith(prefix) for name in registered):
            # The watermark card opens its own page (mark or check), not one kind's sample.
            opens_page = prefix == "watermark-" and 'data-open="portal:watermark" href="/watermark/"' in page
            assert opens_page or any(f'data-try="{n}"' in page for n in registered if n.startswith(prefix)), prefix
    soon = sum(not any(n.startswith(p) for n in registered) for p in FLAGSHIP_PREFIXES)
    assert page.count("data-coming-soon") == soon  # an unregistered flagship is not a broken link
    for name in ("moe-profile", "routing-analysis", "distill"):
        assert f'data-kind="{name}"' in page and f'href="/try/{name}/"' in page
    assert "MoNE: Mixture of Novices and Experts" in page  # the paper, from docs/guides/compress-moe.md


def test_try_with_a_sample_goes_through_login_to_the_prefilled_form(
    csrf_client: ClientFor, owner: User, team: Team
) -> None:
    assert csrf_client(None).get("/try/compress-moe/")["Location"] == "/login/?next=/try/compress-moe/"
    client = csrf_client(owner)
    target = client.get("/try/compress-moe/")["Location"]
    assert target == f"/t/{team.slug}/submit/compress-moe/?sample=1"
    form = client.get(target).content.decode()
    assert "data-sample-banner" in form
    assert re.search(r'id="param-samples"[^>]*value="16"', form)
    assert re.search(r'value="frequency" checked', form)


def test_a_signed_in_person_still_lands_on_their_jobs_and_reaches_the_samples_page(
    csrf_client: ClientFor, owner: User, team: Team
) -> None:
    client = csrf_client(owner)
    assert client.get("/")["Location"] == f"/t/{team.slug}/"
    assert 'data-try="compress-moe"' in client.get("/welcome/").content.decode()


def test_a_finished_job_page_has_a_summary_line_and_says_how_to_read_it(
    csrf_client: ClientFor, owner: User, team: Team
) -> None:
    # A real moe-profile run on its sample, recorded as a worker records it.
    spec = get_kind("moe-profile").spec
    job = services.job_submit(team=team, user=owner, kind=spec.name, raw_params=dict(spec.sample))
    record_run(job)
    page = csrf_client(owner).get(f"/jobs/{job.id}/").content.decode()
    summary = re.search(r'<p class="summary-line" data-summary>.*?<span>(.*?)</span></p>', page, re.S)
    assert summary and re.match(
        r"MoE layer: [\d.]+ ms per forward \+ backward step, [\d.]+× the per-expert loop", summary.group(1)
    )
    assert "data-how-to-read" in page and "speedup_vs_loop" in page


def test_an_unfinished_job_has_no_summary_line(csrf_client: ClientFor, owner: User, team: Team) -> None:
    spec = get_kind("moe-profile").spec
    job = services.job_submit(team=team, user=owner, kind=spec.name, raw_params=dict(spec.sample))
    assert "data-summary" not in csrf_client(owner).get(f"/jobs/{job.id}/").content.decode()


@pytest.mark.parametrize(
    ("kind", "scalars", "expected"),
    [
        (
            "compress-moe",
            {
                "original/ppl_mean": 20.0,
                "original/bytes_effective": 1000,
                "mone@0.25/delta_ppl": 1.0,
                "mone@0.25/bytes_effective": 760,
                "frequency@0.25/delta_ppl": 2.5,
                "frequency@0.25/bytes_effective": 760,
            },
            "Pruned 25% of experts with mone: -24% memory, +5.0% perplexity; beat frequency by 1.50 perplexity points.",
        ),
        (
            "moe-planner",
            {"efficiency_leverage": 3.2, "dense_equivalent_params": 4.2e8, "compute_saving": 0.6875},
            "Efficiency leverage 3.20×: the MoE reaches the loss of a dense model of ≈420M parameters with 69% less "
            "training compute.",
        ),
        (
            "data-mixture",
            {
                "final_w/shakespeare": 0.3,
                "final_w/stdlib-source": 0.7,
                "confirm_bpb_found": 2.1,
                "confirm_bpb_uniform": 2.3,
            },
            "Found mixture: stdlib-source 0.70, shakespeare 0.30; a fresh model scores 2.100 bits per byte on it "
            "against 2.300 on the uniform mixture.",
        ),
    ],
)
def test_each_kind_summarises_its_own_metrics_in_one_line(kind: str, scalars: dict, expected: str) -> None:
    assert get_kind(kind).spec.summary_line(scalars) == expected


def test_a_summary_with_missing_metrics_is_left_out_rather_than_breaking_the_page() -> None:
    for kind in all_kinds():
        assert kind.spec.summary_line({}) == ""


# Errors people can act on: each names the field, says what was wrong and what to do.
@pytest.mark.parametrize(
    ("params", "files", "field", "message"),
    [
        (  # wrong format
            {"model": "zoo:moe-lm-tiny", "methods": "mone"},
            {"calibration_file": SimpleUploadedFile("notes.txt", b"\x89PNG\r\n\x1a\n" + b"\0" * 64)},
            "calibration_file",
            r"expected txt or jsonl or json or csv, got a png file\. Upload a txt or jsonl or json or csv file",
        ),
        (  # too large
            {"model": "zoo:moe-lm-tiny", "methods": "mone", "samples": 4096, "seq_len": 4096},
            {},
            "samples",
            r"samples × sequence length may not exceed 2000000 tokens",
        ),
        (  # missing model
            {"model": "zoo:no-such-model", "methods": "mone"},
            {},
            "model",
            r"no built-in item named &#x27;no-such-model&#x27;; pick one of zoo:moe-lm-tiny",
        ),
        (  # out of range
            {"model": "zoo:moe-lm-tiny", "methods": "mone", "ratios": "1.5"},
            {},
            "ratios",
            r"at most 0\.99",
        ),
    ],
)
def test_the_submit_form_explains_common_mistakes_next_to_the_field(
    csrf_client: ClientFor, owner: User, team: Team, params: dict, files: dict, field: str, message: str
) -> None:
    from tests.webapp.views.helpers import post

    response = post(csrf_client(owner), f"/t/{team.slug}/submit/compress-moe/", {**params, **files})
    assert response.status_code == 400
    page = response.content.decode()
    block = re.search(rf'id="param-{field}-hint">((?:(?!-hint").)*?<ul class="field-errors">.*?)</ul>', page, re.S)
    assert block and re.search(message, block.group(1)), block.group(1) if block else "no error shown"
    assert "The job was not submitted" in page
    assert not Job.objects.exists()  # nothing partial kept


def test_an_oversized_upload_names_the_file_the_limit_and_what_to_do(owner: User, team: Team, monkeypatch) -> None:
    param = get_kind("compress-moe").spec.param("calibration_file")
    upload = SimpleUploadedFile("corpus.txt", b"x")
    upload.size = param.max_bytes + 1
    with pytest.raises(services.SubmitError) as caught:
        services.job_submit(
            team=team,
            user=owner,
            kind="compress-moe",
            raw_params={"model": "zoo:moe-lm-tiny"},
            files={"calibration_file": [upload]},
        )
    field, text = caught.value.errors[0]
    assert field == "calibration_file"
    assert "corpus.txt" in text and f"the limit is {param.max_bytes}" in text and "Upload a smaller file" in text


@pytest.mark.parametrize("kind", sorted(k.spec.name for k in all_kinds() if not k.spec.name.startswith("test-")))
def test_every_kinds_guide_says_what_a_user_can_bring(kind: str) -> None:
    spec = get_kind(kind).spec
    text = f"{spec.guide}\n{content.kind_doc(kind).body}"
    assert re.search(r"what you can bring|your own", text, re.IGNORECASE), (
        f"{kind}: its guide (spec guide= or docs/guides/{kind}.md) must say what a user can bring, in which formats"
    )
