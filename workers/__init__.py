"""Celery workers: one generic task that runs any job kind through a database-backed ``ctx``.

Start one with ``celery -A webapp worker -Q gpu,cpu,verify`` (``make run`` adds ``-B`` for the
reaper). Nothing here imports torch at import time: CUDA is initialised inside the task.
"""
