"""Who may call the routes: checks on the ``Host`` a request names, the page it comes from and the
peer it comes from, made before a handler reads the body (anchor: Jupyter's Host and Origin
checks).

* **Host** (against DNS rebinding: a page on ``evil.example`` whose name is made to resolve to
  127.0.0.1 reaches the server with ``Host: evil.example``, and its requests are same-origin to
  the browser). Accepted: the loopback names (``localhost``, ``127.0.0.1``, ``[::1]``, any port),
  the names the operator allows (``--allowed-hosts``), the bound address, and, when bound to
  every address (``0.0.0.0``, ``::``), any IP literal (an IP cannot be rebound). ``*`` turns the
  check off. A request without ``Host`` (HTTP/1.0 tools) is not from a browser and passes.
* **Origin** (against cross-site requests from a page the user has open): a request whose
  ``Origin`` is not the server's own, or whose ``Sec-Fetch-Site`` is other than ``same-origin``
  or ``none``, is refused, unless the operator allowed that origin (on ComfyUI: its
  ``--enable-cors-header``). Clients that are not browsers (curl, the openai SDK, our remote
  client) send neither and pass.
* **Loopback peers**: without an API key, the routes that change the voice library answer only
  to peers on this machine.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from ...access import is_loopback
from .errors import ApiError

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"", "0.0.0.0", "::"})
SAME_ORIGIN_FETCH = ("same-origin", "none")
DEFAULT_PORTS = {"http": 80, "https": 443}


def split_host(value: str) -> tuple[str, int | None]:
    """``Host``-header syntax → (lower-case name without brackets or trailing dot, port)."""
    value = value.strip().lower()
    port = None
    if value.startswith("["):  # [::1]:8080
        name, _, rest = value[1:].partition("]")
        if rest.startswith(":") and rest[1:].isdigit():
            port = int(rest[1:])
    elif value.count(":") == 1:
        name, _, tail = value.partition(":")
        port = int(tail) if tail.isdigit() else None
    else:
        name = value
    return name.rstrip("."), port


def is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Guard:
    """The Host and Origin rules of one server. ``hint`` says how an operator allows a name."""

    hosts: frozenset = LOOPBACK_NAMES  # names (lower case, no port) the server answers to
    any_ip: bool = False  # bound to every address: any IP literal is the machine's own
    any_host: bool = False  # --allowed-hosts '*': no Host check
    origins: frozenset = frozenset()  # other origins the operator allows ("*": any)
    hint: str = "start the server with --allowed-hosts NAME"

    @classmethod
    def for_bind(cls, bind: str, allowed=(), origins=(), hint: str | None = None) -> "Guard":
        """The rules for a server bound to ``bind`` (an address, or several separated by commas)
        with the operator's ``allowed`` names and ``origins``."""
        names = {split_host(n)[0] for n in allowed if n.strip() and n.strip() != "*"}
        binds = {b.strip().strip("[]").lower() for b in (bind or "").split(",")}
        names |= binds - WILDCARDS
        kwargs = {"hint": hint} if hint else {}
        return cls(frozenset(LOOPBACK_NAMES | names), any_ip=bool(binds & WILDCARDS),
                   any_host=any(n.strip() == "*" for n in allowed),
                   origins=frozenset(o.strip().rstrip("/").lower() for o in origins if o.strip()),
                   **kwargs)

    def check(self, headers) -> None:
        """Raise a 403 ``ApiError`` for a foreign Host or a cross-site request."""
        self.check_host(headers.get("Host"))
        self.check_origin(headers.get("Origin"), headers.get("Sec-Fetch-Site"),
                          headers.get("Host"))

    def check_host(self, host: str | None) -> None:
        if host is None or self.any_host:
            return
        name, _ = split_host(host)
        if name in self.hosts or (self.any_ip and is_ip(name)):
            return
        raise ApiError(403, f"host: {shorten(host)!r} is not a name this server answers to "
                            f"(a DNS-rebinding guard); {self.hint}", "host", "forbidden_host")

    def check_origin(self, origin: str | None, fetch_site: str | None, host: str | None) -> None:
        if origin is not None and ("*" in self.origins
                                   or origin.strip().rstrip("/").lower() in self.origins):
            return
        if fetch_site is not None and fetch_site.strip().lower() not in SAME_ORIGIN_FETCH:
            raise ApiError(403, f"origin: a {shorten(fetch_site)} request from a web page is not "
                                "accepted; call the API from a program, or from a page this "
                                "server serves", "origin", "cross_origin")
        if origin is None:
            return
        if host is None or not same_origin(origin, host):
            raise ApiError(403, f"origin: requests from the page at {shorten(origin)!r} are not "
                                "accepted (cross-origin); call the API from a program",
                           "origin", "cross_origin")


def same_origin(origin: str, host: str) -> bool:
    """Whether ``Origin`` names the same host and port as ``Host``."""
    try:
        parts = urlsplit(origin.strip())
        origin_port = parts.port or DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        return False
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return False  # "null" (sandboxed frames, file: pages) and other schemes
    name, port = split_host(host)
    return parts.hostname.rstrip(".") == name and origin_port == (
        port or DEFAULT_PORTS[parts.scheme])


def require_loopback_peer(remote: str | None, what: str) -> None:
    """Without an API key, ``what`` is only for peers on this machine."""
    if not is_loopback(remote):
        raise ApiError(403, f"{what} is accepted only from this machine unless the server has an "
                            "API key (set SAILFISH_SERVE_API_KEY)", None, "loopback_only")


def shorten(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
