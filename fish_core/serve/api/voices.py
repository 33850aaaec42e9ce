"""The voice routes of the OpenAI-style API: ``GET|POST /v1/audio/voices``,
``PATCH|DELETE /v1/audio/voices/{name}``. A new voice is encoded once (taking the model like a
speech request) and saved in the library (``voicelib.py``); fish-speech's reference routes
(``fish.py``) add voices the same way."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from ..http.bodies import off_loop, read_form, read_object
from ..http.errors import bad
from ..http.fields import decode_reference, text_field, voice_name
from ..service import Service

log = logging.getLogger("sailfish.serve")


async def added_voice(service: Service, request: web.Request, name_field: str) -> str:
    """Encode the uploaded clip once and save it as a voice file; returns its name. Without a
    ``text`` the clip is transcribed by the speech recogniser (the answer's ``text`` says what
    it heard; a voice added again under its name with a text replaces it)."""
    form = await read_form(request, service.limits)
    name = voice_name(form.get(name_field), name_field)
    text = text_field(form, "text", service.limits, required=False)
    audio = form.get("audio")
    if not isinstance(audio, bytes) or not audio:
        raise bad("audio", "must be an uploaded audio file")
    loop = asyncio.get_running_loop()
    with service.admitted():  # encoding takes the model like a speech request
        voice = await loop.run_in_executor(None, encode_and_save, service, name, audio, text,
                                           name_field)
    return name, voice.clips[0].text


def encode_and_save(service: Service, name: str, audio: bytes, text: str | None,
                    param: str = "name"):
    """The voice encoded and saved; without ``text``, its transcript heard (and logged)."""
    service.voices.check_free(name, param)
    wave, sample_rate = decode_reference(audio, "audio", service.limits)
    with service.scheduler.loaded() as synth:
        voice = synth.encode_voice(wave, text, name=name, sample_rate=sample_rate)
    if text is None:
        log.info("voice %r: transcript recognised by Qwen3-ASR: %s", name, voice.clips[0].text)
    service.voices.add(name, voice, param)
    return voice


async def list_voices(service: Service, request: web.Request) -> web.Response:
    names = await off_loop(service.voices.names)
    return web.json_response({"object": "list", "data": [
        {"id": name, "name": name, "object": "voice"} for name in names]})


async def add_voice(service: Service, request: web.Request) -> web.Response:
    name, text = await added_voice(service, request, "name")
    return web.json_response({"id": name, "name": name, "object": "voice", "text": text},
                             status=201)


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
