"""Shared test set-up: the test-only job kind is registered for every test and every worker."""

import os

os.environ.setdefault("MOELAB_EXTRA_KINDS", "tests.jobkinds.exercise")
