"""Job pages: choose a kind, submit, watch a job, act on it, download its results, compare jobs.

Every view reaches a job through ``job_for_user`` or a team through ``team_for_user``, so
outsiders get 404 everywhere and viewers get 403 on every write.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from mlcore.jobs.params import ParamError
from mlcore.jobs.registry import Kind, UnknownKind, all_kinds, get_kind
from mlcore.jobs.spec import JobSpec
from webapp.accounts.models import Membership
from webapp.accounts.selectors import team_for_user
from webapp.accounts.views import remember_team
from webapp.jobs import charts, readout, selectors, services, storage
from webapp.jobs.downloads import artifact_response
from webapp.jobs.forms import SpecForm
from webapp.jobs.models import Job, JobArtifact
from webapp.security import client_ip

IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif")
POINT_CLOUD = "application/x-ply"


def _kind_or_404(name: str) -> Kind:
    try:
        return get_kind(name)
    except UnknownKind:
        raise Http404("No such job kind.") from None


def _membership(request: HttpRequest, job: Job) -> Membership:
    return Membership.objects.get(team=job.team_id, user=request.user)


@login_required
def kinds(request: HttpRequest, team_slug: str) -> HttpResponse:
    team = team_for_user(request.user, team_slug, write=True)
    remember_team(request, team)
    context = {"team": team, "kinds": [k.spec for k in all_kinds()], "nav": "submit"}
    return render(request, "jobs/kinds.html", context)


def _render_submit(request: HttpRequest, context: dict[str, Any], *, status: int = 200) -> HttpResponse:
    return render(request, "jobs/submit.html", {"nav": "submit", **context}, status=status)


def _sample_values(spec: JobSpec) -> dict[str, Any]:
    """``spec.sample`` as typed values (a kind may write ``"a,b"`` for a list, as on the command line)."""
    values = {}
    for name, raw in spec.sample.items():
        try:
            values[name] = spec.param(name).clean(raw)
        except (KeyError, ParamError):
            values[name] = raw  # shown as written; submitting reports what is wrong with it
    return values


@login_required
def submit(request: HttpRequest, team_slug: str, kind: str) -> HttpResponse:
    team = team_for_user(request.user, team_slug, write=True)
    spec = _kind_or_404(kind).spec
    remember_team(request, team)
    if request.method != "POST":
        sample = _sample_values(spec) if "sample" in request.GET else None
        initial = {**{p.name: p.default for p in spec.params}, **sample} if sample is not None else None
        return _render_submit(request, {"team": team, "spec": spec, "form": SpecForm(spec, initial=initial, team=team)})
    form = SpecForm(spec, data=request.POST, team=team)
    files = {p.name: request.FILES.getlist(p.name) for p in spec.file_params}
    try:
        job = services.job_submit(
            team=team,
            user=request.user,
            kind=spec.name,
            raw_params=form.raw_params(),
            files=files,
            address=client_ip(request),
        )
    except services.SubmitError as exc:
        form.add_errors(exc.errors)
        return _render_submit(request, {"team": team, "spec": spec, "form": form}, status=400)
    return redirect("jobs:detail", job.id)


def _results_version(job: Job, artifacts: list[JobArtifact]) -> str:
    """A short hash of what the results panel shows; unchanged panels are not re-sent (no chart flicker)."""
    state = [
        job.charts,
        [(a.name, a.size, a.media_type, a.unfinished, a.created_at.isoformat()) for a in artifacts],
        bool(job.provenance),
        job.is_terminal,
    ]
    return hashlib.sha1(json.dumps(state, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _previewed_clouds(artifacts: list[JobArtifact]) -> dict[str, str]:
    """The point clouds a result page does not draw in 3D, each with the preview drawn for it.

    A kind that records a preview for the viewer (a PLY named ``preview…``: pointcloud-segment's
    downsampled labelled cloud) means it to stand for its full-size clouds, which download: drawing
    both shows the same scene twice, each viewer with a WebGL context and the points in memory.
    Clouds of a job without a preview are different scenes, and each is drawn."""
    clouds = [a for a in artifacts if a.media_type == POINT_CLOUD]
    previews = [a.name for a in clouds if a.name.rsplit("/", 1)[-1].startswith("preview")]
    if not previews:
        return {}
    return {a.name: previews[0] for a in clouds if a.name not in previews}


def _results_context(job: Job) -> dict[str, Any]:
    """Charts, artifacts, and the side panels (parameters, inputs, provenance, related runs)."""
    artifacts = list(selectors.artifacts_of(job))
    shown = None
    if job.is_terminal:
        found = readout.build(_spec_of(job), (job.metrics or {}).get("scalars", {}), job.params or {}, job.charts or {})
        shown = charts.comparison_chart(job, found)
    return {
        "job": job,
        "charts": charts.chart_list(job, leave_out=shown["name"] if shown and shown["stored"] else ""),
        "images": [a for a in artifacts if a.media_type in IMAGE_TYPES],
        "files": [a for a in artifacts if a.media_type not in IMAGE_TYPES],
        "previewed": _previewed_clouds(artifacts),
        "artifact_count": len(artifacts),
        "results_version": _results_version(job, artifacts),
        "param_rows": _param_rows(job),
        "inputs": list(job.inputs.all()),
        "reruns": list(job.reruns.order_by("-created_at")[:10]),
    }


def _spec_of(job: Job) -> JobSpec | None:
    try:
        return get_kind(job.kind).spec
    except UnknownKind:
        return None


def _waiting(job: Job) -> dict[str, Any]:
    """What a person waiting wants to know: the place in the queue, and how long runs of the kind
    took before (the median of recent ones), with the time likely left for a running job."""
    if job.is_terminal:
        return {}
    typical = selectors.typical_duration(job.kind)
    remaining = None
    if typical is not None and job.status == Job.Status.RUNNING and job.duration is not None:
        left = typical[0] - job.duration
        remaining = left if left.total_seconds() > 0 else None
    return {"queue_position": selectors.queue_position(job), "typical": typical, "remaining": remaining}


def _live_context(request: HttpRequest, job: Job) -> dict[str, Any]:
    membership = _membership(request, job)
    scalars = (job.metrics or {}).get("scalars", {})
    found = readout.build(_spec_of(job), scalars, job.params or {}, job.charts or {})
    return {
        "job": job,
        "title": dict(selectors.kind_choices()).get(job.kind, job.kind),
        "membership": membership,
        "scalars": sorted(scalars.items()),
        "readout": found,
        # The comparison is drawn once the job has finished: while it runs, rows arrive one by one
        # and a chart redrawn on every poll would flicker.
        "comparison_chart": charts.comparison_chart(job, found) if job.is_terminal else None,
        **_waiting(job),
        # No traceback here, not even for the submitter: it names server paths and code. Staff
        # read it in the admin, found by the reference id that the error shows.
    }


def _param_rows(job: Job) -> list[dict[str, Any]]:
    """The job's parameters in the spec's order (the database does not keep key order)."""
    try:
        titles = {p.name: p.title for p in get_kind(job.kind).spec.params}
    except UnknownKind:
        titles = {}
    names = [name for name in titles if name in job.params] + [name for name in job.params if name not in titles]
    return [{"name": name, "label": titles.get(name, name), "value": job.params[name]} for name in names]


@login_required
def detail(request: HttpRequest, job_id: str) -> HttpResponse:
    job = selectors.job_for_user(request.user, job_id)
    remember_team(request, job.team)
    context = {**_live_context(request, job), **_results_context(job), "team": job.team, "nav": "dashboard"}
    return render(request, "jobs/detail.html", context)


@login_required
def live(request: HttpRequest, job_id: str) -> HttpResponse:
    """The polled part of the job page; without a trigger once the job is terminal, so polling stops."""
    job = selectors.job_for_user(request.user, job_id)
    response = render(request, "jobs/_live.html", _live_context(request, job))
    if job.is_terminal:
        # The results panel refreshes at once, so the last chart points and files show with the final state.
        response["HX-Trigger"] = "job-finished"
    return response


@login_required
def results(request: HttpRequest, job_id: str) -> HttpResponse:
    job = selectors.job_for_user(request.user, job_id)
    context = _results_context(job)
    if request.GET.get("v") == context["results_version"]:
        return HttpResponse(status=204)  # htmx swaps nothing on 204: charts already drawn stay put
    return render(request, "jobs/_results.html", context)


@login_required
@require_POST
def cancel(request: HttpRequest, job_id: str) -> HttpResponse:
    job = selectors.job_for_user(request.user, job_id, write=True)
    try:
        job = services.job_cancel(job=job, user=request.user)
    except services.JobStateError as exc:
        messages.warning(request, str(exc))
    else:
        # A running job shows its own "stopping" banner until it has stopped (the live fragment
        # clears it then); a one-off message here would outlive the stop.
        if job.status == Job.Status.CANCELLED:
            messages.success(request, "Job cancelled.")
    return redirect("jobs:detail", job.id)


@login_required
def rerun(request: HttpRequest, job_id: str) -> HttpResponse:
    job = selectors.job_for_user(request.user, job_id, write=True)
    spec = _kind_or_404(job.kind).spec
    changed = services.job_changed_params(job)
    form = SpecForm(spec, initial=job.params, with_files=False, team=job.team)
    status = 200
    if request.method == "POST":
        form = SpecForm(spec, data=request.POST, with_files=False, team=job.team)
        try:
            clone = services.job_rerun(
                job=job, user=request.user, raw_params=form.raw_params(), address=client_ip(request)
            )
        except services.SubmitError as exc:
            form.add_errors(exc.errors)
            status = 400
        else:
            return redirect("jobs:detail", clone.id)
    context = {
        "team": job.team,
        "spec": spec,
        "form": form,
        "rerun_of": job,
        "changed": changed,
        "inputs": list(job.inputs.all()),
        "nav": "submit",
    }
    return _render_submit(request, context, status=status)


@login_required
@require_POST
def delete(request: HttpRequest, job_id: str) -> HttpResponse:
    job = selectors.job_for_user(request.user, job_id, write=True)
    team = job.team
    try:
        services.job_delete(job=job, user=request.user)
    except services.JobStateError as exc:
        messages.warning(request, str(exc))
        return redirect("jobs:detail", job.id)
    messages.success(request, "Job deleted with its files.")
    return redirect("dashboard:index", team.slug)


@login_required
def artifact(request: HttpRequest, job_id: str, name: str) -> FileResponse:
    item = selectors.artifact_for_user(request.user, job_id, name)
    return artifact_response(item, download="download" in request.GET)


@login_required
def log(request: HttpRequest, job_id: str) -> HttpResponse:
    job = selectors.job_for_user(request.user, job_id)
    response = HttpResponse(storage.read_log(job), content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'inline; filename="{job.id}.log.txt"'
    return response


@login_required
def chart_png(request: HttpRequest, job_id: str, name: str) -> HttpResponse:
    job = selectors.job_for_user(request.user, job_id)
    png = charts.render_png(charts.chart_spec(job, name))
    response = HttpResponse(png, content_type="image/png")
    response["Content-Disposition"] = f'attachment; filename="{charts.safe_filename(name)}.png"'
    return response


@login_required
def chart_data(request: HttpRequest, job_id: str, name: str) -> JsonResponse:
    job = selectors.job_for_user(request.user, job_id)
    response = JsonResponse(charts.chart_data(charts.chart_spec(job, name)), safe=False)
    response["Content-Disposition"] = f'attachment; filename="{charts.safe_filename(name)}.json"'
    return response


@login_required
def chart_spec(request: HttpRequest, job_id: str, name: str) -> JsonResponse:
    job = selectors.job_for_user(request.user, job_id)
    response = JsonResponse(charts.chart_spec(job, name))
    response["Content-Disposition"] = f'attachment; filename="{charts.safe_filename(name)}.vl.json"'
    return response


@login_required
def compare(request: HttpRequest) -> HttpResponse:
    ids = list(dict.fromkeys(request.GET.getlist("job")))
    jobs = [selectors.job_for_user(request.user, job_id) for job_id in ids]
    error = ""
    if len(jobs) < 2:
        error = "Pick two or more jobs to compare (tick them on the dashboard)."
    elif len({j.team_id for j in jobs}) > 1:
        error = "These jobs belong to different teams; compare jobs of one team."
    elif len({j.kind for j in jobs}) > 1:
        error = "Only jobs of the same kind can be compared: their parameters and metrics must match."
    team = jobs[0].team if jobs else None
    context: dict[str, Any] = {"jobs": jobs, "error": error, "team": team, "nav": "dashboard"}
    if not error:
        context.update(charts.comparison(jobs, _spec_of(jobs[0])))
        remember_team(request, jobs[0].team)
    # A refused comparison is still a whole page (header, the jobs picked, the way back), answered
    # 400 so scripts see the refusal.
    return render(request, "jobs/compare.html", context, status=400 if error else 200)
