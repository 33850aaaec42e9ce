"""HTTP to one or more engine endpoints (stdlib ``http.client`` only): connect and read
timeouts, requests spread round-robin over the endpoints, bounded retries with exponential
backoff on connection errors, timeouts and 5xx (each retry on the next endpoint, so a dead
replica is failed over), and a clear ``RemoteError`` naming the endpoint and the server's own
message on 4xx. A real deployment puts a load balancer in front; this is the client-side
fallback for a handful of replicas.

A request's response is handed to a reader while the connection is open; ``cancel()`` is
polled per received chunk, and closes the connection (the engine sees the client leave).

What a server can make the client do is bounded:

* The API key is bound to the origins (scheme, host, port) of the endpoints it was given for,
  and sent over plain ``http://`` only to loopback hosts. Redirects are never followed (a 3xx
  is an error), so the key never travels to another origin.
* Every answer has a byte budget (``limit``): a speech request's is what its frames can
  produce, anything else's ``MAX_ANSWER_BYTES``; reading stops with an error beyond it. Lines
  of an event stream are at most ``MAX_LINE_BYTES`` (``pcm.bounded_lines``); header lines and counts
  are ``http.client``'s own
  limits (64 KiB, 100 headers).
* Server text reaches an error only through one bounded quoter (``Transport.quote`` and
  ``quote_names``: at most ``MAX_QUOTE`` characters, control characters removed; a list as its
  first ``MAX_NAMES`` names and a count), and only from an engine that may be quoted: one that
  speaks the ``sailfish`` dialect (the ``local`` endpoint, for one) must first identify itself
  as a Sailfish ``serve`` (its ``/v1/models`` owned by ``sailfish``), else its errors carry the
  HTTP status alone (so a program that happens to answer on that port is never reflected).
  An endpoint is named by its label (its configured name, when it has one), never by URL when
  it has a name."""

from __future__ import annotations

import http.client
import itertools
import json
import logging
import re
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable, TypeVar
from urllib.parse import urlsplit

from ..access import is_loopback
from ..params import Cancelled

T = TypeVar("T")
log = logging.getLogger("sailfish.remote")
RETRY_STATUSES = {500, 502, 503, 504}
# A replica that cannot serve until someone restarts it (vLLM-Omni: "Stage-0 has no live
# replica", while its /v1/models still answers 200; a streamed request gets a 200 whose body
# breaks before its first byte instead): taken out of the rotation.
DEAD_REPLICA = re.compile(r"no live replica|no routable (upstream|worker)", re.IGNORECASE)
DOWN_SECONDS = 30.0  # how long a replica marked down is tried only after the others
PROBE_SECONDS = 5.0  # how often a down replica's /ready (a router's) is asked, at most
READY_TIMEOUT = 2.0  # seconds for that question
WORKER_HEADER = "X-SGLang-Omni-Worker"  # which worker behind sgl-omni-router answered
CHUNK_BYTES = 1 << 15
MAX_ANSWER_BYTES = 4 << 20  # an answer other than audio (voice lists, model lists)
MAX_LINE_BYTES = 8 << 20  # one SSE or JSON line (an SSE line may carry a base64 audio chunk)
MAX_ERROR_BYTES = 16 << 10  # read of an error answer's body
MAX_QUOTE = 200  # characters of server text quoted in an error
MAX_NAMES = 5  # names of a server's list quoted in an error (then a count)
MAX_NAME_QUOTE = 60  # characters of one such name
UNSHOWN = "(its message is not shown: this engine has not identified itself as Sailfish)"


