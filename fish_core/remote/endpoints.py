"""Remote engines the operator configured, by name: what a ComfyUI workflow may pick.

A workflow is untrusted input (people share them), so it names an endpoint and nothing more:
where the engine is, which dialect it speaks and where its API key comes from are written by
the operator in an endpoints file (JSON)::

    {
      "endpoints": {
        "gpu-farm": {
          "urls": ["https://tts-1.example.com", "https://tts-2.example.com"],
          "dialect": "sglang-omni",
          "api_key_env": "GPU_FARM_API_KEY"
        },
        "workstation": {"urls": "http://127.0.0.1:8000", "dialect": "auto",
                        "api_key_file": "~/.config/sailfish/workstation.key",
                        "model": "s2-pro"}
      }
    }

* ``urls``: one URL or a list (several are spread and failed over).
* ``dialect``: ``auto`` (default) or one of ``fish_core.remote.DIALECTS``.
* ``api_key_env`` / ``api_key_file`` (at most one): where the key is read from when the client
  is made. Neither: no key. The key is sent only to these ``urls``' origins, never on a
  redirect, and over plain ``http://`` only to loopback hosts.
* ``model``: the model the engine should speak with, for engines that serve several (kept on
  the endpoint for the client's model choice).

The files read, in this order (a later file's entry replaces an earlier one of the same name):
``<ComfyUI user directory>/sailfish/endpoints.json`` when running in ComfyUI (outside the
``user/<name>/`` folders its web API can write), then the file named by ``SAILFISH_ENDPOINTS``.
A missing file is no error. Nothing is built in: ``local``, a key-less Sailfish ``serve`` on this
machine (``python -m fish_core serve``), is offered only when the operator enables it, and
``"local": {}`` does that with its defaults (http://127.0.0.1:8080, dialect ``sailfish``).
Until such an engine identified itself as Sailfish (its ``/v1/models``), its errors carry the
HTTP status alone (``http.Transport.needs_identity``): whatever answers on that port is never
quoted into a node error or the queue history.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..access import file_stamp
from .http import Endpoint

ENV_VAR = "SAILFISH_ENDPOINTS"
FILE_NAME = Path("sailfish") / "endpoints.json"  # under ComfyUI's user directory
OFF = "off"  # the Model Loader's "no remote engine": reserved, never an endpoint name
FIELDS = ("urls", "dialect", "api_key_env", "api_key_file", "model")
MAX_FILE_BYTES = 1 << 20
MAX_NAME = 64


@dataclass(frozen=True)
class EndpointConfig:
    """One configured engine. Holds where its key comes from, never the key."""

    name: str
    urls: tuple[str, ...]
    dialect: str = "auto"
    api_key_env: str | None = None
    api_key_file: str | None = None
    model: str | None = None

    def api_key(self) -> str | None:
        """The key, read now from where the operator said. Errors name the endpoint and the
        variable, never the key or the key file's path (node errors reach the queue history)."""
        from ..access import read_key_env, read_key_file

        if self.api_key_file:
            return read_key_file(self.api_key_file, f"endpoint {self.name!r}: its api_key_file "
                                 "(see the endpoints file)", show_path=False)
        if self.api_key_env:
            return read_key_env(self.api_key_env, f"endpoint {self.name!r}: its api_key_env "
                                f"{self.api_key_env}")
        return None

    def client(self, **options):
        """A ``RemoteSynthesizer`` on this endpoint (``options``: its keyword arguments)."""
        from .client import RemoteSynthesizer

        options.setdefault("model", self.model or None)  # the operator's choice, if any
        return RemoteSynthesizer(list(self.urls), self.dialect, self.api_key(), name=self.name,
                                 **options)


LOCAL = EndpointConfig("local", ("http://127.0.0.1:8080",), "sailfish")  # "local": {}
ENABLE_LOCAL = '{"endpoints": {"local": {}}}'


def default_files() -> list[tuple[Path, str]]:
    """The endpoints files looked for (see the module docstring), each with how errors name
    it (no absolute path: node errors reach the queue history)."""
    files = []
    user_dir = comfy_user_directory()
    if user_dir is not None:
        files.append((Path(user_dir) / FILE_NAME, f"<user directory>/{FILE_NAME.as_posix()}"))
    if os.environ.get(ENV_VAR, "").strip():
        files.append((Path(os.environ[ENV_VAR].strip()).expanduser(), f"${ENV_VAR}"))
    return files


def comfy_user_directory() -> str | None:
    """ComfyUI's user directory, when running inside ComfyUI."""
    import sys

    folder_paths = sys.modules.get("folder_paths")
    get = getattr(folder_paths, "get_user_directory", None)
    return get() if callable(get) else None


