"""The aiohttp handlers, one set for both hosts (the standalone server and ComfyUI's).

    POST /v1/audio/speech     OpenAI speech (+ S2 extensions); stream_format audio | sse
    POST /v1/tts              fish-speech ServeTTSRequest (JSON; msgpack when installed)
    WS   /v1/audio/speech/stream  text in pieces, PCM out per sentence (``speech_stream.py``)
    GET  /v1/models, /v1/health, /health (SGLang-Omni's path)
    GET|POST /v1/audio/voices, PATCH|DELETE /v1/audio/voices/{name}      voice library
    GET /v1/references/list, POST /v1/references/add, DELETE /v1/references/delete,
    POST /v1/references/update                                          (fish-speech paths)

Before a handler runs: the Host and Origin checks (``guard.py``), the API key, and for the
routes that change the voice library, a loopback peer when there is no key. Every error, unknown
paths and methods included, is JSON in OpenAI's shape; nothing of a traceback reaches the
client, and what is logged of a request is escaped (``logs.py``).
"""

from __future__ import annotations

import asyncio
import base64
import json

import torch
from aiohttp import web

from . import formats
from .bodies import read_form, read_object
from .logs import log, printable
from .requests import (ApiError, SpeechRequest, bad, parse_fish, parse_openai, text_field,
                       voice_name)
from .service import Service
from .speech_stream import speech_stream

SERVICE = web.AppKey("sailfish_service", Service)
POLL_SECONDS = 0.05  # how often a waiting handler looks whether its client is still there


class ClientGone(Exception):
    pass


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
        await asyncio.get_running_loop().run_in_executor(None, service.close)

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
            if e.status in (403, 429):
                log.warning("Sailfish serve: %s %s from %s refused: %s", request.method,
                            request.path, request.remote, e.message)
            return error_response(e)
        except (asyncio.CancelledError, ClientGone, ConnectionResetError):
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


# ---------------------------------------------------------------- speech
async def openai_speech(service: Service, request: web.Request) -> web.StreamResponse:
    body = await read_object(request, service.limits)  # before admission: bodies arrive freely
    return await speak(service, request, parse_openai(body, service.limits,
                                                      service.model_names))


async def fish_tts(service: Service, request: web.Request) -> web.StreamResponse:
    body = await read_object(request, service.limits, msgpack=True)
    return await speak(service, request, parse_fish(body, service.limits))


async def speak(service: Service, request: web.Request, speech: SpeechRequest
                ) -> web.StreamResponse:
    """Queue the request and answer as its audio arrives: whole, streamed, or as SSE."""
    loop = asyncio.get_running_loop()
    items: asyncio.Queue = asyncio.Queue()

    def emit(kind: str, value) -> None:  # on the scheduler's thread
        try:
            loop.call_soon_threadsafe(items.put_nowait, (kind, value))
        except RuntimeError:  # the loop is closed: nobody is listening any more
            pass

    with service.admitted():
        task = service.scheduler.submit(speech, emit)
        try:
            kind, info = await next_item(items, request)
            if kind == "error":
                raise info
            if speech.stream is None:
                return await whole(items, request, speech, info)
            return await streamed(items, request, speech, info)
        except ClientGone:  # nobody to answer; 499 is what the access log shows
            return web.Response(status=499)
        finally:
            task.cancel()  # a no-op once it is done; stops it when the client left


async def next_item(items: asyncio.Queue, request: web.Request) -> tuple[str, object]:
    """The task's next report, watching for the client going away meanwhile."""
    while True:
        try:
            return await asyncio.wait_for(items.get(), POLL_SECONDS)
        except asyncio.TimeoutError:
            transport = request.transport
            if transport is None or transport.is_closing():
                raise ClientGone() from None


def audio_headers(info: dict) -> dict:
    return {"X-Sailfish-Seed": str(info["seed"]),
            "X-Sailfish-Sample-Rate": str(info["sample_rate"])}


async def whole(items, request, speech: SpeechRequest, info: dict) -> web.Response:
    chunks = []
    while True:
        kind, value = await next_item(items, request)
        if kind == "error":
            raise value
        if kind == "done":
            break
        chunks.append(value)
    wave = torch.cat(chunks)
    data = await asyncio.get_running_loop().run_in_executor(
        None, formats.encode, wave, info["sample_rate"], speech.format)
    return web.Response(body=data, content_type=formats.CONTENT_TYPES[speech.format],
                        headers=audio_headers(info))


async def streamed(items, request, speech: SpeechRequest, info: dict) -> web.StreamResponse:
    kind, value = await next_item(items, request)
    if kind == "error":  # before any audio: still time for a proper status
        raise value
    encode = formats.StreamEncoder(speech.format, info["sample_rate"])
    sse = speech.stream == "sse"
    response = web.StreamResponse(headers=audio_headers(info))
    response.content_type = "text/event-stream" if sse else formats.CONTENT_TYPES[speech.format]
    if sse:
        response.headers["Cache-Control"] = "no-cache"
    await response.prepare(request)
    try:
        await stream_body(items, request, response, encode, sse, kind, value, info)
    except (ClientGone, ConnectionResetError):  # the client left mid-stream
        return response
    await response.write_eof()
    return response


