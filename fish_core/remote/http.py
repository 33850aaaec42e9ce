"""HTTP to one or more engine endpoints (stdlib ``http.client`` only): connect and read
timeouts, requests spread round-robin over the endpoints, bounded retries with exponential
backoff on connection errors, timeouts and 5xx (each retry on the next endpoint, so a dead
replica is failed over), and a clear ``RemoteError`` naming the endpoint and the server's own
message on 4xx. A real deployment puts a load balancer in front; this is the client-side
fallback for a handful of replicas.

A request's response is handed to a reader while the connection is open; ``cancel()`` is
polled per received chunk, and closes the connection (the engine sees the client leave)."""

from __future__ import annotations

import http.client
import itertools
import json
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable, TypeVar
from urllib.parse import urlsplit

from ..params import Cancelled

T = TypeVar("T")
RETRY_STATUSES = {500, 502, 503, 504}
CHUNK_BYTES = 1 << 15


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

    @classmethod
    def parse(cls, url: str) -> "Endpoint":
        if not isinstance(url, str) or not url.strip():
            raise ValueError(f"remote url must be an http(s) URL, got {url!r}")
        parts = urlsplit(url.strip().rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"remote url must look like http://host:port, got {url!r}")
        if parts.username or parts.password:
            raise ValueError("remote url: put no credentials in the URL (it is stored in "
                             "workflows and logs); give the API key by file or environment")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(url.strip().rstrip("/"), parts.scheme, parts.hostname, port, parts.path)


@dataclass(frozen=True)
class Timeouts:
    connect: float = 10.0  # seconds to open a connection
    read: float = 600.0  # seconds of silence allowed while waiting for response bytes


class Response:
    """An open response: ``read()`` pieces as they arrive (``b""`` at the end), ``lines()``."""

    def __init__(self, conn: http.client.HTTPConnection, raw: http.client.HTTPResponse,
                 where: str, cancel: Callable[[], bool] | None):
        self.conn, self.raw, self.where, self.cancel = conn, raw, where, cancel
        self.headers = raw.headers

    def check_cancel(self) -> None:
        if self.cancel is not None and self.cancel():
            self.conn.close()  # the engine sees its client go and stops generating
            raise Cancelled("cancelled")

    def read(self) -> bytes:
        self.check_cancel()
        return self.raw.read1(CHUNK_BYTES)

    def lines(self):
        while True:
            self.check_cancel()
            line = self.raw.readline()
            if not line:
                return
            yield line

    def body(self) -> bytes:
        data = bytearray()
        while piece := self.read():
            data += piece
        return bytes(data)


class Transport:
    def __init__(self, urls: str | list[str], api_key: str | None = None,
                 timeouts: Timeouts = Timeouts(), retries: int = 2, backoff: float = 0.5):
        if isinstance(urls, str):
            urls = [u for u in urls.replace(",", " ").split() if u]
        if not urls:
            raise ValueError("remote url: give at least one endpoint")
        self.endpoints = [Endpoint.parse(u) for u in urls]
        self.api_key = api_key
        self.timeouts = timeouts
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be an integer >= 0, got {retries!r}")
        self.retries = retries
        self.backoff = backoff
        self._next = itertools.count()
        self._lock = threading.Lock()

    def request(self, method: str, path: str, read: Callable[[Response], T], *,
                json_body: dict | None = None, body: bytes | None = None,
                content_type: str | None = None, cancel: Callable[[], bool] | None = None,
                endpoint: Endpoint | None = None) -> T:
        """Send the request and return ``read(response)`` of the first 2xx answer. Connection
        errors, timeouts and 5xx are retried (``retries`` times, at least once per endpoint)
        on the next endpoint after a backoff; 4xx raises at once."""
        if json_body is not None:
            body, content_type = json.dumps(json_body).encode(), "application/json"
        with self._lock:
            start = next(self._next)
        order = [endpoint] if endpoint is not None else \
            [self.endpoints[(start + i) % len(self.endpoints)] for i in range(len(self.endpoints))]
        attempts = max(self.retries + 1, len(order))
        failures = []
        for attempt in range(attempts):
            target = order[attempt % len(order)]
            if attempt:
                pause(self.backoff * 2 ** (attempt - 1), cancel)
            try:
                return self._once(target, method, path, body, content_type, read, cancel)
            except RemoteError as e:
                if e.status not in RETRY_STATUSES:
                    raise
                failures.append(str(e))
            except (OSError, http.client.HTTPException) as e:  # refused, reset, timed out
                failures.append(f"{target.url}{path}: {describe(e)}")
        raise RemoteError(f"every attempt failed ({attempts}): " + "; ".join(failures))

    def _once(self, target: Endpoint, method: str, path: str, body, content_type, read,
              cancel) -> T:
        kind = http.client.HTTPSConnection if target.scheme == "https" else \
            http.client.HTTPConnection
        conn = kind(target.host, target.port, timeout=self.timeouts.connect)
        where = f"{target.url}{path}"
        try:
            conn.connect()
            conn.sock.settimeout(self.timeouts.read)
            headers = {"Accept": "*/*"}
            if content_type:
                headers["Content-Type"] = content_type
            if self.api_key:
                headers["Authorization"] = f"Bearer {self.api_key}"
            conn.request(method, target.prefix + path, body=body, headers=headers)
            raw = conn.getresponse()
            if raw.status >= 400:
                message = server_message(raw.read(64 << 10))
                error = RemoteUserError if raw.status < 500 else RemoteError
                raise error(f"{where}: HTTP {raw.status}: {message}", raw.status)
            return read(Response(conn, raw, where, cancel))
        finally:
            conn.close()


def server_message(data: bytes) -> str:
    """The message of an error body in any engine's shape: OpenAI ``{"error": {"message"}}``,
    FastAPI ``{"detail"}``, fish-speech ``{"message"}``, or plain text."""
    text = data.decode("utf-8", "replace").strip()
    try:
        body = json.loads(text)
    except json.JSONDecodeError:
        return text[:500] or "(no message)"
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        for key in ("message", "detail", "error"):
            if body.get(key):
                value = body[key]
                return value if isinstance(value, str) else json.dumps(value)[:500]
    return text[:500]


def describe(error: Exception) -> str:
    if isinstance(error, socket.timeout):
        return "timed out"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def pause(seconds: float, cancel: Callable[[], bool] | None) -> None:
    """Sleep ``seconds``, waking to honour ``cancel``."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        if cancel is not None and cancel():
            raise Cancelled("cancelled")
        time.sleep(min(left, 0.05))
