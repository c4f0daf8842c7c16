from django.urls import path

from webapp.library import views

app_name = "library"

urlpatterns = [
    path("t/<slug:team_slug>/library/", views.index, name="index"),
    path("t/<slug:team_slug>/library/add/", views.add, name="add"),
    path("t/<slug:team_slug>/library/paths/", views.register_path, name="register_path"),
    path("t/<slug:team_slug>/library/uploads/", views.upload_start, name="upload_start"),
    path("library/uploads/<uuid:upload_id>/", views.upload_state, name="upload"),
    path("library/uploads/<uuid:upload_id>/chunk", views.upload_chunk, name="upload_chunk"),
    path("library/uploads/<uuid:upload_id>/complete", views.upload_complete, name="upload_complete"),
    path("library/<int:item_id>/", views.detail, name="detail"),
    path("library/<int:item_id>/download", views.download, name="download"),
    path("library/<int:item_id>/delete/", views.delete, name="delete"),
    path("jobs/<uuid:job_id>/promote/<path:name>", views.promote, name="promote"),
]
