"""Root URLs. Each app owns its own ``urls.py``; they are included here."""

from django.contrib import admin
from django.urls import include, path

from webapp.api import api
from webapp.health import healthz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
    path("", include("webapp.accounts.urls")),
    path("", include("webapp.jobs.urls")),
    path("", include("webapp.library.urls")),
    path("", include("webapp.dashboard.urls")),
    path("", include("webapp.portal.urls")),
    path("", include("webapp.guides.urls")),
]
