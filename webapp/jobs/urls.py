from django.urls import path

from webapp.jobs import views

app_name = "jobs"

urlpatterns = [
    path("t/<slug:team_slug>/submit/", views.kinds, name="kinds"),
    path("t/<slug:team_slug>/submit/<slug:kind>/", views.submit, name="submit"),
    path("jobs/compare/", views.compare, name="compare"),
    path("jobs/<uuid:job_id>/", views.detail, name="detail"),
    path("jobs/<uuid:job_id>/live/", views.live, name="live"),
    path("jobs/<uuid:job_id>/results/", views.results, name="results"),
    path("jobs/<uuid:job_id>/cancel/", views.cancel, name="cancel"),
    path("jobs/<uuid:job_id>/rerun/", views.rerun, name="rerun"),
    path("jobs/<uuid:job_id>/delete/", views.delete, name="delete"),
    path("jobs/<uuid:job_id>/log.txt", views.log, name="log"),
    path("jobs/<uuid:job_id>/charts/<str:name>.png", views.chart_png, name="chart_png"),
    path("jobs/<uuid:job_id>/charts/<str:name>.vl.json", views.chart_spec, name="chart_spec"),
    path("jobs/<uuid:job_id>/charts/<str:name>.json", views.chart_data, name="chart_data"),
    path("jobs/<uuid:job_id>/artifacts/<path:name>", views.artifact, name="artifact"),
]
