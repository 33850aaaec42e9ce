"""The fish-speech dialect: ``POST /v1/tts`` (``ServeTTSRequest``, JSON or msgpack) and the
reference library at ``/v1/references/list|add|delete|update``. The shared field checks are in
``..http.fields``, the request shape in ``..request``; the answer in ``speak.py``; voices are
stored by ``..voicelib``."""

from __future__ import annotations

from aiohttp import web

from ...params import Rule
from ..http import formats
from ..http.bodies import off_loop, read_object
from ..http.errors import bad
from ..http.fields import (audio_format, choice, integer, number, reject_unknown,
                           require_object, string, voice_name)
from ..limits import Limits
from ..request import REPETITION_PENALTY, SETTINGS, SpeechRequest, references, settings
from ..service import Service
from .speak import speak
from .voices import added_voice

FISH_FIELDS = {"text", "chunk_length", "format", "latency", "references", "reference_id",
               "use_memory_cache", "normalize", "streaming", "repetition_penalty", *SETTINGS}
CHUNK_LENGTH = Rule(100, 1000, integer=True)  # fish-speech's text batch size, in bytes


def parse_fish(body, limits: Limits, timed: bool = False) -> SpeechRequest:
    """fish-speech ``POST /v1/tts`` (``ServeTTSRequest``); ``timed``: Fish's
    ``/v1/tts/stream/with-timestamp`` (the same body; server-sent events of audio and word
    alignment, ``speak.timed``)."""
    body = require_object(body)
    reject_unknown(body, FISH_FIELDS)
    request = SpeechRequest(string(body, "text"))
    reference_id = body.get("reference_id")
    request.voice = None if reference_id is None else voice_name(reference_id, "reference_id")
    request.voice_param = "reference_id"
    request.references = references(body, "references", limits)
    request.format = audio_format(body, "format", "wav")
    request.stream = fish_stream(body.get("streaming", False), request.format, timed)
    max_bytes = integer(body, "chunk_length", 300, CHUNK_LENGTH)
    fish_options(body)
    number(body, "repetition_penalty", 1.1, REPETITION_PENALTY)
    request.settings = {**settings(body, limits), "max_bytes": max_bytes}
    request.names = {"max_bytes": "chunk_length"}
    if timed:
        request.timed, request.settings["words"] = "fish", "auto"
    return request.checked(limits)


def fish_stream(streaming, fmt: str, timed: bool) -> str | None:
    """``streaming`` (with ``format``): the answer's stream (``SpeechRequest.stream``); a timed
    answer comes in pieces whatever ``streaming`` says."""
    if not isinstance(streaming, bool):
        raise bad("streaming", f"must be true or false, got {streaming!r}")
    if streaming and fmt not in formats.STREAMABLE:
        raise bad("format", f"{fmt} cannot be streamed; stream wav or pcm")
    if timed and fmt not in formats.STREAMABLE:
        raise bad("format", f"{fmt} cannot be sent in pieces; send wav or pcm")
    return "audio" if streaming and not timed else None


def fish_options(body: dict) -> None:
    """fish-speech's fields that change nothing here, checked: ``latency``,
    ``use_memory_cache``, ``normalize``."""
    choice(body, "latency", "normal", ("normal", "balanced"))
    choice(body, "use_memory_cache", "off", ("on", "off"))
    if not isinstance(body.get("normalize", True), bool):
        raise bad("normalize", "must be true or false")


async def fish_tts(service: Service, request: web.Request) -> web.StreamResponse:
    body = await read_object(request, service.limits, msgpack=True, references=True)
    return await speak(service, request, parse_fish(body, service.limits))


async def fish_tts_timed(service: Service, request: web.Request) -> web.StreamResponse:
    """``POST /v1/tts/stream/with-timestamp``: Fish's server-sent events, each a piece of the
    audio (``audio_base64``) with its text (``content``) and its words' times
    (``alignment.segments``), timed by the forced aligner."""
    body = await read_object(request, service.limits, msgpack=True, references=True)
    return await speak(service, request, parse_fish(body, service.limits, timed=True))


async def fish_list(service: Service, request: web.Request) -> web.Response:
    names = await off_loop(service.voices.names)
    return web.json_response({"success": True, "reference_ids": names})


async def fish_add(service: Service, request: web.Request) -> web.Response:
    name, _ = await added_voice(service, request, "id")
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
