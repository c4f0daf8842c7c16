from __future__ import annotations

import pytest
import redis
from django.conf import settings


@pytest.fixture
def broker() -> redis.Redis:
    """The test broker's Redis, emptied, to look at the messages a submission sends."""
    if not settings.CELERY_BROKER_URL.startswith("redis://"):
        pytest.skip("needs CELERY_BROKER_URL=redis://... (scripts/test.sh sets it)")
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.flushdb()
    yield client
    client.flushdb()
