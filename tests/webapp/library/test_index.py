"""The Library page lists a team's items with what identifies them (kind, size, format, who added
them, when, the job that made them and a one-line card), then the zoo's built-ins, read-only."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User

from webapp.jobs.models import Job
from webapp.library.models import LibraryItem

pytestmark = pytest.mark.django_db


def row(page: str, marker: str) -> str:
    return page.split(marker, 1)[1].split("</tr>", 1)[0]


def test_it_lists_the_teams_items_with_their_card_and_lineage(
    owner: User, member: User, corpus: LibraryItem, make_job: Callable[..., Job], csrf_client
) -> None:
    maker = make_job(Job.Status.SUCCEEDED)
    LibraryItem.objects.filter(pk=corpus.pk).update(produced_by=maker)
    page = csrf_client(member).get("/t/routing-lab/library/?tab=datasets").content.decode()
    cells = row(page, f'data-item="{corpus.pk}"')
    assert f'href="/library/{corpus.pk}/">corpus<' in cells and ">text<" in cells and ">txt<" in cells
    assert "3 records" in cells and f'href="/jobs/{maker.pk}/"' in cells
    assert f"<td>{owner.get_username()}</td>" in cells


def test_the_zoo_builtins_appear_read_only_in_every_teams_library(outsider: User, other_team, csrf_client) -> None:
    page = csrf_client(outsider).get(f"/t/{other_team.slug}/library/").content.decode()
    tiny = row(page, 'data-builtin="moe-lm-tiny"')
    assert "zoo:moe-lm-tiny" in tiny and "qwen3_moe · 16 experts · top-2" in tiny
    assert "built-in" in tiny and "<form" not in tiny and "/download" not in tiny
    assert 'data-builtin="lora-base-tiny"' in page  # every model kind a job accepts is a library kind
    datasets = csrf_client(outsider).get(f"/t/{other_team.slug}/library/?tab=datasets").content.decode()
    assert 'data-builtin="shakespeare"' in datasets and 'data-builtin="moe-lm-tiny"' not in datasets
