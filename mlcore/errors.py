"""The errors every layer of mlcore may raise: the ground floor, importing nothing of mlcore.

A method package (``mlcore.hf``, ``mlcore.pointcloud``, ...) raises :class:`JobError` for input a
user can fix; the job layer (``mlcore.jobs``) re-exports both names and shows the message as written.
"""

from __future__ import annotations


class JobError(Exception):
    """An error meant for the user: the message says what went wrong and what to do."""


class JobCancelled(Exception):
    """Raised by a kind (or by ``ctx.raise_if_cancelled``) to stop a cancelled job early."""
