"""The request shapes every dialect makes (``SpeechRequest``, ``Reference``: what
``openai.parse_openai``, ``fish.parse_fish`` and the speech stream's sessions build) and the field
checks they share.

A bad field raises ``ApiError`` (status 4xx, ``http.errors``) whose message and ``param`` name
the field as the client sent it; the routes turn it into OpenAI's error shape. Text quoted from
elsewhere goes through ``detail``, so no server path or object repr reaches a client.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import weakref
from dataclasses import dataclass, field

from ...params import DEFAULTS, MAX_SEED
from ...speech.library import VoiceNameError, check_name
from ..http import formats
from ..http.errors import ApiError, bad, detail
from ..limits import Limits

URL_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


@dataclass
class Reference:
    audio: bytes  # an encoded audio file (wav, flac, ogg …)
    text: str
    param: str = "references[0].audio"  # the field that sent the audio, for errors
    # The clips encoded from it, and the model that encoded them: a WebSocket session speaks
    # every sentence with the same Reference objects, so each is encoded once per session.
    _encoded: tuple = field(default=(), repr=False, compare=False)

    def clips(self, synth, limits: Limits) -> list:
        """The reference encoded by ``synth``'s codec (on the scheduler's thread), once per
        model: a model loaded again (ComfyUI's Free memory) encodes it again."""
        if self._encoded and self._encoded[0]() is synth:
            return self._encoded[1]
        wave, sample_rate = decode_reference(self.audio, self.param, limits)
        clips = synth.encode_voice(wave, self.text, sample_rate=sample_rate).clips
        self._encoded = (weakref.ref(synth), clips)
        return clips


@dataclass
class SpeechRequest:
    text: str
    voice: str | None = None  # a saved voice's name
    voice_param: str = "voice"  # the field that named it
    references: list[Reference] = field(default_factory=list)
    format: str = "wav"
    stream: str | None = None  # None, "audio" or "sse"
    seed: int | None = None
    temperature: float = DEFAULTS.temperature
    top_p: float = DEFAULTS.top_p
    top_k: int = DEFAULTS.top_k
    max_new_tokens: int = DEFAULTS.max_new_tokens
    max_bytes: int = 300  # text batch size
    speed: float = 1.0  # speaking rate (OpenAI's field; fish-speech: our extension)
    loudness: float | None = None  # extension: target in LUFS (docs/finished-audio.md)
    text_param: str = "text"  # the field that held the text ("input" in OpenAI's dialect)


# ---------------------------------------------------------------- field checks
def require_object(body) -> dict:
    if not isinstance(body, dict):
        raise bad("body", f"must be a JSON object, got {type(body).__name__}")
    return body


def reject_unknown(body: dict, known: set) -> None:
    unknown = sorted(set(body) - known)
    if unknown:
        raise bad(unknown[0], "unrecognized request argument")


def text_field(body: dict, name: str, limits: Limits, required: bool = True,
               param: str | None = None) -> str | None:
    """A non-empty string within the text limit; errors name ``param`` (default ``name``)."""
    value, param = body.get(name), param or name
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise bad(param, f"must be a string, got {type(value).__name__}")
    if not value.strip():
        raise bad(param, "must not be empty")
    check_unicode(value, param)
    if len(value) > limits.max_text_chars:
        raise bad(param, f"is {len(value)} characters; the limit is {limits.max_text_chars}")
    return value


def check_unicode(value: str, param: str) -> str:
    """``value`` if UTF-8 can carry it: a lone surrogate (JSON's ``"\\ud800"``) is a 400."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise bad(param, f"holds a lone surrogate (U+{ord(value[e.start]):04X} at position "
                         f"{e.start}), which is not text; send UTF-8 text") from None
    return value


def number(body: dict, name: str, default: float, low: float, high: float,
           low_open: bool = False, high_open: bool = False) -> float:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise bad(name, f"must be a number, got {value!r}")
    too_low = value <= low if low_open else value < low
    too_high = value >= high if high_open else value > high
    if too_low or too_high:
        left, right = "(" if low_open else "[", ")" if high_open else "]"
        raise bad(name, f"must lie in {left}{low:g}, {high:g}{right}, got {value!r}")
    return float(value)


def integer(body: dict, name: str, default: int | None, low: int, high: int) -> int | None:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(name, f"must be an integer, got {value!r}")
    if not low <= value <= high:
        raise bad(name, f"must lie in {low} .. {high}, got {value}")
    return value


def choice(body: dict, name: str, default: str | None, allowed) -> str | None:
    value = body.get(name, default)
    if value is None:
        return default
    if value not in allowed:
        raise bad(name, f"must be one of {', '.join(allowed)}, got {value!r}")
    return value


def audio_format(body: dict, name: str, default: str) -> str:
    value = body.get(name, default)
    if value not in formats.CONTENT_TYPES:
        raise bad(name, f"must be one of {', '.join(formats.CONTENT_TYPES)}, got {value!r}")
    if value not in formats.writable():
        raise bad(name, f"{value} cannot be written by this installation's libsndfile; "
                        f"use one of {', '.join(formats.writable())}")
    return value


def voice_name(value, param: str = "voice") -> str:
    """A voice name by the library's rule (``fish_core.speech.library.check_name``: the one the
    ComfyUI nodes use)."""
    try:
        return check_name(value, param)
    except VoiceNameError as e:  # its text starts with the field's name
        raise ApiError(400, str(e), param) from None


def audio_bytes(value, param: str) -> bytes:
    """Audio given as raw bytes (msgpack), base64 or a ``data:`` URL. Other URLs (``http(s)://``,
    ``file://``) are refused: the server never fetches a URL or reads a path a client names."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if not isinstance(value, str) or not value:
        raise bad(param, "must be base64 audio or a data: URL")
    if URL_SCHEME.match(value) or value.startswith(("/", "~", "\\")):
        raise bad(param, "this server does not fetch URLs or read paths; send the audio inline "
                         "as a data: URL (data:audio/wav;base64,...)")
    if value.startswith("data:"):
        head, _, value = value.partition(",")
        if not head.endswith(";base64"):
            raise bad(param, "a data: URL must be base64-encoded")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise bad(param, "is not valid base64") from None


def references(body: dict, name: str, limits: Limits) -> list[Reference]:
    """``[{audio, text}]`` (fish-speech, ours) or ``[{audio_path, text}]`` (SGLang-Omni, with
    ``audio_path`` a ``data:`` URL); errors name the key the item used."""
    items = body.get(name)
    if items is None:
        return []
    if not isinstance(items, list):
        raise bad(name, f"must be a list of {{audio, text}}, got {type(items).__name__}")
    if len(items) > limits.max_references:
        raise bad(name, f"has {len(items)} items; the limit is {limits.max_references}")
    out = []
    for i, item in enumerate(items):
        where = f"{name}[{i}]"
        if not isinstance(item, dict):
            raise bad(where, "must be an object {audio, text}")
        unknown = sorted(set(item) - {"audio", "audio_path", "text"})
        if unknown:
            raise bad(f"{where}.{unknown[0]}", "unrecognized reference field (send audio or "
                                               "audio_path, and text)")
        if "audio" in item and "audio_path" in item:
            raise bad(f"{where}.audio_path", "send either audio or audio_path, not both")
        key = "audio_path" if "audio_path" in item else "audio"
        audio = audio_bytes(item.get(key), f"{where}.{key}")
        out.append(Reference(audio, text_field(item, "text", limits, param=f"{where}.text"),
                             f"{where}.{key}"))
    return out


def decode_reference(audio: bytes, param: str, limits: Limits) -> tuple:
    """Encoded audio bytes -> (mono float32 ``[T]``, its sample rate), parsed once and
    length-checked before decoding (``audio.files.read_audio_bytes``); ``encode_voice``
    resamples it to the codec's rate."""
    from ...audio.files import AudioError, read_audio_bytes

    try:
        return read_audio_bytes(audio, max_seconds=limits.max_reference_seconds, name=param)
    except AudioError as e:
        raise bad(param, detail(str(e).removeprefix(f"{param}: "))) from None


# ---------------------------------------------------------------- finishing (both dialects)
def finishing(body: dict, request: SpeechRequest, text_param: str) -> None:
    """``speed`` (0.5 … 2) and the extension ``loudness`` (LUFS); ``[pause:…]`` tags in the
    text checked now, so a bad one is a 400 naming the field."""
    from ...audio.loudness import HIGHEST, LOWEST
    from ...audio.stretch import MAX_SPEED, MIN_SPEED, SpeedError, import_pedalboard
    from ...text.pauses import PauseError, split_pauses

    speed = body.get("speed", 1.0)
    if speed is not None and speed != 1.0:
        request.speed = number(body, "speed", 1.0, MIN_SPEED, MAX_SPEED)
        try:  # a speed this server cannot make: 422 naming the field, before any work
            import_pedalboard("speed")
        except SpeedError as e:
            raise ApiError(422, detail(e), "speed") from None
    if body.get("loudness") is not None:
        request.loudness = number(body, "loudness", None, LOWEST, HIGHEST)
    request.text_param = text_param
    try:
        split_pauses(request.text, text_param)
    except PauseError as e:
        raise ApiError(400, detail(e), text_param) from None


# ---------------------------------------------------------------- sampling (both dialects)
def sampling(body: dict, request: SpeechRequest, limits: Limits) -> None:
    request.seed = integer(body, "seed", None, 0, MAX_SEED)
    request.temperature = number(body, "temperature", DEFAULTS.temperature, 0, 2, low_open=True,
                                 high_open=True)
    request.top_p = number(body, "top_p", DEFAULTS.top_p, 0, 1, low_open=True)
    request.top_k = integer(body, "top_k", DEFAULTS.top_k, 1, 1 << 20)
    request.max_new_tokens = integer(body, "max_new_tokens",
                                     min(DEFAULTS.max_new_tokens, limits.max_new_tokens), 1,
                                     limits.max_new_tokens)
