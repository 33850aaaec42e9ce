"""The Model Loader's remote mode: a handle naming an engine endpoint the operator configured
(``fish_core/remote/endpoints.py``) instead of a checkpoint, and one ``RemoteSynthesizer`` per
configured endpoint, shared by every node.

The handle (what the workflow and the queue history hold) is the endpoint's name and nothing
else: its URLs, dialect and where its API key comes from are the operator's endpoints file,
read when the client is made, so a shared workflow can neither point a key at another host nor
pick which secret is sent."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..fish_core.remote import RemoteSynthesizer
    from ..fish_core.remote.endpoints import EndpointConfig


@dataclass(frozen=True)
class RemoteHandle:
    """What flows between nodes as FISH_S2_MODEL in remote mode."""

    endpoint: str  # a configured endpoint's name

    @property
    def name(self) -> str:
        return self.endpoint


_clients: dict["EndpointConfig", "RemoteSynthesizer"] = {}
_lock = threading.Lock()


def remote_synthesizer(handle: RemoteHandle) -> "RemoteSynthesizer":
    """The client of ``handle``'s endpoint as configured now (made once per configuration: an
    edited endpoints file gives a new client; the dialect is detected then)."""
    from ..fish_core.remote import endpoints

    config = endpoints.find(handle.endpoint)
    with _lock:
        client = _clients.get(config)
        if client is None:
            client = config.client()
            _clients[config] = client
        return client


def forget(handle: RemoteHandle | None = None) -> None:
    """Drop the clients of ``handle``'s endpoint (or every client)."""
    with _lock:
        for config in list(_clients):
            if handle is None or config.name == handle.endpoint:
                del _clients[config]
