from django.apps import AppConfig


class GuidesConfig(AppConfig):
    name = "webapp.guides"
    label = "guides"
    default_auto_field = "django.db.models.BigAutoField"
