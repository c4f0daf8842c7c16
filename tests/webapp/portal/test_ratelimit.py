"""The per-IP token bucket, on the database (the embedded default has no Redis) and on Redis, and
the portal's clear refusal when an address asks too often."""

from __future__ import annotations

import pytest
import redis
from django.conf import settings
from django.test import Client

from webapp.portal.models import RateBucket
from webapp.portal.ratelimit import DatabaseBucket, RedisBucket, client_ip

pytestmark = pytest.mark.django_db


@pytest.fixture
def redis_bucket() -> RedisBucket:
    if not settings.REDIS_URL:
        pytest.skip("the Redis limiter needs REDIS_URL (scripts/test.sh sets it)")
    redis.Redis.from_url(settings.REDIS_URL).delete("moelab:rate:t:1.2.3.4", "moelab:rate:t:5.6.7.8")
    return RedisBucket(settings.REDIS_URL)


@pytest.fixture(params=["database", "redis"])
def bucket(request: pytest.FixtureRequest) -> DatabaseBucket | RedisBucket:
    return DatabaseBucket() if request.param == "database" else request.getfixturevalue("redis_bucket")


def test_it_allows_a_burst_of_capacity_then_refuses_with_the_wait(bucket: DatabaseBucket | RedisBucket) -> None:
    decisions = [bucket.take("t:1.2.3.4", capacity=3, per_seconds=60, now=1000.0) for _ in range(4)]
    assert [d.allowed for d in decisions] == [True, True, True, False]
    assert decisions[-1].retry_after == pytest.approx(20.0)  # one token every 60/3 s


def test_tokens_come_back_with_time(bucket: DatabaseBucket | RedisBucket) -> None:
    for _ in range(3):
        bucket.take("t:1.2.3.4", capacity=3, per_seconds=60, now=1000.0)
    assert not bucket.take("t:1.2.3.4", capacity=3, per_seconds=60, now=1010.0).allowed
    assert bucket.take("t:1.2.3.4", capacity=3, per_seconds=60, now=1021.0).allowed
    assert not bucket.take("t:1.2.3.4", capacity=3, per_seconds=60, now=1021.0).allowed


def test_each_address_has_its_own_bucket(bucket: DatabaseBucket | RedisBucket) -> None:
    assert bucket.take("t:1.2.3.4", capacity=1, per_seconds=60, now=0.0).allowed
    assert not bucket.take("t:1.2.3.4", capacity=1, per_seconds=60, now=0.0).allowed
    assert bucket.take("t:5.6.7.8", capacity=1, per_seconds=60, now=0.0).allowed


def test_the_database_bucket_keeps_one_row_per_address() -> None:
    for _ in range(5):
        DatabaseBucket().take("t:9.9.9.9", capacity=10, per_seconds=60, now=5.0)
    assert RateBucket.objects.get(key="t:9.9.9.9").tokens == pytest.approx(5.0)


@pytest.mark.parametrize("backend", ["database", "redis"])
def test_the_portal_refuses_the_third_check_in_a_minute_with_a_clear_message(settings, backend: str) -> None:
    if backend == "redis" and not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL")
    if backend == "redis":
        redis.Redis.from_url(settings.REDIS_URL).delete("moelab:rate:portal:10.0.0.7")
    settings.PORTAL_RATE_BACKEND = backend
    settings.PORTAL_RATE_PER_MINUTE = 2
    client = Client(REMOTE_ADDR="10.0.0.7")
    # No image: the first two are refused for that (400), after taking their token.
    assert [client.post("/verify/").status_code for _ in range(2)] == [400, 400]
    refused = client.post("/verify/")
    assert refused.status_code == 429
    assert "Too many checks from your address: the portal allows 2 a minute" in refused.content.decode()
    assert 1 <= int(refused["Retry-After"]) <= 30
    assert Client(REMOTE_ADDR="10.0.0.8").post("/verify/").status_code == 400


def test_the_client_address_comes_from_trusted_proxies_only(settings, rf) -> None:
    request = rf.get("/", REMOTE_ADDR="10.1.1.1", HTTP_X_FORWARDED_FOR="6.6.6.6, 203.0.113.9")
    assert client_ip(request) == "10.1.1.1"
    settings.PORTAL_TRUSTED_PROXY_HOPS = 1
    assert client_ip(request) == "203.0.113.9"  # a client could have forged 6.6.6.6, not what our proxy appended
