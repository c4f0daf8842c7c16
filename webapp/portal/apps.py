from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "webapp.portal"
    label = "portal"
    verbose_name = "Watermark portal"
    default_auto_field = "django.db.models.BigAutoField"
