"""The portal's task name on the ``verify`` queue. The web enqueues it by name, so the web process
never imports the worker's code (nor torch)."""

VERIFY_IMAGES = "workers.verify_images"
VERIFY_QUEUE = "verify"
