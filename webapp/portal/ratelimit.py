"""A per-IP token bucket for the public portal, on Redis or on the database.

Each client IP holds up to ``capacity`` tokens that refill continuously at ``capacity`` per minute;
a check takes one. The Redis bucket is one Lua script (atomic across web processes); the database
bucket serves the embedded default, which has no Redis, with a row lock per IP. django-ratelimit
is not used: it refuses the database and local-memory caches that the embedded default runs on.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from functools import cache
from typing import Protocol

from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import HttpRequest

from webapp.portal import conf
from webapp.portal.models import RateBucket
from webapp.security import client_ip


@dataclass(frozen=True)
class Decision:
    allowed: bool
    #: Seconds until the next token when refused (0 when allowed).
    retry_after: float = 0.0


def _refill(tokens: float, updated: float, now: float, capacity: float, rate: float) -> float:
    return min(capacity, tokens + max(0.0, now - updated) * rate)


class Bucket(Protocol):
    def take(self, key: str, *, capacity: int, per_seconds: float, now: float | None = None) -> Decision: ...


class DatabaseBucket:
    """One row per key, updated under ``SELECT ... FOR UPDATE`` so concurrent requests queue up."""

    def take(self, key: str, *, capacity: int, per_seconds: float, now: float | None = None) -> Decision:
        now = time.time() if now is None else now
        rate = capacity / per_seconds
        if random.random() < 0.01:
            # A bucket untouched for longer than a full refill is the same as no row: prune them.
            RateBucket.objects.filter(updated__lt=now - per_seconds - 3600).delete()
        for _ in range(2):  # a concurrent first request may create the row between our read and insert
            try:
                with transaction.atomic():
                    row = RateBucket.objects.select_for_update().filter(key=key).first()
                    if row is None:
                        RateBucket.objects.create(key=key, tokens=capacity - 1, updated=now)
                        return Decision(True)
                    tokens = _refill(row.tokens, row.updated, now, capacity, rate)
                    if tokens < 1:
                        RateBucket.objects.filter(key=key).update(tokens=tokens, updated=now)
                        return Decision(False, (1 - tokens) / rate)
                    RateBucket.objects.filter(key=key).update(tokens=tokens - 1, updated=now)
                    return Decision(True)
            except IntegrityError:
                continue
        return Decision(False, 1.0)


_LUA = """
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'updated')
local tokens = tonumber(state[1]) or capacity
local updated = tonumber(state[2]) or now
tokens = math.min(capacity, tokens + math.max(0, now - updated) * rate)
local allowed = 0
local retry = 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
else
  retry = (1 - tokens) / rate
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'updated', tostring(now))
redis.call('EXPIRE', KEYS[1], math.ceil(capacity / rate) + 60)
return {allowed, tostring(retry)}
"""


class RedisBucket:
    def __init__(self, url: str) -> None:
        import redis

        self.client = redis.Redis.from_url(url)
        self.script = self.client.register_script(_LUA)

    def take(self, key: str, *, capacity: int, per_seconds: float, now: float | None = None) -> Decision:
        now = time.time() if now is None else now
        allowed, retry = self.script(keys=[f"moelab:rate:{key}"], args=[capacity, capacity / per_seconds, now])
        return Decision(bool(int(allowed)), float(retry))


@cache
def _redis_bucket(url: str) -> RedisBucket:
    return RedisBucket(url)


def bucket() -> Bucket:
    if conf.rate_backend() == "redis":
        return _redis_bucket(settings.REDIS_URL)
    return DatabaseBucket()


def take_for(request: HttpRequest, scope: str = "portal") -> Decision:
    """Take one token for this request's IP address."""
    return bucket().take(f"{scope}:{client_ip(request)}", capacity=conf.rate_per_minute(), per_seconds=60.0)


def refusal_message(decision: Decision) -> str:
    wait = max(1, round(decision.retry_after))
    return (
        f"Too many checks from your address: the portal allows {conf.rate_per_minute()} a minute. "
        f"Try again in {wait} second{'s' if wait != 1 else ''}."
    )
