"""WSGI entry point for gunicorn: ``gunicorn webapp.wsgi``."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
application = get_wsgi_application()

# A worker that starts may be replacing one the server killed mid-request: clear what it left.
from webapp.scratch import sweep_logged  # noqa: E402  (needs the settings configured above)

sweep_logged()
