"""The web process never imports torch: loading every page's code and drawing every kind's form
must leave torch, transformers and vl-convert unimported (vl-convert loads on a PNG download)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.workers.processes import ROOT

PROBE = """
import sys, django
django.setup()
import webapp.urls
from mlcore.jobs.registry import all_kinds
from webapp.jobs.forms import SpecForm
for kind in all_kinds():
    SpecForm(kind.spec)
print(sorted(m for m in ("torch", "transformers", "vl_convert") if m in sys.modules))
"""


def test_loading_the_web_app_and_every_form_imports_no_torch() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "webapp.settings", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
