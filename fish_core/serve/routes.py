"""The route table and what every route shares, one set for both hosts (the standalone server
and ComfyUI's, through ``fish_core.serve.mount``). Each dialect is a module of its own in
``api/``: its request shape and its handlers.

    api/openai.py  OpenAI speech and models        api/fish.py   fish-speech tts and references
    api/voices.py  the OpenAI-style voice routes   api/speak.py  answering a speech request

    POST /v1/audio/speech     OpenAI speech (+ S2 extensions); stream_format audio | sse
    POST /v1/tts              fish-speech ServeTTSRequest (JSON; msgpack when installed)
    POST /v1/tts/stream/with-timestamp   the same, as SSE events with each piece's word times
    WS   /v1/audio/speech/stream  text in pieces, PCM out per sentence (``api/speech_stream.py``)
    GET  /v1/models, /v1/health, /health (SGLang-Omni's path)
    GET|POST /v1/audio/voices, PATCH|DELETE /v1/audio/voices/{name}      voice library
    GET /v1/references/list, POST /v1/references/add, DELETE /v1/references/delete,
    POST /v1/references/update                                          (fish-speech paths)

Before a handler runs: the Host and Origin checks (``http/guard.py``), the API key, and for the
routes that change the voice library, a loopback peer when there is no key. Every error, unknown
paths and methods included, is JSON in OpenAI's shape; nothing of a traceback reaches the
client, and what is logged of a request is escaped (``http/logs.py``).
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from .api.fish import fish_add, fish_delete, fish_list, fish_tts, fish_tts_timed, fish_update
from .api.openai import models, openai_speech
from .api.speech_stream import speech_stream
from .api.voices import add_voice, delete_voice, list_voices, rename_voice
from .http.errors import ApiError, ClientGone, bad
from .http.logs import log, printable
from .service import Service

SERVICE = web.AppKey("sailfish_service", Service)


def routes(service: Service, prefix: str = "") -> list[web.RouteDef]:
    """The routes of ``TABLE`` (at the end of this module), every path under ``prefix`` (``""``
    standalone). Under a prefix (on ComfyUI's server) a last catch-all route answers unknown
    paths and methods below it with the JSON error shape."""
    table = [web.route(method, prefix + path, endpoint(service, handler, kind))
             for method, path, handler, kind in TABLE]
    if prefix:
        table.append(web.route("*", prefix + "/{tail:.*}", not_routed(prefix)))
    return table


def create_app(service: Service) -> web.Application:
    """The standalone application (its own size limit is ours, checked per route)."""
    app = web.Application(client_max_size=service.limits.max_body_bytes + 2**20,
                          middlewares=[json_errors])
    app[SERVICE] = service
    app.add_routes(routes(service))

    async def close(_app):
        await service.shutdown(service.limits.shutdown_seconds)

    app.on_shutdown.append(close)
    return app


def endpoint(service: Service, handler, kind: str = "read"):
    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            service.guard.check(request.headers)
            if kind not in ("open", "socket"):  # a socket checks its key itself
                service.authorize(request.headers.get("Authorization"))
            if kind == "change":
                service.allow_change(request.remote)
            return await handler(service, request)
        except ApiError as e:
            if e.status in (403, 429, 503):
                log.warning("Sailfish serve: %s %s from %s refused: %s", request.method,
                            request.path, request.remote, e.message)
            return error_response(e)
        except (ClientGone, ConnectionResetError):  # left mid-body: nobody to answer, no trace
            return web.Response(status=499)
        except asyncio.CancelledError:
            raise
        except web.HTTPException:
            raise
        except Exception:  # noqa: BLE001 - logged here, never shown to the client
            log.exception("Sailfish serve: %s %s failed", request.method, request.path)
            return error_response(ApiError(500, "internal server error; see the server log"))

    return wrapped


def error_response(e: ApiError) -> web.Response:
    return web.json_response(e.body(), status=e.status, headers=e.headers)


def http_error(e: web.HTTPException, method: str, path: str) -> ApiError:
    """aiohttp's own refusals (no route, wrong method, a body over the app's limit …)."""
    where = printable(path)[:200]
    if e.status == 404:
        return ApiError(404, f"no route {method} {where}", None, "not_found")
    if e.status == 405:
        allowed = sorted(getattr(e, "allowed_methods", ()) or ())
        return ApiError(405, f"{method} is not allowed on {where}"
                             + (f"; use {', '.join(allowed)}" if allowed else ""),
                        None, "method_not_allowed", {"Allow": ", ".join(allowed)})
    if e.status == 413:
        return bad("body", "is over the size limit", 413)
    return ApiError(e.status, e.reason or "request refused")


@web.middleware
async def json_errors(request: web.Request, handler):
    """The standalone server's errors outside the handlers (404, 405 …), in the JSON shape."""
    try:
        return await handler(request)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        return error_response(http_error(e, request.method, request.path))


def not_routed(prefix: str):
    """The catch-all under ``prefix``: 405 where the path is ours with another method, else 404."""
    async def answer(request: web.Request) -> web.Response:
        path = request.path.removeprefix("/api")  # ComfyUI mirrors every route under /api
        allowed = sorted({method for method, pattern, _, _ in TABLE
                          if matches(pattern, path.removeprefix(prefix))})
        if allowed:
            return error_response(http_error(web.HTTPMethodNotAllowed(request.method, allowed),
                                             request.method, request.path))
        return error_response(http_error(web.HTTPNotFound(), request.method, request.path))

    return answer


def matches(pattern: str, path: str) -> bool:
    """Whether ``path`` fits a route ``pattern`` of ``TABLE`` (``{name:.+}``: the rest)."""
    head, brace, _ = pattern.partition("{")
    if not brace:
        return path == pattern
    return path.startswith(head) and len(path) > len(head)


async def health(service: Service, request: web.Request) -> web.Response:
    return web.json_response({"status": "ok", "model": service.model_name,
                              "model_loaded": bool(service.loaded()),
                              "queued": service.scheduler.waiting})


# ---------------------------------------------------------------- the table
# (method, path, handler, what the route does: "open" needs no key; "read"; "change" the
# voice library: loopback peers only when there is no key; "socket": a WebSocket, whose key
# may also come as a subprotocol, checked by its handler)
TABLE = [
    ("POST", "/v1/audio/speech", openai_speech, "read"),
    ("POST", "/v1/tts", fish_tts, "read"),
    ("POST", "/v1/tts/stream/with-timestamp", fish_tts_timed, "read"),
    ("GET", "/v1/audio/speech/stream", speech_stream, "socket"),
    ("GET", "/v1/models", models, "read"),
    ("GET", "/v1/health", health, "open"),
    ("GET", "/health", health, "open"),
    ("GET", "/v1/audio/voices", list_voices, "read"),
    ("POST", "/v1/audio/voices", add_voice, "change"),
    ("PATCH", "/v1/audio/voices/{name:.+}", rename_voice, "change"),
    ("DELETE", "/v1/audio/voices/{name:.+}", delete_voice, "change"),
    ("GET", "/v1/references/list", fish_list, "read"),
    ("POST", "/v1/references/add", fish_add, "change"),
    ("DELETE", "/v1/references/delete", fish_delete, "change"),
    ("POST", "/v1/references/update", fish_update, "change"),
]
