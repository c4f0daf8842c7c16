from django.apps import AppConfig


class LibraryConfig(AppConfig):
    name = "webapp.library"
    label = "library"

    def ready(self) -> None:
        # Jobs resolve library:ID through the source the library registers (jobs never imports it).
        from webapp.jobs.references import register
        from webapp.library.references import SOURCE

        register("library", SOURCE)
