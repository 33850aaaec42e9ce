"""Where a remote engine's API key comes from: an environment variable or a key file, never a
command-line value or a ComfyUI widget (both end up in shell history or saved workflows).

Who names the variable or file is the operator: the CLI's user, a script's author, or the
endpoints file (``endpoints.py``) for ComfyUI, never a workflow. Reading and checking a key is
``fish_core.access`` (the one key reader ``serve`` uses too); errors never quote the key."""

from __future__ import annotations

from ..access import read_key_env, read_key_file

DEFAULT_ENV = "SAILFISH_REMOTE_API_KEY"


def read_api_key(key_file: str | None = None, key_env: str | None = None) -> str | None:
    """The key from ``key_file`` (first line), else from the variable ``key_env`` (default
    ``SAILFISH_REMOTE_API_KEY``, which may be unset: no key). A named but missing file or
    variable is an error naming it."""
    if key_file:
        return read_key_file(key_file, "api key file")
    return read_key_env(key_env or DEFAULT_ENV, f"api key env {key_env or DEFAULT_ENV}",
                        required=bool(key_env))
