"""The team dashboard: every job of the team, live while any job on screen is still moving.

The jobs table is a server-rendered fragment that htmx re-fetches every two seconds while the tab
is visible; the fragment leaves out its own trigger once every job on screen is terminal, which
is how polling stops. The number of queries is the same for 100 jobs and for 10,000.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.functional import cached_property

from mlcore.jobs.registry import UnknownKind, all_kinds, get_kind
from webapp.accounts.models import Membership, Team
from webapp.accounts.selectors import members_of, membership_for
from webapp.accounts.views import remember_team, remembered_team
from webapp.dashboard.home import home_cards
from webapp.jobs import readout, selectors
from webapp.jobs.models import Job

PAGE_SIZE = 25


def home(request: HttpRequest) -> HttpResponse:
    """Signed-in people land on their team's jobs; everyone else on the welcome page."""
    if not request.user.is_authenticated:
        return welcome(request)
    team = remembered_team(request)
    if team is None:
        return redirect("accounts:team_create")
    return redirect("dashboard:index", team.slug)


def welcome(request: HttpRequest) -> HttpResponse:
    """What MoE Lab is, the flagship jobs and the research tools, each with "Try with a sample"."""
    flagships, tools = home_cards()
    return render(request, "dashboard/home.html", {"flagships": flagships, "tools": tools, "nav": "home"})


@login_required
def try_sample(request: HttpRequest, kind: str) -> HttpResponse:
    """The kind's form filled in from ``spec.sample``, for the team the person last used (or any
    team they may submit to). Logged-out visitors pass through the login page and come back here."""
    try:
        spec = get_kind(kind).spec
    except UnknownKind:
        raise Http404(f"No job kind is called {kind!r}; it may not be installed on this server.") from None
    team = remembered_team(request)
    if team is None or not membership_for(request.user, team.slug).can_write:
        writable = [m.team for m in Membership.objects.filter(user=request.user).select_related("team") if m.can_write]
        team = writable[0] if writable else None
    if team is None:
        messages.info(request, "Create a team first (or ask for write access to one): jobs belong to a team.")
        return redirect("accounts:team_create")
    url = reverse("jobs:submit", args=[team.slug, spec.name])
    return redirect(f"{url}?sample=1" if spec.sample else url)


def _filters(request: HttpRequest, team: Team) -> dict[str, Any]:
    """Filters from the query string; unknown values are ignored rather than answered with an error."""
    members = list(members_of(team))
    kinds = selectors.kind_choices()
    kind = request.GET.get("kind", "")
    status = request.GET.get("status", "")
    person = request.GET.get("person", "")
    user = next((m.user for m in members if m.user.get_username() == person), None)
    return {
        "kind": kind if kind in {name for name, _ in kinds} else "",
        "status": status if status in Job.Status.values else "",
        "person": person if user is not None else "",
        "user": user,
        "kinds": kinds,
        "statuses": Job.Status.choices,
        "members": members,
    }


class CountedPaginator(Paginator):
    """A paginator told the number of items when the caller already knows it (``None``: count them)."""

    def __init__(self, object_list: Any, per_page: int, *, total: int | None) -> None:
        super().__init__(object_list, per_page)
        self.total = total

    @cached_property
    def count(self) -> int:
        return super().count if self.total is None else self.total


def _key_results(jobs: list[Job]) -> dict[Any, str]:
    """Job id → its key result for the table (a finished job's headline figure, by its kind)."""
    scalars = selectors.scalars_of(jobs)
    results = {}
    for job in jobs:
        if str(job.pk) not in scalars:
            continue
        try:
            spec = get_kind(job.kind).spec
        except UnknownKind:
            continue
        # The table defers params; a figure that needs one (an n) shows without its interval.
        results[job.pk] = readout.key_result(spec, scalars[str(job.pk)], {})
    return results


def _jobs_context(request: HttpRequest, team: Team) -> dict[str, Any]:
    filters = _filters(request, team)
    jobs = selectors.jobs_for_team(
        team, kind=filters["kind"] or None, status=filters["status"] or None, user=filters["user"]
    )
    query = {k: filters[k] for k in ("kind", "status", "person") if filters[k]}
    counts = selectors.status_counts(team)
    # Unfiltered, the counters already hold the total: the paginator need not count the team's
    # jobs a second time, which is most of what a page of a 10,000-job team costs over a small one.
    total = None if query else sum(counts.values())
    page = CountedPaginator(jobs, PAGE_SIZE, total=total).get_page(request.GET.get("page"))
    return {
        "key_results": _key_results(list(page.object_list)),
        "team": team,
        "page": page,
        "filters": filters,
        "query": urlencode(query),
        "page_query": urlencode({**query, "page": page.number}),
        "titles": dict(filters["kinds"]),
        "counts": counts,
        "live": any(not job.is_terminal for job in page.object_list),
        "filtered": bool(query),
    }


@login_required
def index(request: HttpRequest, team_slug: str) -> HttpResponse:
    membership = membership_for(request.user, team_slug)
    remember_team(request, membership.team)
    context = {
        **_jobs_context(request, membership.team),
        "membership": membership,
        "workers": list(selectors.workers_up()),
        "kind_specs": [kind.spec for kind in all_kinds()],
        "nav": "dashboard",
    }
    return render(request, "dashboard/index.html", context)


@login_required
def jobs_fragment(request: HttpRequest, team_slug: str) -> HttpResponse:
    membership = membership_for(request.user, team_slug)
    return render(request, "dashboard/_jobs.html", _jobs_context(request, membership.team))


@login_required
def workers_fragment(request: HttpRequest, team_slug: str) -> HttpResponse:
    membership = membership_for(request.user, team_slug)
    return render(request, "dashboard/_workers.html", {"team": membership.team, "workers": selectors.workers_up()})
