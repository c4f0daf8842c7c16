"""An item whose validation message was lost (a worker down, a broker restarted) does not stay
"Validating" for good: the periodic reaper asks the workers again."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.webapp.library.conftest import upload
from webapp.library.ingest import ingest_item
from webapp.library.models import LibraryItem
from workers.reaper import requeue_stale_ingests

pytestmark = pytest.mark.django_db


def test_the_reaper_asks_again_for_an_item_pending_too_long_and_it_then_validates(
    team, owner, django_capture_on_commit_callbacks
) -> None:
    lost = upload(team, owner, b"experts specialise\n", name="lost", kind="text", filename="a.txt")
    recent = upload(team, owner, b"routers route\n", name="recent", kind="text", filename="b.txt")
    hour_ago = timezone.now() - timedelta(hours=1)
    LibraryItem.objects.filter(pk=lost.pk).update(ingest_sent_at=hour_ago)
    LibraryItem.objects.filter(pk=recent.pk).update(ingest_sent_at=timezone.now())

    with django_capture_on_commit_callbacks(execute=True) as sent:
        assert requeue_stale_ingests(retry_seconds=600) == [lost.pk]
    assert len(sent) == 1
    lost.refresh_from_db()
    assert lost.ingest_sent_at > hour_ago

    assert ingest_item(lost.pk) == LibraryItem.Status.READY
    assert requeue_stale_ingests(retry_seconds=600) == []


def test_an_item_whose_message_was_never_sent_counts_as_lost(team, owner) -> None:
    item = upload(team, owner, b"gates\n", name="unsent", kind="text", filename="c.txt")
    LibraryItem.objects.filter(pk=item.pk).update(ingest_sent_at=None, created_at=timezone.now() - timedelta(hours=1))
    assert requeue_stale_ingests(retry_seconds=600) == [item.pk]
