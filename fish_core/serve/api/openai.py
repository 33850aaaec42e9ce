"""The OpenAI dialect: ``POST /v1/audio/speech`` (its request shape, plus the S2 extensions of
SGLang-Omni / vLLM-Omni) and ``GET /v1/models``. The shared field checks are in
``..http.fields``, the request shape in ``..request``; the answer in ``speak.py``; the voice routes
in ``voices.py``."""

from __future__ import annotations

from aiohttp import web

from ..http import formats
from ..http.bodies import read_object
from ..http.errors import bad
from ..http.fields import (audio_bytes, audio_format, choice, number, reject_unknown,
                           require_object, string, text_field, voice_name)
from ..limits import Limits
from ..request import (REPETITION_PENALTY, SETTINGS, Reference, SpeechRequest, references,
                       settings)
from ..service import Service
from .speak import speak

OPENAI_FIELDS = {"model", "input", "voice", "response_format", "instructions", "stream_format",
                 "references", "ref_audio", "ref_text", "repetition_penalty", "word_timestamps",
                 *SETTINGS}


def parse_openai(body, limits: Limits, models: set[str]) -> SpeechRequest:
    """OpenAI ``POST /v1/audio/speech`` plus the S2 extensions of SGLang-Omni / vLLM-Omni."""
    body = require_object(body)
    reject_unknown(body, OPENAI_FIELDS)
    check_model(body.get("model"), models)
    request = SpeechRequest(string(body, "input"), openai_voice(body.get("voice")),
                            text_param="input", prefix=instructions_prefix(body, limits))
    request.format = audio_format(body, "response_format", "wav")
    request.stream = choice(body, "stream_format", None, ("audio", "sse"))
    if request.stream and request.format not in formats.STREAMABLE:
        raise bad("response_format", f"{request.format} cannot be streamed; stream wav or pcm")
    request.references = references(body, "references", limits) + ref_audio(body, limits)
    if len(request.references) > limits.max_references:
        raise bad("ref_audio", f"makes {len(request.references)} references; the limit is "
                               f"{limits.max_references}")
    number(body, "repetition_penalty", 1.1, REPETITION_PENALTY)
    request.settings = settings(body, limits)
    word_timestamps(body.get("word_timestamps", False), request)
    return request.checked(limits)


def check_model(model, models: set[str]) -> None:
    """``model``: absent, or one of the names served here (a 404 otherwise)."""
    if model is not None and model not in models:
        raise bad("model", f"{model!r} is not served here; use one of {', '.join(sorted(models))}",
                  404, "model_not_found")


def openai_voice(voice) -> str | None:
    """``voice``: a saved voice's name, or ``{"id": name}``, or absent."""
    if isinstance(voice, dict):
        voice = voice.get("id")
    return None if voice is None else voice_name(voice)


def word_timestamps(value, request: SpeechRequest) -> None:
    """vLLM-Omni's ``word_timestamps``: with SSE, the words' times in the answer (``timed``)."""
    if not isinstance(value, bool):
        raise bad("word_timestamps", f"must be true or false, got {value!r}")
    if value:
        if request.stream != "sse":
            raise bad("word_timestamps", "the words' times come as server-sent events: send "
                                         "stream_format \"sse\" with them")
        request.stream, request.timed, request.settings["words"] = None, "openai", "auto"


def ref_audio(body: dict, limits: Limits) -> list[Reference]:
    """SGLang-Omni's and vLLM-Omni's one reference: ``ref_audio`` with ``ref_text``."""
    if body.get("ref_audio") is None:
        return []
    ref_text = text_field(body, "ref_text", limits)
    return [Reference(audio_bytes(body["ref_audio"], "ref_audio"), ref_text, "ref_audio")]


def instructions_prefix(body: dict, limits: Limits) -> str:
    """``instructions`` (a short style cue) as the bracketed tag S2 reads before the text."""
    instructions = text_field(body, "instructions", limits, required=False)
    if instructions is None:
        return ""
    if any(c in instructions for c in "[]<>") or len(instructions) > 200:
        raise bad("instructions", "must be a short style cue (at most 200 characters, no "
                                  "brackets), e.g. 'whispering'")
    return f"[{instructions.strip()}] "


def default_voice(speech: SpeechRequest, service: Service) -> SpeechRequest:
    """vLLM-Omni's ``"voice": "default"`` (the model's own voice for Fish models) is this
    server's default voice, unless the library holds a voice named ``default``."""
    if speech.voice == "default" and service.voices.folders.find("default") is None:
        speech.voice = None
    return speech


async def openai_speech(service: Service, request: web.Request) -> web.StreamResponse:
    body = await read_object(request, service.limits, references=True)  # before admission
    speech = parse_openai(body, service.limits, service.model_names)
    return await speak(service, request, default_voice(speech, service))


async def models(service: Service, request: web.Request) -> web.Response:
    data = [{"id": name, "object": "model", "created": 0, "owned_by": "sailfish"}
            for name in sorted(service.model_names)]
    return web.json_response({"object": "list", "data": data})
