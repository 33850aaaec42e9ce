"""Live playback: while a generating node runs, each piece of its audio goes to the browser tab
that queued the prompt, as a websocket event of ComfyUI's server.

Who gets it: only the client id the running prompt was queued with (``PromptServer.client_id``),
and only when that client asked for it: the web extension (``web/js/sailfish_playback.js``) posts
``{"client_id": …, "listen": true|false}`` to ``/sailfish/live`` when it connects and whenever
its setting *Sailfish › Live playback* changes. A registration is taken only for a client id
with an open ComfyUI websocket (from the same peer address, where aiohttp tells it), at most
``MAX_PER_PEER`` per peer and ``MAX_LISTENERS`` in all, ids whose socket closed dropped first;
beyond that it is refused (429), never made by evicting another tab's; only the peer that
registered an id may withdraw it. When nobody listens (the setting off, the
extension not loaded, API-only use, or outside ComfyUI) the node runs exactly as before: no
live decode, no per-frame copies of the generated columns, nothing sent.

Events, type ``sailfish.live`` (JSON; ``node`` is the executing node's id, ``seq`` counts the
events of one run from 0):

* ``{"state": "start", "node", "prompt_id", "seq"}`` when the node starts generating;
* ``{"state": "chunk", …, "sample_rate", "offset", "samples", "pcm"}``: ``samples`` samples
  starting at ``offset`` of the node's AUDIO output (take 1), as base64 16-bit little-endian
  PCM; a silent piece carries ``"silence": true`` instead of ``pcm``;
* ``{"state": "words", …, "words": [{"text", "start", "end"}]}``: take 1's timed words (when
  the node's ``words`` input is on), sent once they are timed, before ``done``: the player
  shows each word as it is spoken;
* ``{"state": "done" | "cancelled" | "error", …, "samples"}`` closes the stream (``samples``:
  the total sent).

The node runner (``runner.generation``) opens and closes a run's stream; this module holds who
listens, the sender and the route. The wire names (event ``sailfish.live``, route
``/sailfish/live``, the setting ``Sailfish.LivePlayback``) stay as shared workflows and open
tabs know them.
"""

from __future__ import annotations

import base64
import logging
import re
import threading

import torch

from . import host

EVENT = "sailfish.live"
ROUTE = "/sailfish/live"
MAX_SAMPLES = 1 << 16  # per event (~1.5 s at 44.1 kHz; 175 kB of base64)
MAX_WORDS = 20000  # in the words event (a long book chapter's; the rest is not shown live)
MAX_LISTENERS = 256  # client ids registered at once
MAX_PER_PEER = 16  # of them from one peer address
MAX_BODY = 1024
CLIENT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
log = logging.getLogger("sailfish")


# ---------------------------------------------------------------- who listens
class Refused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class Listeners:
    """The client ids whose browser plays live chunks, each with the peer that registered it
    (bounded in all and per peer, thread-safe; a full set refuses, it never evicts)."""

    def __init__(self, limit: int = MAX_LISTENERS, per_peer: int = MAX_PER_PEER):
        self.limit, self.per_peer = limit, per_peer
        self._ids: dict[str, str | None] = {}  # client id → the peer that registered it
        self._lock = threading.Lock()

    def set(self, client_id: str, listen: bool, peer: str | None = None,
            open_ids=None) -> None:
        """Register (``listen``) or withdraw ``client_id`` for ``peer``; ``open_ids``: the ids
        with an open socket (the others are dropped first). ``Refused`` when full, or when
        another peer's registration would be withdrawn."""
        with self._lock:
            if open_ids is not None:
                for gone in [i for i in self._ids if i not in open_ids]:
                    del self._ids[gone]
            owner = self._ids.get(client_id, peer)
            if owner is not None and peer is not None and owner != peer:
                raise Refused(403, "client_id: registered by another peer")
            if not listen:
                self._ids.pop(client_id, None)
                return
            if client_id not in self._ids:
                mine = sum(1 for p in self._ids.values() if p == peer)
                if peer is not None and mine >= self.per_peer:
                    raise Refused(429, f"client_id: this peer has {mine} live playback "
                                       "registrations already; withdraw one first")
                if len(self._ids) >= self.limit:
                    raise Refused(429, "client_id: too many live playback registrations; "
                                       "retry later")
            self._ids[client_id] = peer

    def __contains__(self, client_id) -> bool:
        with self._lock:
            return client_id in self._ids


def listeners(server) -> Listeners:
    """The server's one set of listening clients (kept on the server, so that every copy of
    the pack in the process, and the route, share it)."""
    found = getattr(server, "sailfish_live_listeners", None)
    if found is None:
        found = server.sailfish_live_listeners = Listeners()
    return found


def sender() -> "PlaybackSender | None":
    """A sender to the client that queued the running prompt, for the executing node; None
    when there is no server, no client id (API use), or that client does not listen."""
    server = host.prompt_server()
    sid = getattr(server, "client_id", None)
    if (server is None or not sid or sid not in listeners(server)
            or sid not in getattr(server, "sockets", {})):
        return None
    utils = host.module("comfy_execution.utils")
    context = utils.get_executing_context() if utils is not None else None
    node = context.node_id if context is not None else getattr(server, "last_node_id", None)
    if node is None:
        return None
    return PlaybackSender(server, sid, str(node), getattr(context, "prompt_id", None))