def load(files: list[Path] | None = None) -> dict[str, EndpointConfig]:
    """The configured endpoints by name, every file's in order (``local`` only if enabled).
    Each file is parsed once per change (``PARSED``; ``access.file_stamp``: one ``stat`` per
    call tells whether it changed), so the several look-ups of one prompt read it once."""
    found: dict[str, EndpointConfig] = {}
    named = default_files() if files is None else [(Path(f), str(f)) for f in files]
    for path, label in named:
        if not path.is_file():
            continue
        seen = file_stamp(path)
        kept = PARSED.get(str(path))
        if seen is None or kept is None or kept[0] != (label, seen):
            kept = PARSED[str(path)] = ((label, seen), read_file(path, label))
            global parses
            parses += 1
        found.update(kept[1])
    return found


PARSED: dict[str, tuple[tuple, dict[str, EndpointConfig]]] = {}  # path → (its stamp, endpoints)
parses = 0  # files parsed (tests count the memo)


def read_file(path: Path, label: str | None = None) -> dict[str, EndpointConfig]:
    """The endpoints of one file; a mistake is a ``ValueError`` naming the file (``label``)
    and the field."""
    where = f"endpoints file {label or path}"
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ValueError(f"{where}: larger than {MAX_FILE_BYTES} bytes")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as e:
        raise ValueError(f"{where}: not valid JSON ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("endpoints"), dict):
        raise ValueError(f'{where}: expected an object {{"endpoints": {{name: {{...}}}}}}')
    return {name: parse(name, entry, where) for name, entry in data["endpoints"].items()}


def parse(name: str, entry, where: str) -> EndpointConfig:
    check_name(name, where)
    field = f"{where}: endpoints.{name}"
    if not isinstance(entry, dict):
        raise ValueError(f"{field}: expected an object with {', '.join(FIELDS)}")
    unknown = sorted(set(entry) - set(FIELDS))
    if unknown:
        raise ValueError(f"{field}: unknown field(s) {', '.join(unknown)}; expected "
                         f"{', '.join(FIELDS)}")
    if name == LOCAL.name:  # "local": {} enables the local serve with its defaults
        entry = {"urls": list(LOCAL.urls), "dialect": LOCAL.dialect, **entry}
    urls = parse_urls(entry.get("urls"), field)
    dialect = parse_dialect(entry.get("dialect", "auto"), field)
    for key in ("api_key_env", "api_key_file", "model"):
        if entry.get(key) is not None and (not isinstance(entry[key], str)
                                           or not entry[key].strip()):
            raise ValueError(f"{field}.{key}: expected a non-empty string")
    if entry.get("api_key_env") and entry.get("api_key_file"):
        raise ValueError(f"{field}: give api_key_env or api_key_file, not both")
    return EndpointConfig(name, urls, dialect, entry.get("api_key_env"),
                          entry.get("api_key_file"), entry.get("model"))


def check_name(name: str, where: str) -> None:
    """An endpoint's name: printable, not padded, not too long, not ``off``."""
    if not name or len(name) > MAX_NAME or not name.isprintable() or name.strip() != name:
        raise ValueError(f"{where}: endpoint name {name!r} must be 1-{MAX_NAME} printable "
                         "characters without leading or trailing spaces")
    if name == OFF:
        raise ValueError(f"{where}: {OFF!r} is reserved (the Model Loader's local mode)")


def parse_urls(urls, field: str) -> tuple[str, ...]:
    """``urls``: one URL, several separated by commas or spaces, or a list; each checked."""
    if isinstance(urls, str):
        urls = urls.replace(",", " ").split()
    if not isinstance(urls, list) or not urls or not all(isinstance(u, str) for u in urls):
        raise ValueError(f"{field}.urls: expected a URL or a list of URLs")
    for url in urls:
        Endpoint.parse(url)  # a bad URL fails here, naming it
    return tuple(urls)


def parse_dialect(dialect, field: str) -> str:
    """``dialect``: ``auto`` or one of the remote dialects."""
    from .dialects import DIALECTS

    if dialect != "auto" and dialect not in DIALECTS:
        raise ValueError(f"{field}.dialect: expected auto or one of {', '.join(DIALECTS)}, "
                         f"got {dialect!r}")
    return dialect


def choices() -> list[str]:
    """The names a workflow may pick: ``off``, then ``local`` and the configured ones. A
    broken file is reported when the loader runs; here it only hides its entries."""
    try:
        names = list(load())
    except (OSError, ValueError):
        names = []
    return [OFF, *names]


def find(name: str) -> EndpointConfig:
    """The endpoint ``name``; an unknown name is an error listing the configured ones."""
    configured = load()
    if name not in configured:
        if "://" in str(name):
            raise ValueError(
                "remote: this workflow names an engine by URL, which the Model Loader no "
                "longer takes (a shared workflow could send your API keys anywhere). Add the "
                f"engine to the endpoints file and pick its name; configured: "
                f"{', '.join(configured)}")
        hint = (f"; the local Sailfish serve is offered only when the operator enables it "
                f"in the endpoints file: {ENABLE_LOCAL}") if name == LOCAL.name else ""
        raise ValueError(f"remote: no endpoint named {str(name)[:MAX_NAME]!r}; configured: "
                         f"{', '.join(configured) or 'none'} (add it to the endpoints file)"
                         f"{hint}")
    return configured[name]
