from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "webapp.portal"
    label = "portal"
    verbose_name = "Watermark portal"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Jobs resolve watermark keys and keyring:platform through the sources the portal registers
        # (jobs never imports the portal).
        from webapp.jobs.references import register
        from webapp.portal.references import KEYRING, KEYS

        register("watermark-keys", KEYS)
        register("watermark-keyring", KEYRING)