async def stream_body(items, request, response, encode, sse: bool, kind: str, value,
                      info: dict) -> None:
    """Write the chunks as they come (``kind, value``: the first report, already read)."""
    samples = 0
    while True:
        if kind == "error":  # too late for a status: say it in the stream, or just end it
            log.warning("Sailfish serve: stream ended early: %s", value.message)
            if sse:
                await response.write(sse_event({"type": "error", "error": value.body()["error"]}))
            break
        if kind == "done":
            if sse:
                frames = samples // info["frame_length"]
                await response.write(sse_event({"type": "speech.audio.done",
                                                "usage": {"output_tokens": frames}}))
            break
        samples += value.shape[0]
        data = encode(value)
        if sse:
            data = sse_event({"type": "speech.audio.delta",
                              "audio": base64.b64encode(data).decode("ascii")})
        await response.write(data)
        kind, value = await next_item(items, request)


def sse_event(payload: dict) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


# ---------------------------------------------------------------- models, health
async def models(service: Service, request: web.Request) -> web.Response:
    data = [{"id": name, "object": "model", "created": 0, "owned_by": "sailfish"}
            for name in sorted(service.model_names)]
    return web.json_response({"object": "list", "data": data})


async def health(service: Service, request: web.Request) -> web.Response:
    return web.json_response({"status": "ok", "model": service.model_name,
                              "model_loaded": bool(service.loaded()),
                              "queued": service.scheduler.waiting})


# ---------------------------------------------------------------- voices
async def added_voice(service: Service, request: web.Request, name_field: str) -> str:
    """Encode the uploaded clip once and save it as a voice file; returns its name."""
    form = await read_form(request, service.limits)
    name = voice_name(form.get(name_field), name_field)
    text = text_field(form, "text", service.limits)
    audio = form.get("audio")
    if not isinstance(audio, bytes) or not audio:
        raise bad("audio", "must be an uploaded audio file")
    loop = asyncio.get_running_loop()
    with service.admitted():  # encoding takes the model like a speech request
        await loop.run_in_executor(None, encode_and_save, service, name, audio, text)
    return name


def encode_and_save(service: Service, name: str, audio: bytes, text: str) -> None:
    from .requests import decode_reference

    service.voices.check_free(name)
    wave, sample_rate = decode_reference(audio, "audio", service.limits)
    with service.scheduler.model() as synth:
        voice = synth.encode_voice(wave, text, name=name, sample_rate=sample_rate)
    service.voices.add(name, voice)


async def list_voices(service: Service, request: web.Request) -> web.Response:
    names = service.voices.names()
    return web.json_response({"object": "list", "data": [
        {"id": name, "name": name, "object": "voice"} for name in names]})


async def add_voice(service: Service, request: web.Request) -> web.Response:
    name = await added_voice(service, request, "name")
    return web.json_response({"id": name, "name": name, "object": "voice"}, status=201)


async def rename_voice(service: Service, request: web.Request) -> web.Response:
    body = await read_object(request, service.limits)
    if not isinstance(body, dict) or "name" not in body:
        raise bad("name", "send {\"name\": <new name>}")
    old = request.match_info["name"]
    service.voices.rename(old, voice_name(body["name"], "name"), "name", "name")
    return web.json_response({"id": body["name"], "name": body["name"], "object": "voice"})


async def delete_voice(service: Service, request: web.Request) -> web.Response:
    name = request.match_info["name"]
    service.voices.delete(name, "name")
    return web.json_response({"id": name, "object": "voice", "deleted": True})


async def fish_list(service: Service, request: web.Request) -> web.Response:
    return web.json_response({"success": True, "reference_ids": service.voices.names()})


async def fish_add(service: Service, request: web.Request) -> web.Response:
    name = await added_voice(service, request, "id")
    return web.json_response({"success": True, "reference_id": name,
                              "message": f"reference {name!r} added"})


async def fish_delete(service: Service, request: web.Request) -> web.Response:
    body = await read_object(request, service.limits, msgpack=True)
    if not isinstance(body, dict):
        raise bad("body", "must be a JSON object")
    service.voices.delete(voice_name(body.get("reference_id"), "reference_id"), "reference_id")
    return web.json_response({"success": True, "reference_id": body["reference_id"]})


async def fish_update(service: Service, request: web.Request) -> web.Response:
    body = await read_object(request, service.limits, msgpack=True)
    if not isinstance(body, dict):
        raise bad("body", "must be a JSON object")
    old = voice_name(body.get("old_reference_id"), "old_reference_id")
    new = voice_name(body.get("new_reference_id"), "new_reference_id")
    service.voices.rename(old, new, "old_reference_id", "new_reference_id")
    return web.json_response({"success": True, "old_reference_id": old,
                              "new_reference_id": new})


# ---------------------------------------------------------------- the table
# (method, path, handler, what the route does: "open" needs no key; "read"; "change" the
# voice library: loopback peers only when there is no key; "socket": a WebSocket, whose key
# may also come as a subprotocol, checked by its handler)
TABLE = [
    ("POST", "/v1/audio/speech", openai_speech, "read"),
    ("POST", "/v1/tts", fish_tts, "read"),
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
