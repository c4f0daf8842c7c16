from django.urls import path

from webapp.dashboard import views

app_name = "dashboard"

urlpatterns = [
    path("", views.home, name="home"),
    path("welcome/", views.welcome, name="welcome"),
    path("try/<slug:kind>/", views.try_sample, name="try"),
    path("t/<slug:team_slug>/", views.index, name="index"),
    path("t/<slug:team_slug>/jobs/", views.jobs_fragment, name="jobs"),
    path("t/<slug:team_slug>/workers/", views.workers_fragment, name="workers"),
]