class RemoteError(RuntimeError):
    """A remote engine refused or failed a request (the message names the endpoint)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class RemoteUserError(RemoteError, ValueError):
    """A 4xx: the request itself is wrong (a ValueError, like every user mistake of ours)."""


@dataclass(frozen=True)
class Endpoint:
    url: str  # as given, without a trailing slash
    scheme: str
    host: str
    port: int
    prefix: str  # path before /v1/…, usually ""
    label: str = ""  # how errors name it: the configured name, else the URL

    @property
    def origin(self) -> tuple[str, str, int]:
        return self.scheme, self.host.lower(), self.port

    @property
    def name(self) -> str:
        return self.label or self.url

    @classmethod
    def parse(cls, url: str, label: str = "") -> "Endpoint":
        if not isinstance(url, str) or not url.strip():
            raise ValueError(f"remote url must be an http(s) URL, got {url!r}")
        parts = urlsplit(url.strip().rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"remote url must look like http://host:port, got {url!r}")
        if parts.username or parts.password:
            raise ValueError("remote url: put no credentials in the URL (it is stored in "
                             "workflows and logs); give the API key by file or environment")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise ValueError(f"remote url {url!r}: the port is not a number in 1-65535") from None
        return cls(url.strip().rstrip("/"), parts.scheme, parts.hostname, port, parts.path,
                   label)


class Credential:
    """An API key and the origins it may be sent to: those of the endpoints it was given for,
    over https, or over plain http to a loopback host only."""

    def __init__(self, key: str, endpoints: list[Endpoint]):
        for e in endpoints:
            if e.scheme == "http" and not is_loopback(e.host):
                raise ValueError(
                    f"remote {e.name}: refusing to send the API key over plain http to "
                    f"{e.host} (anyone on the way could read it). Use https://, or a loopback "
                    "address (127.0.0.1, localhost) for an engine on this machine.")
        self.key = key
        self.origins = frozenset(e.origin for e in endpoints)

    def header(self, target: Endpoint) -> dict[str, str]:
        """The Authorization header for ``target`` (none for an origin the key is not bound to)."""
        if target.origin not in self.origins:
            return {}
        return {"Authorization": f"Bearer {self.key}"}


@dataclass(frozen=True)
class Timeouts:
    connect: float = 10.0  # seconds to open a connection
    read: float = 600.0  # seconds of silence allowed while waiting for response bytes


class Response:
    """An open response: ``read()`` pieces as they arrive (``b""`` at the end), ``body()``."""

    def __init__(self, conn: http.client.HTTPConnection, raw: http.client.HTTPResponse,
                 where: str, cancel: Callable[[], bool] | None, limit: int = MAX_ANSWER_BYTES,
                 quoter: Callable[[str], str] | None = None):
        self.conn, self.raw, self.where, self.cancel = conn, raw, where, cancel
        self.quote = quoter or quote  # how this engine's text may be quoted
        self.headers = raw.headers
        self.limit = limit  # most body bytes this answer may have
        self.received = 0

    def check_cancel(self) -> None:
        if self.cancel is not None and self.cancel():
            self.conn.close()  # the engine sees its client go and stops generating
            raise Cancelled("cancelled")

    def _count(self, piece: bytes) -> bytes:
        self.received += len(piece)
        if self.received > self.limit:
            self.conn.close()
            raise RemoteError(f"{self.where}: the answer is larger than this request can "
                              f"produce ({self.limit} bytes); stopped reading it")
        return piece

    def read(self) -> bytes:
        self.check_cancel()
        piece = self.raw.read1(min(CHUNK_BYTES, self.limit - self.received + 1))
        if not piece and self.raw.length:  # closed before its Content-Length: a short answer
            raise http.client.IncompleteRead(b"", self.raw.length)
        return self._count(piece)

    def body(self) -> bytes:
        data = bytearray()
        while piece := self.read():
            data += piece
        return bytes(data)


class Transport:
    def __init__(self, urls: str | list[str], api_key: str | None = None,
                 timeouts: Timeouts = Timeouts(), retries: int = 2, backoff: float = 0.5,
                 name: str | None = None):
        """``name``: the configured endpoint's name, used in errors instead of its URLs."""
        if isinstance(urls, str):
            urls = [u for u in urls.replace(",", " ").split() if u]
        if not urls:
            raise ValueError("remote url: give at least one endpoint")
        self.endpoints = [Endpoint.parse(u, endpoint_label(name, i, len(urls)))
                          for i, u in enumerate(urls)]
        self.credential = Credential(api_key, self.endpoints) if api_key else None
        self.timeouts = timeouts
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be an integer >= 0, got {retries!r}")
        self.retries = retries
        self.backoff = backoff
        self._next = itertools.count()
        self._lock = threading.Lock()
        self.down: dict[str, float] = {}  # endpoint url → until when it is tried last
        self.probed: dict[str, float] = {}  # endpoint url → when its /ready was last asked
        self.needs_identity = False  # quote this engine only once it identified itself
        self.identified = False  # its /v1/models said Sailfish
        self.models_answer = None  # its /v1/models, read once (dialects.models_answer)

    @property
    def name(self) -> str:
        """How errors name the engine: its configured name, else its URL(s)."""
        return self.endpoints[0].label or " ".join(e.url for e in self.endpoints)

    @property
    def shows_text(self) -> bool:
        return self.identified or not self.needs_identity

    def quote(self, text) -> str:
        """This engine's text as an error may carry it (``quote``), or nothing of it."""
        return quote(text) if self.shows_text else UNSHOWN

    def quote_names(self, names) -> str:
        """The first ``MAX_NAMES`` of this engine's ``names`` and a count (``quote_names``)."""
        return quote_names(names) if self.shows_text else UNSHOWN

    def request(self, method: str, path: str, read: Callable[[Response], T], *,
                json_body: dict | None = None, body: bytes | None = None,
                content_type: str | None = None, cancel: Callable[[], bool] | None = None,
                endpoint: Endpoint | None = None, limit: int = MAX_ANSWER_BYTES) -> T:
        """Send the request and return ``read(response)`` of the first 2xx answer (at most
        ``limit`` body bytes). Connection errors, timeouts and 5xx are retried (``retries``
        times, at least once per endpoint) on the next endpoint after a backoff; 4xx and 3xx
        raise at once."""
        if json_body is not None:
            body, content_type = json.dumps(json_body).encode(), "application/json"
        order = [endpoint] if endpoint is not None else self.order()
        attempts = max(self.retries + 1, len(order))
        failures = []
        for attempt in range(attempts):
            target = order[attempt % len(order)]
            if attempt:
                pause(self.backoff * 2 ** (attempt - 1), cancel)
            try:
                return self._once(target, method, path, body, content_type, read, cancel,
                                  limit)
            except (RemoteError, OSError, http.client.HTTPException) as e:
                failures.append(self._retryable(target, path, e))
        raise RemoteError(f"every attempt failed ({attempts}): " + "; ".join(failures))

    def _retryable(self, target: Endpoint, path: str, error: Exception) -> str:
        """A failed attempt's part of the final error, when another attempt may follow: an
        answer that is no 5xx (a 4xx, a 3xx) is raised at once; a connection refused, reset or
        timed out is retried, and a refusal marks the endpoint down."""
        if isinstance(error, RemoteError):
            if error.status not in RETRY_STATUSES:
                raise error
            return str(error)
        if isinstance(error, ConnectionRefusedError):
            self.mark_down(target, "refused the connection")
        return f"{target.name}{path}: {describe(error)}"

    def _once(self, target: Endpoint, method: str, path: str, body, content_type, read,
              cancel, limit: int) -> T:
        kind = (http.client.HTTPSConnection if target.scheme == "https" else
                http.client.HTTPConnection)
        conn = kind(target.host, target.port, timeout=self.timeouts.connect)
        try:
            conn.connect()
            conn.sock.settimeout(self.timeouts.read)
            conn.request(method, target.prefix + path, body=body,
                         headers=self._headers(target, content_type))
            raw = conn.getresponse()
            where = self._answered(target, path, raw)
            response = Response(conn, raw, where, cancel, limit, self.quote)
            try:
                return read(response)
            except (http.client.IncompleteRead, ConnectionResetError):
                if response.received == 0:  # a 200 that broke before its first byte: vLLM-Omni
                    # streaming after a stage crashed ("no live replica" once it had answered)
                    self.mark_down(target, "broke its answer before the first byte")
                raise
        finally:
            conn.close()

    def _headers(self, target: Endpoint, content_type) -> dict:
        headers = {"Accept": "*/*"}
        if content_type:
            headers["Content-Type"] = content_type
        if self.credential is not None:
            headers.update(self.credential.header(target))
        return headers

    def _answered(self, target: Endpoint, path: str, raw) -> str:
        """Where the answer came from (the worker behind a router, when it says); a redirect
        or an error status raised, naming it."""
        where = f"{target.name}{path}"
        worker = raw.getheader(WORKER_HEADER)
        if worker and self.shows_text:  # which worker behind a router answered
            where += f" (worker {quote(worker)[:MAX_NAME_QUOTE]})"
        if 300 <= raw.status < 400:  # never followed: the key stays with its origins
            raise RemoteUserError(
                f"{where}: HTTP {raw.status}, a redirect; redirects are not followed "
                "(the API key is bound to the configured URL). Configure the URL the "
                "engine really answers on.", raw.status)
        if raw.status >= 400:
            data = raw.read(MAX_ERROR_BYTES)
            message = server_message(data, self.quote)
            if raw.status >= 500 and DEAD_REPLICA.search(server_message(data)):
                self.mark_down(target, f"answered HTTP {raw.status}: no live replica")
            error = RemoteUserError if raw.status < 500 else RemoteError
            raise error(f"{where}: HTTP {raw.status}: {message}", raw.status)
        if worker:
            log.info("%s: HTTP %d", where, raw.status)
        return where

    # ------------------------------------------------------------------ health
    def order(self) -> list[Endpoint]:
        """The endpoints for the next request: round-robin, the ones marked down last (each
        back once its cool-down passed or, behind a router, once its ``/ready`` says so)."""
        with self._lock:
            start = next(self._next)
        turn = [self.endpoints[(start + i) % len(self.endpoints)]
                for i in range(len(self.endpoints))]
        down = [e for e in turn if self.is_down(e)]
        return [e for e in turn if e not in down] + down

    def mark_down(self, endpoint: Endpoint, why: str) -> None:
        """Take ``endpoint`` out of the rotation for ``DOWN_SECONDS`` (tried after the others)."""
        if len(self.endpoints) > 1:
            log.warning("%s %s: tried after the other URLs for %.0f s", endpoint.name, why,
                        DOWN_SECONDS)
        self.down[endpoint.url] = time.monotonic() + DOWN_SECONDS

    def is_down(self, endpoint: Endpoint) -> bool:
        until = self.down.get(endpoint.url)
        now = time.monotonic()
        if until is None or now >= until:
            self.down.pop(endpoint.url, None)
            return False
        if now - self.probed.get(endpoint.url, -PROBE_SECONDS) >= PROBE_SECONDS:
            self.probed[endpoint.url] = now
            if self.ready(endpoint):
                self.down.pop(endpoint.url, None)
                return False
        return True

    def ready(self, endpoint: Endpoint) -> bool | None:
        """What ``endpoint``'s ``GET /ready`` says (sgl-omni-router: 200 while a worker is
        routable, 503 while none is): True, False, or None where it has no ``/ready``."""
        kind = (http.client.HTTPSConnection if endpoint.scheme == "https" else
                http.client.HTTPConnection)
        conn = kind(endpoint.host, endpoint.port, timeout=READY_TIMEOUT)
        try:
            headers = {"Accept": "*/*"}
            if self.credential is not None:
                headers.update(self.credential.header(endpoint))
            conn.request("GET", endpoint.prefix + "/ready", headers=headers)
            status = conn.getresponse().status
        except (OSError, http.client.HTTPException):
            return False
        finally:
            conn.close()
        return True if status == 200 else (None if status in (404, 405) else False)


