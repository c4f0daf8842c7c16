"""Daily budgets of images matched against other teams' keys, per team and per client address.

Each verdict about another team's key is an answer an attacker can collect; the per-minute rate
limit (``webapp.portal.ratelimit``) slows collection down, this bounds it: at most
``conf.daily_match_budget()`` images a UTC day per scope, the portal and ``watermark-verify`` jobs
together. A request charges every scope it belongs to (its address, and its team or teams) and
gets the smallest remainder, so neither a second address nor a second account of the same team
widens it. On the database (one row per scope and day, taken under row locks in a fixed order),
so it works on the embedded default as on PostgreSQL; a check or a job batch costs one transaction.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING

from django.db import transaction
from django.db.models import F

from mlcore.watermark.disclosure import FOREIGN_MATCHES
from webapp.portal import conf
from webapp.portal.models import MatchBudget

if TYPE_CHECKING:
    from webapp.jobs.models import Job


def team_scope(team_id: int) -> str:
    return f"team:{team_id}"


def address_scope(address: str) -> str:
    return f"address:{address}"


def _today() -> date:
    return datetime.now(UTC).date()


def take(scopes: Iterable[str], wanted: int, *, limit: int | None = None, today: date | None = None) -> int:
    """Take up to ``wanted`` images from every scope's budget at once; return how many were granted."""
    names = sorted({s for s in scopes if s})
    wanted = max(0, int(wanted))
    if not names or not wanted:
        return wanted
    limit = conf.daily_match_budget() if limit is None else limit
    day = today or _today()
    if random.random() < 0.01:
        MatchBudget.objects.filter(day__lt=day - timedelta(days=2)).delete()  # yesterday's rows are spent
    with transaction.atomic():
        MatchBudget.objects.bulk_create([MatchBudget(scope=s, day=day) for s in names], ignore_conflicts=True)
        # Locked in scope order, so two requests sharing scopes queue up instead of deadlocking.
        rows = list(MatchBudget.objects.select_for_update().filter(day=day, scope__in=names).order_by("scope"))
        granted = max(0, min(wanted, *(limit - row.used for row in rows)))
        if granted:
            MatchBudget.objects.filter(pk__in=[row.pk for row in rows]).update(used=F("used") + granted)
    return granted


def remaining(scopes: Iterable[str], *, limit: int | None = None, today: date | None = None) -> int:
    """What :func:`take` would grant at most right now (for pages; it takes nothing)."""
    limit = conf.daily_match_budget() if limit is None else limit
    used = MatchBudget.objects.filter(day=today or _today(), scope__in=list(scopes)).values_list("used", flat=True)
    return max(0, limit - max(used, default=0))


def refusal_message() -> str:
    return (
        f"Daily limit reached: your address or team has checked {conf.daily_match_budget():,} images today "
        "against other organisations' keys. The limit renews at midnight UTC."
    )


def scopes_for_job(job: Job) -> list[str]:
    scopes = [team_scope(job.team_id)]
    if job.submitted_from:
        scopes.append(address_scope(job.submitted_from))
    return scopes


def take_for_job(job: Job, name: str, wanted: int) -> int:
    """A running job's ``ctx.take_allowance``: the watermark budget, charged to its team and the
    address it was submitted from; any other budget name is not limited on this platform."""
    if name != FOREIGN_MATCHES:
        return wanted
    return take(scopes_for_job(job), wanted)
