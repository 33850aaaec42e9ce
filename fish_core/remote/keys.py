"""Where a remote engine's API key comes from: an environment variable or a key file, never a
command-line value or a ComfyUI widget (both end up in shell history or saved workflows)."""

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
        key = path.read_text(encoding="utf-8").strip().splitlines()
        if not key or not key[0].strip():
            raise ValueError(f"api key file: {path} is empty")
        return key[0].strip()
    name = key_env or DEFAULT_ENV
    value = os.environ.get(name, "").strip()
    if key_env and not value:
        raise ValueError(f"api key env: the environment variable {name} is not set")
    return value or None
