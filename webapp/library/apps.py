from django.apps import AppConfig


class LibraryConfig(AppConfig):
    name = "webapp.library"
    label = "library"
