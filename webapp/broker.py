"""The embedded default's message broker: kombu's file-system transport, publishing atomically.

kombu's file-system channel (5.x) publishes by creating the message file in the queue folder and
then writing into it. A consumer that lists the folder in between moves the still-empty file away,
reads nothing, deletes it and fails to decode it: the message is gone. The portal latency
benchmark lost about one check in 400 this way (a 503 after the full wait). Here a message is
written under a name no queue matches and renamed into place; a rename within one folder is
atomic, so a consumer sees a whole message or none.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

#: Suffix of a message still being written: consumers take only names ending in ``.{queue}.msg``.
PARTIAL = ".part"


class Channel(filesystem.Channel):
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:
        # Named like kombu's own messages (milliseconds first), so consumers keep the FIFO order.
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = final + PARTIAL
        try:
            with open(partial, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel


def register() -> None:
    """Make ``filesystem://`` URLs use this transport (in this process)."""
    TRANSPORT_ALIASES["filesystem"] = f"{__name__}:Transport"
