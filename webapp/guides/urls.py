from django.urls import path

from webapp.guides import views

app_name = "guides"

urlpatterns = [
    path("docs/", views.index, name="index"),
    path("docs/api/", views.api_reference, name="api"),
    path("docs/kinds/<slug:name>/", views.kind, name="kind"),
    path("docs/bench/<slug:name>/", views.bench, name="bench"),
    path("docs/<slug:slug>/", views.page, name="page"),
]
