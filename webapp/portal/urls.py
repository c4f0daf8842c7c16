"""The portal's pages (namespace ``portal``) and its JSON API at ``/api/v1/watermark/`` (namespace
``watermark-api``, kept top-level so that django-ninja can reverse its own OpenAPI URLs)."""

from django.urls import include, path

from webapp.portal import views
from webapp.portal.api import api

pages = [
    path("watermark/", views.watermark, name="watermark"),
    path("verify/", views.verify, name="verify"),
    path("verify/batch/", views.verify_batch, name="verify_batch"),
    path("t/<slug:team_slug>/keys/", views.keys, name="keys"),
    path("t/<slug:team_slug>/keys/audit/", views.key_audit, name="key_audit"),
    path("keys/<str:key_id>/revoke/", views.key_revoke, name="key_revoke"),
    path("keys/<str:key_id>/rotate/", views.key_rotate, name="key_rotate"),
]

urlpatterns = [
    path("", include((pages, "portal"))),
    path("api/v1/watermark/", api.urls),
]
