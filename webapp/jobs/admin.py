from django.contrib import admin
from django.utils.html import format_html

from webapp.jobs.models import Job, JobArtifact, JobInput, WorkerStatus


class JobInputInline(admin.TabularInline):
    model = JobInput
    extra = 0
    readonly_fields = ["param", "file", "original_name", "size", "sha256", "format"]


class JobArtifactInline(admin.TabularInline):
    model = JobArtifact
    extra = 0
    readonly_fields = ["name", "file", "media_type", "size", "attempt", "unfinished"]


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["id", "kind", "team", "status", "progress", "submitted_by", "created_at", "worker"]
    list_filter = ["status", "kind", "queue"]
    search_fields = ["id", "kind", "team__name", "submitted_by__username", "error"]
    list_select_related = ["team", "submitted_by"]
    raw_id_fields = ["rerun_of"]
    inlines = [JobInputInline, JobArtifactInline]
    # Staff only: the traceback of an internal error, which no page, API answer or CLI shows. The
    # user quotes the reference id from their error; searching for it finds the job.
    search_help_text = "A job id, kind, team, user, or an internal error's reference id."
    exclude = ["traceback"]
    readonly_fields = ["internal_traceback"]

    @admin.display(description="Traceback (staff only)")
    def internal_traceback(self, job: Job) -> str:
        return format_html("<pre>{}</pre>", job.traceback) if job.traceback else "—"


@admin.register(WorkerStatus)
class WorkerStatusAdmin(admin.ModelAdmin):
    list_display = ["hostname", "queues", "device", "pid", "started_at", "last_seen"]
