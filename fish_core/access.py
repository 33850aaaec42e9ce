"""Who and what is trusted, the rules ``serve`` and ``remote`` share: which names are this machine
(``is_loopback``) and how an API key is read (``read_key_file``, ``read_key_env``, ``check_key``).
A leaf: it imports nothing of the pack.

**Loopback.** A literal name only, never a DNS lookup (a name that resolves to 127.0.0.1 today
may not tomorrow): ``localhost`` and ``localhost.`` (the same name written fully qualified; RFC
6761 reserves it for this machine), any case, brackets allowed; the IPv4 loopback block
``127.0.0.0/8``, ``::1``, and IPv4 loopback written as an IPv4-mapped IPv6 address
(``::ffff:127.0.0.1``: what a dual-stack socket reports for an IPv4 peer). Not loopback: any other
name, ``*.localhost`` (resolvers differ), ``0.0.0.0``, ``::``.

**Keys.** A key is one line of printable ASCII without spaces, at most ``MAX_KEY_CHARS`` (an HTTP
header value). A key file holds the key on its first line and is at most ``MAX_KEY_FILE_BYTES``:
a bigger file is refused, not truncated (it is not a key file; the wrong path was given).
Errors name ``source`` (the option, variable or endpoint) and never the key.
"""

from __future__ import annotations

import ipaddress
import os
import time
from pathlib import Path

MAX_KEY_CHARS = 1024
MAX_KEY_FILE_BYTES = 4096
LOOPBACK_NAMES = ("localhost", "localhost.")


def is_loopback(name: str | None) -> bool:
    """Whether ``name`` (a host name or address, with or without brackets) is this machine."""
    if not name:
        return False
    name = name.strip().strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or bool(mapped and mapped.is_loopback)


def file_stamp(path: str | os.PathLike) -> tuple | None:
    """What changes when a file is written again or replaced (None: no file), for memos of
    files read from disk (the endpoints file, saved voices). A file whose modification time is
    within ``RACY_SECONDS`` of now is never trusted unchanged (file times tick coarsely: a
    rewrite of the same size in the same tick would look the same), as git treats its index."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    if time.time_ns() - info.st_mtime_ns < RACY_SECONDS * 1e9:
        return None
    return info.st_size, info.st_mtime_ns, info.st_ino, info.st_ctime_ns


RACY_SECONDS = 2


def check_key(key: str, source: str) -> str:
    """``key`` if it can be an HTTP header value; else an error naming ``source``, not the key."""
    if not key or len(key) > MAX_KEY_CHARS or not all(33 <= ord(c) < 127 for c in key):
        raise ValueError(f"{source}: the API key must be one line of printable ASCII without "
                         f"spaces (at most {MAX_KEY_CHARS} characters)")
    return key


def read_key_file(path: str | os.PathLike, source: str, *, show_path: bool = True) -> str:
    """The key on the first line of the file at ``path``. ``show_path=False`` keeps the path out
    of the errors (an endpoint's key file: node errors reach ComfyUI's queue history)."""
    file = Path(path).expanduser()
    where = f"{source}: {file}" if show_path else source
    try:
        with open(file, "rb") as f:
            data = f.read(MAX_KEY_FILE_BYTES + 1)  # never read a huge file whole
    except OSError:
        raise ValueError(f"{where} is missing, not a file or unreadable") from None
    if len(data) > MAX_KEY_FILE_BYTES:
        raise ValueError(f"{where} is larger than a key file ({MAX_KEY_FILE_BYTES} bytes at "
                         "most)")
    lines = data.decode("utf-8", "replace").strip().splitlines()
    if not lines or not lines[0].strip():
        raise ValueError(f"{where} is empty")
    return check_key(lines[0].strip(), source)


def read_key_env(name: str, source: str, *, required: bool = True) -> str | None:
    """The key in the environment variable ``name``; unset or blank is an error when
    ``required``, else no key."""
    value = os.environ.get(name, "").strip()
    if not value:
        if required:
            raise ValueError(f"{source}: the environment variable {name} is not set")
        return None
    return check_key(value, source)
