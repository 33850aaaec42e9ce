"""The field parsers every dialect shares: a JSON object, its known fields, strings (the speech
text: its JSON type only, the ``Request`` checks it), other text, numbers and integers (their
JSON types; a ``Rule`` only for a dialect's own fields, the request's ranges are the speech
``Request``'s), choices, audio formats, voice names and inline audio.

A bad field raises ``ApiError`` (status 4xx, ``errors``) whose message and ``param`` name the
field as the client sent it. Text quoted from elsewhere goes through ``detail``, so no server
path or object repr reaches a client.
"""

from __future__ import annotations

import base64
import binascii
import math
import re

from ...params import Rule
from ...speech.library import VoiceNameError, check_name
from ..limits import Limits
from . import formats
from .errors import ApiError, bad, detail

URL_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def require_object(body) -> dict:
    if not isinstance(body, dict):
        raise bad("body", f"must be a JSON object, got {type(body).__name__}")
    return body


def reject_unknown(body: dict, known: set) -> None:
    unknown = sorted(set(body) - known)
    if unknown:
        raise bad(unknown[0], "unrecognized request argument")


def string(body: dict, name: str) -> str:
    """A JSON string (a speech text: its rules are the ``Request``'s, ``request.to_request``)."""
    value = body.get(name)
    if not isinstance(value, str):
        raise bad(name, f"must be a string, got {type(value).__name__}")
    return value


def text_field(body: dict, name: str, limits: Limits, required: bool = True,
               param: str | None = None) -> str | None:
    """A non-empty string within the text limit; errors name ``param`` (default ``name``)."""
    value, param = body.get(name), param or name
    if value is None and not required:
        return None
    value = string({param: value}, param)
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


def outside(name: str, rule: Rule, value) -> ApiError:
    """``value`` is not in ``rule``'s range, said as the wire says it."""
    if rule.high is None:
        return bad(name, f"must be {rule.interval}, got {value!r}")
    return bad(name, f"must lie in {rule.interval}, got {value!r}")


def number(body: dict, name: str, default: float | None = None,
           rule: Rule | None = None) -> float | None:
    """A finite JSON number (``default`` when absent or null), within ``rule`` when given."""
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise bad(name, f"must be a number, got {value!r}")
    if rule is not None and not rule.holds(value):
        raise outside(name, rule, value)
    return float(value)


def integer(body: dict, name: str, default: int | None = None,
            rule: Rule | None = None) -> int | None:
    """A JSON integer (``default`` when absent or null), within ``rule`` when given."""
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(name, f"must be an integer, got {value!r}")
    if rule is not None and not rule.holds(value):
        raise outside(name, rule, value)
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


def decode_reference(audio: bytes, param: str, limits: Limits) -> tuple:
    """Encoded audio bytes -> (mono float32 ``[T]``, its sample rate), parsed once and
    length-checked before decoding (``audio.files.read_audio_bytes``); ``encode_voice``
    resamples it to the codec's rate."""
    from ...audio.files import AudioError, read_audio_bytes

    try:
        return read_audio_bytes(audio, max_seconds=limits.max_reference_seconds, name=param)
    except AudioError as e:
        raise bad(param, detail(str(e).removeprefix(f"{param}: "))) from None