def endpoint_label(name: str | None, index: int, count: int) -> str:
    """How errors name the ``index``-th of ``count`` URLs of endpoint ``name`` (none: its URL)."""
    if not name:
        return ""
    return f"endpoint {name!r}" + (f" (url {index + 1} of {count})" if count > 1 else "")


def quote(text: str) -> str:
    """Server text as an error may quote it: control characters dropped, ``MAX_QUOTE``
    characters at most."""
    clean = "".join(c if c.isprintable() else " " for c in str(text))
    clean = " ".join(clean.split())
    return clean if len(clean) <= MAX_QUOTE else clean[:MAX_QUOTE - 1] + "…"


def quote_names(names) -> str:
    """A server's list in an error: its first ``MAX_NAMES`` names, each quoted short, and how
    many more (a list of 50,000 model names is one line)."""
    names = list(names)
    shown = ", ".join(repr(quote(str(n))[:MAX_NAME_QUOTE]) for n in names[:MAX_NAMES])
    more = len(names) - MAX_NAMES
    return shown + (f" and {more:,} more" if more > 0 else "")


def server_message(data: bytes, quote: Callable[[str], str] = quote) -> str:
    """The message of an error body in any engine's shape: OpenAI ``{"error": {"message"}}``,
    FastAPI ``{"detail"}``, fish-speech ``{"message"}``, or plain text; through ``quote``."""
    text = data.decode("utf-8", "replace").strip()
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):
        return quote(text) or "(no message)"
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return quote(error["message"])
        for key in ("message", "detail", "error"):
            if body.get(key):
                value = body[key]
                return quote(value if isinstance(value, str) else json.dumps(value))
    return quote(text)


def describe(error: Exception) -> str:
    if isinstance(error, socket.timeout):
        return "timed out"
    if isinstance(error, http.client.IncompleteRead):  # a cut chunked body, a short one
        return "the answer was cut off before its end (an incomplete transfer)"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def pause(seconds: float, cancel: Callable[[], bool] | None) -> None:
    """Sleep ``seconds``, waking to honour ``cancel``."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        if cancel is not None and cancel():
            raise Cancelled("cancelled")
        time.sleep(min(left, 0.05))
