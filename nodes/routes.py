"""The HTTP API on ComfyUI's own server, under ``/sailfish`` (``/sailfish/v1/audio/speech``,
``/sailfish/v1/tts`` … and, as ComfyUI mirrors every route, ``/api/sailfish/v1/…``).

The model is the one the nodes share: loaded lazily through the model manager on the first
request (so ComfyUI counts it, and "Free memory" frees it; the next request loads it again).
Voices are the ``fish_speech_voices`` folder Voice Save writes. Settings, by environment:

* ``SAILFISH_SERVE_MODEL``: a checkpoint as the Model Loader lists it (or a folder); default
  the first local checkpoint.
* ``SAILFISH_SERVE_PRECISION`` (auto), ``SAILFISH_SERVE_QUANTIZATION`` (none).
* ``SAILFISH_SERVE_API_KEY``: require ``Authorization: Bearer <key>``. Without it, reading routes
  answer anyone who reaches ComfyUI (as ComfyUI's own routes do), and voice add/rename/delete
  answer only peers on this machine.
* ``SAILFISH_SERVE_ALLOWED_HOSTS``: Host names (comma separated) the routes answer to besides the
  loopback names, the addresses ComfyUI listens on and, with ``--listen`` on every address, any
  IP literal (a DNS-rebinding guard; ``*`` turns it off).
* ``SAILFISH_SERVE=0``: do not mount the routes.

Requests from a web page of another origin are refused (ComfyUI's own frontend is same-origin),
unless ComfyUI was started with ``--enable-cors-header`` for that origin.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from pathlib import Path

from ..fish_core import access
from . import host, paths
from .manager import MANAGER, ModelHandle

PREFIX = "/sailfish"
KEY_ENV = "SAILFISH_SERVE_API_KEY"
log = logging.getLogger("sailfish")


def model_handle() -> ModelHandle:
    """The served model, from the environment (read at each load, so it can change). The
    folder a choice names is looked up once (``served_folder``), not per text batch."""
    return ModelHandle(str(served_folder(os.environ.get("SAILFISH_SERVE_MODEL", ""))),
                       precision=os.environ.get("SAILFISH_SERVE_PRECISION", "auto"),
                       quantization=os.environ.get("SAILFISH_SERVE_QUANTIZATION", "none"))


_FOUND: dict[str, Path] = {}  # SAILFISH_SERVE_MODEL → its checkpoint folder, as last found


def served_folder(choice: str) -> Path:
    """The checkpoint folder of ``choice`` (a folder, a combo name, or "" for the first local
    checkpoint). The model folders are scanned when a choice is first seen, or when the folder
    found for it is no longer a checkpoint; every round of the scheduler asks again."""
    from ..fish_core.loading import hub
    from ..fish_core.serve import ApiError, detail

    if choice and Path(choice).is_dir():
        return Path(choice)
    found = _FOUND.get(choice)
    if found is not None and hub.is_model_dir(found, codec=True):
        return found
    local = paths.local_models()
    if not choice and not local:
        raise ApiError(503, "no model: put a checkpoint folder into models/fish_speech or "
                            "set SAILFISH_SERVE_MODEL", code="model_not_found")
    try:
        folder = paths.resolve_model(choice or next(iter(local)))
    except (ValueError, FileNotFoundError) as e:
        raise ApiError(503, f"SAILFISH_SERVE_MODEL: {detail(e)}",
                       code="model_not_found") from None
    _FOUND[choice] = folder
    return folder


def served_name(choice: str) -> str:
    """The model id ``/v1/models`` and ``/v1/health`` report, and requests may name: the
    checkpoint ``choice`` (``SAILFISH_SERVE_MODEL``) names as the Model Loader lists it, else
    the first local checkpoint; looked up without loading or downloading anything."""
    if choice.endswith(paths.DOWNLOAD):
        return choice[: -len(paths.DOWNLOAD)]
    if choice:
        return Path(choice).name if Path(choice).is_dir() else choice
    return next(iter(paths.local_models()), "s2-pro")


def guard():
    """The Host and Origin rules, from ComfyUI's ``--listen`` and ``--enable-cors-header`` and
    ``SAILFISH_SERVE_ALLOWED_HOSTS`` (listening on every address when ComfyUI's arguments are
    not known)."""
    from ..fish_core.serve import Guard

    args = getattr(host.module("comfy.cli_args"), "args", None)
    listen = getattr(args, "listen", None) or "0.0.0.0"
    cors = getattr(args, "enable_cors_header", None)
    allowed = os.environ.get("SAILFISH_SERVE_ALLOWED_HOSTS", "").split(",")
    return Guard.for_bind(listen, allowed, [cors] if isinstance(cors, str) else [],
                          hint="list it in SAILFISH_SERVE_ALLOWED_HOSTS to answer to it")


def build_service(manager=MANAGER):
    from ..fish_core.serve import Service

    @contextmanager
    def model():
        with manager.use(model_handle()) as synth:
            yield synth

    name = served_name(os.environ.get("SAILFISH_SERVE_MODEL", ""))
    # the one key reader serve and remote share: a key that cannot be a header value is refused
    key = access.read_key_env(KEY_ENV, KEY_ENV, required=False)
    return Service(model, paths.roots(paths.VOICES), model_name=name, api_key=key,
                   loaded=lambda: bool(manager.loaded()), guard=guard())


def mount() -> bool:
    """Add the routes to ComfyUI's PromptServer (before its app starts); False when there is
    no ComfyUI server or serving is switched off."""
    server = host.module("server")
    instance = getattr(getattr(server, "PromptServer", None), "instance", None)
    if instance is None or os.environ.get("SAILFISH_SERVE", "1") == "0":
        return False
    from ..fish_core import serve

    try:
        serve.mount(instance.routes, build_service(), PREFIX)
    except ImportError as e:  # aiohttp comes with ComfyUI; say so rather than fail the pack
        log.warning("Sailfish: HTTP API not mounted (%s)", e)
        return False
    except ValueError as e:  # a key that is set but unusable: never serve without it
        log.warning("Sailfish: HTTP API not mounted (%s)", e)
        return False
    log.info("Sailfish: HTTP API at %s/v1 (OpenAI speech, fish-speech tts, voices)", PREFIX)
    return True
