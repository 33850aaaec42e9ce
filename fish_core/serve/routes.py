"""The aiohttp handlers, one set for both hosts (the standalone server and ComfyUI's).

    POST /v1/audio/speech     OpenAI speech (+ S2 extensions); stream_format audio | sse
    POST /v1/tts              fish-speech ServeTTSRequest (JSON; msgpack when installed)
    GET  /v1/models, /v1/health
    GET|POST /v1/audio/voices, PATCH|DELETE /v1/audio/voices/{name}      voice library
    GET /v1/references/list, POST /v1/references/add, DELETE /v1/references/delete,
    POST /v1/references/update                                          (fish-speech paths)

Every error is JSON in OpenAI's shape; nothing of a traceback reaches the client.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging

import torch
from aiohttp import web

from . import formats
from .requests import (ApiError, Limits, SpeechRequest, bad, parse_fish, parse_openai,
                       text_field, voice_name)
from .service import Service

log = logging.getLogger("sailfish.serve")
POLL_SECONDS = 0.05  # how often a waiting handler looks whether its client is still there


class ClientGone(Exception):
    pass


def routes(service: Service, prefix: str = "") -> list[web.RouteDef]:
    """The route table, every path under ``prefix`` (``""`` standalone)."""
    table = [
        ("POST", "/v1/audio/speech", openai_speech),
        ("POST", "/v1/tts", fish_tts),
        ("GET", "/v1/models", models),
        ("GET", "/v1/health", health),
        ("GET", "/v1/audio/voices", list_voices),
        ("POST", "/v1/audio/voices", add_voice),
        ("PATCH", "/v1/audio/voices/{name:.+}", rename_voice),
        ("DELETE", "/v1/audio/voices/{name:.+}", delete_voice),
        ("GET", "/v1/references/list", fish_list),
        ("POST", "/v1/references/add", fish_add),
        ("DELETE", "/v1/references/delete", fish_delete),
        ("POST", "/v1/references/update", fish_update),
    ]
    return [web.route(method, prefix + path, endpoint(service, handler, path != "/v1/health"))
            for method, path, handler in table]


def create_app(service: Service) -> web.Application:
    """The standalone application (its own size limit is ours, checked per route)."""
    app = web.Application(client_max_size=service.limits.max_body_bytes + 2**20)
    app.add_routes(routes(service))

    async def close(_app):
        await asyncio.get_running_loop().run_in_executor(None, service.close)

    app.on_shutdown.append(close)
    return app


def endpoint(service: Service, handler, auth: bool = True):
    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            if auth:
                service.authorize(request.headers.get("Authorization"))
            return await handler(service, request)
        except ApiError as e:
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
    return web.json_response(e.body(), status=e.status)


# ---------------------------------------------------------------- bodies
async def read_body(request: web.Request, limit: int) -> bytes:
    if request.content_length is not None and request.content_length > limit:
        raise bad("body", f"is {request.content_length} bytes; the limit is {limit}", 413)
    data = bytearray()
    async for piece in request.content.iter_chunked(1 << 16):
        data += piece
        if len(data) > limit:
            raise bad("body", f"is over the {limit}-byte limit", 413)
    return bytes(data)


async def read_object(request: web.Request, limits: Limits, msgpack: bool = False) -> dict:
    """A JSON (or, where allowed and installed, msgpack) request body."""
    kind = request.content_type
    if kind == "application/msgpack" and msgpack:
        unpack = msgpack_loader()
        if unpack is None:
            raise ApiError(415, "content-type: msgpack bodies need the ormsgpack or msgpack "
                                "package on the server; send JSON", "content-type")
        data = await read_body(request, limits.max_body_bytes)
        try:
            return unpack(data)
        except Exception:  # noqa: BLE001 - any decoder error is the client's bad body
            raise bad("body", "is not valid msgpack") from None
    if kind not in ("application/json", "application/octet-stream", ""):
        raise ApiError(415, f"content-type: {kind} is not accepted; send application/json",
                       "content-type")
    data = await read_body(request, limits.max_body_bytes)
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise bad("body", f"is not valid JSON ({e})") from None


def msgpack_loader():
    for name in ("ormsgpack", "msgpack"):
        try:
            module = __import__(name)
        except ImportError:
            continue
        return module.unpackb
    return None


# ---------------------------------------------------------------- speech
async def openai_speech(service: Service, request: web.Request) -> web.StreamResponse:
    body = await read_object(request, service.limits)
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
async def read_form(request: web.Request, limits: Limits) -> dict:
    """A multipart/form-data body → {field: str | bytes}, within the body limit."""
    if not request.content_type.startswith("multipart/"):
        raise ApiError(415, "content-type: send multipart/form-data with fields name, audio "
                            "(a file) and text", "content-type")
    reader, fields, total = await request.multipart(), {}, 0
    while (part := await reader.next()) is not None:
        data = bytearray()
        while piece := await part.read_chunk(1 << 16):
            data += piece
            total += len(piece)
            if total > limits.max_body_bytes:
                raise bad("body", f"is over the {limits.max_body_bytes}-byte limit", 413)
        fields[part.name] = bytes(data) if part.filename else data.decode("utf-8", "replace")
    return fields


async def added_voice(service: Service, request: web.Request, name_field: str) -> str:
    """Encode the uploaded clip once and save it as a voice file; returns its name."""
    form = await read_form(request, service.limits)
    name = voice_name(form.get(name_field), name_field)
    text = text_field(form, "text", service.limits)
    audio = form.get("audio")
    if not isinstance(audio, bytes) or not audio:
        raise bad("audio", "must be an uploaded audio file")
    loop = asyncio.get_running_loop()
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