# ---------------------------------------------------------------- sending
class PlaybackSender:
    """The events of one node run, sent to one client (``send_sync`` is thread-safe: it hands
    the message to the server's event loop)."""

    def __init__(self, server, sid: str, node: str, prompt_id: str | None):
        self.server, self.sid = server, sid
        self.head = {"node": node, "prompt_id": prompt_id}
        self.seq = 0
        self.offset = 0  # samples sent so far
        self.closed = False

    def start(self) -> None:
        self._send("start")

    def chunk(self, samples: torch.Tensor, sample_rate: int) -> None:
        """``on_chunk`` for the Synthesizer: the next samples of the output, float32 ``[n]``."""
        if self.closed or self.sid not in getattr(self.server, "sockets", {}):
            return  # the tab went away: stop encoding for it
        for piece in samples.split(MAX_SAMPLES):
            fields = {"sample_rate": int(sample_rate), "offset": self.offset,
                      "samples": piece.shape[0]}
            if piece.any():
                fields["pcm"] = base64.b64encode(pcm16(piece)).decode("ascii")
            else:
                fields["silence"] = True
            self._send("chunk", **fields)
            self.offset += piece.shape[0]

    def words(self, words) -> None:
        """Take 1's timed words (``speech.words.TimedWord``), for the player to show."""
        if self.closed or self.sid not in getattr(self.server, "sockets", {}):
            return
        self._send("words", words=[{"text": w.text[:100], "start": w.start, "end": w.end}
                                   for w in list(words)[:MAX_WORDS]])

    def close(self, state: str) -> None:
        """The final event: ``done``, ``cancelled`` or ``error`` (once)."""
        if not self.closed:
            self._send(state, samples=self.offset)
            self.closed = True

    def _send(self, state: str, **fields) -> None:
        try:
            self.server.send_sync(EVENT, {**self.head, "seq": self.seq, "state": state,
                                          **fields}, self.sid)
        except Exception as e:  # noqa: BLE001 - playback must never fail the generation
            log.warning("Sailfish: live playback stopped (%s)", type(e).__name__)
            self.closed = True
        self.seq += 1


def pcm16(samples: torch.Tensor) -> bytes:
    """float32 samples → 16-bit little-endian PCM (clipped to [-1, 1], rounded)."""
    ints = (samples.detach().float().clamp(-1.0, 1.0) * 32767.0).round().to(torch.int16)
    return ints.numpy().astype("<i2").tobytes()


# ---------------------------------------------------------------- the route
async def set_listening(request):
    """POST /sailfish/live ``{"client_id": str, "listen": bool}`` → ``{"listen": bool}``. The
    Host and Origin rules of the other ``/sailfish`` routes apply (a foreign page or a rebound
    name cannot switch a tab's playback)."""
    from aiohttp import web

    from ..fish_core.serve import ApiError
    from .routes import guard

    try:
        guard().check(request.headers)
        client_id, listen = await listen_body(request)
        server, peer = host.prompt_server(), getattr(request, "remote", None)
        sockets = getattr(server, "sockets", {})
        check_owner(client_id, listen, peer, sockets)
        listeners(server).set(client_id, listen, peer, set(sockets))
    except (ApiError, Refused) as e:
        return web.json_response({"error": e.message}, status=e.status)
    return web.json_response({"listen": listen})


async def listen_body(request) -> tuple[str, bool]:
    """The checked ``client_id`` and ``listen`` of a body of at most ``MAX_BODY`` bytes."""
    if request.content_length is None or request.content_length > MAX_BODY:
        raise Refused(413, f"send a JSON body of at most {MAX_BODY} bytes")
    try:
        body = await request.json()
    except ValueError:
        body = None
    client_id = body.get("client_id") if isinstance(body, dict) else None
    listen = body.get("listen") if isinstance(body, dict) else None
    if (not isinstance(client_id, str) or not CLIENT_ID.fullmatch(client_id)
            or not isinstance(listen, bool)):
        raise Refused(400, "expected {\"client_id\": the websocket's client id (letters, "
                           "digits, - or _; at most 64), \"listen\": true or false}")
    return client_id, listen


def check_owner(client_id: str, listen: bool, peer, sockets: dict) -> None:
    """Listening needs an open websocket of that id, opened by the same peer."""
    if listen and client_id not in sockets:
        raise Refused(409, "client_id: no ComfyUI websocket is open with this id (connect "
                           "/ws?clientId=… first)")
    owner = socket_peer(sockets.get(client_id))
    if listen and owner is not None and peer is not None and owner != peer:
        raise Refused(403, "client_id: the websocket with this id belongs to another peer")


def socket_peer(ws) -> str | None:
    """The peer address of one of ComfyUI's websockets, where aiohttp keeps its request."""
    return getattr(getattr(ws, "_req", None), "remote", None)


def mount() -> bool:
    """Add ``POST /sailfish/live`` to ComfyUI's server (before its app starts); False outside
    ComfyUI."""
    server = host.prompt_server()
    if server is None:
        return False
    if not getattr(server, "sailfish_live_route", False):  # once, whichever copy comes first
        server.routes.route("POST", ROUTE)(set_listening)
        server.sailfish_live_route = True
    return True
