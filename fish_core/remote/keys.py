"""Where a remote engine's API key comes from: an environment variable or a key file, never a
command-line value or a ComfyUI widget (both end up in shell history or saved workflows).

Who names the variable or file is the operator: the CLI's user, a script's author, or the
endpoints file (``endpoints.py``) for ComfyUI, never a workflow. A key must be printable ASCII
without spaces (an HTTP header value); errors never quote it."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_ENV = "SAILFISH_REMOTE_API_KEY"


def read_api_key(key_file: str | None = None, key_env: str | None = None) -> str | None:
    """The key from ``key_file`` (first line), else from the variable ``key_env`` (default
    ``SAILFISH_REMOTE_API_KEY``, which may be unset: no key). A named but missing file or
    variable is an error naming it."""
    if key_file:
        path = Path(key_file).expanduser()
        if not path.is_file():
            raise ValueError(f"api key file: {path} is not a file")
        with open(path, "rb") as f:
            head = f.read(MAX_KEY_BYTES)  # a key is short; never read a huge file whole
        key = head.decode("utf-8", "replace").strip().splitlines()
        if not key or not key[0].strip():
            raise ValueError(f"api key file: {path} is empty")
        return check_key(key[0].strip(), f"api key file {path}")
    name = key_env or DEFAULT_ENV
    value = os.environ.get(name, "").strip()
    if key_env and not value:
        raise ValueError(f"api key env: the environment variable {name} is not set")
    return check_key(value, f"api key env {name}") if value else None


MAX_KEY_BYTES = 4096


def check_key(key: str, source: str) -> str:
    """``key`` if it can be an HTTP header value; else an error naming ``source``, not the key."""
    if len(key) > 1024 or not all(33 <= ord(c) < 127 for c in key):
        raise ValueError(f"{source}: the API key must be one line of printable ASCII without "
                         "spaces (at most 1024 characters)")
    return key
