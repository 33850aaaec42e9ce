"""The Model Loader's remote mode: a handle naming an engine endpoint the operator configured
(``fish_core/remote/endpoints.py``) and optionally the engine's model, instead of a
checkpoint; one ``RemoteSynthesizer`` per configured endpoint and model, shared by every node;
and the remote model's speaker rules, which Multi-Speaker checks a script by.

The handle (what the workflow and the queue history hold) is the endpoint's name and, where
the workflow chose one, the engine's model name; nothing else: the endpoint's URLs, dialect
and where its API key comes from are the operator's endpoints file, read when the client is
made, so a shared workflow can neither point a key at another host nor pick which secret is
sent. A model name is harmless: it is only sent to the operator's endpoint, which must list
it (``/v1/models``)."""

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
    model: str | None = None  # the engine's model; None: the endpoint's, else the engine's first

    @property
    def name(self) -> str:
        return self.endpoint if not self.model else f"{self.endpoint} ({self.model})"


_clients: dict[tuple["EndpointConfig", str | None], "RemoteSynthesizer"] = {}
_lock = threading.Lock()


def remote_synthesizer(handle: RemoteHandle) -> "RemoteSynthesizer":
    """The client of ``handle``'s endpoint and model as configured now (made once per
    configuration and model: an edited endpoints file gives a new client; the dialect is
    detected then, and a model named by the handle is checked against the engine's list)."""
    from ..fish_core.remote import endpoints

    config = endpoints.find(handle.endpoint)
    key = (config, handle.model)
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = config.client(**({"model": handle.model} if handle.model else {}))
            from .paths import word_timer

            client.timer = word_timer()  # the engine's audio is timed here, on the CPU
            _clients[key] = client
        return client


VOICES_SECONDS = 60.0  # how long an engine's voice list is kept for the Engine Voice list
_voices: dict["EndpointConfig", tuple[float, list[str]]] = {}


def engine_voice_choices() -> list[str]:
    """The voices of every configured engine, for the Engine Voice node's list (ComfyUI asks
    when it lists the nodes): each engine asked with short timeouts and its answer kept
    ``VOICES_SECONDS``; an engine that cannot answer (down, no voice library) adds none."""
    import time

    from ..fish_core.remote import endpoints

    try:
        configured = endpoints.load()
    except (OSError, ValueError):
        return []
    names: set[str] = set()
    now = time.monotonic()
    for config in configured.values():
        names.update(engine_voices_kept(config, now))
    return sorted(names)


def engine_voices_kept(config: "EndpointConfig", now: float) -> list[str]:
    """One engine's voices: its answer kept, or asked again when older than
    ``VOICES_SECONDS`` (none when it cannot answer)."""
    import logging

    kept = _voices.get(config)
    if kept is None or now - kept[0] > VOICES_SECONDS:
        try:
            client = config.client(connect_timeout=2.0, read_timeout=5.0, retries=0)
            kept = (now, client.engine_voices())
        except Exception as e:  # noqa: BLE001 - a list for a menu: the node says why later
            logging.getLogger("sailfish").debug("voices of endpoint %r: %s", config.name, e)
            kept = (now, [])
        _voices[config] = kept
    return kept[1]


def backend_accepts(model):
    """What the model's backend takes beyond the request rules (``speech.request.Accepts``):
    S2's for a local model; a remote engine's own (Drama 3: 16 speakers, voices for those
    connected, the model inventing the rest), asked when a request needs it."""
    from ..fish_core.speech.request import ANY

    if not isinstance(model, RemoteHandle):
        return ANY
    return remote_synthesizer(model).accepts


def forget(handle: RemoteHandle | None = None) -> None:
    """Drop the clients of ``handle``'s endpoint (or every client)."""
    with _lock:
        for config, model in list(_clients):
            if handle is None or config.name == handle.endpoint:
                del _clients[config, model]
