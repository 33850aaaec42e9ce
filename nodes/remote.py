"""The Model Loader's remote mode: a handle naming an engine endpoint (or several) instead of
a checkpoint, and one ``RemoteSynthesizer`` per handle, shared by every node.

The handle (what the workflow stores) holds the URL, the dialect and *where* the API key is
(an environment variable's name, a key file's path), never the key: it is read when the
client is made, so it appears in neither the saved workflow nor the queue history."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..fish_core.remote import RemoteSynthesizer

KEY_ENV = "SAILFISH_REMOTE_API_KEY"


@dataclass(frozen=True)
class RemoteHandle:
    """What flows between nodes as FISH_S2_MODEL in remote mode."""

    url: str
    dialect: str = "auto"
    api_key_env: str = KEY_ENV
    api_key_file: str = ""

    @property
    def name(self) -> str:
        return self.url


_clients: dict[RemoteHandle, "RemoteSynthesizer"] = {}
_lock = threading.Lock()


def remote_synthesizer(handle: RemoteHandle) -> "RemoteSynthesizer":
    """The client of ``handle`` (made once: the dialect is detected then)."""
    from ..fish_core.remote import RemoteSynthesizer
    from ..fish_core.remote.keys import read_api_key

    with _lock:
        client = _clients.get(handle)
        if client is None:
            key = read_api_key(handle.api_key_file.strip() or None,
                               handle.api_key_env.strip() or None)
            client = RemoteSynthesizer(handle.url, handle.dialect, key)
            _clients[handle] = client
        return client


def forget(handle: RemoteHandle | None = None) -> None:
    """Drop the client of ``handle`` (or every client)."""
    with _lock:
        if handle is None:
            _clients.clear()
        else:
            _clients.pop(handle, None)
