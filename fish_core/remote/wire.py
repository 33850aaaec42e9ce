"""Audio as remote engines send it: server-sent events carrying base64 audio, and the check every
piece passes before it reaches a caller. WAV bodies (whole, or streamed with an unknown length)
are parsed by ``fish_core.audio.wav.WavReader``, with its bounds. Server text in errors goes
through the transport's quoter (``http.Transport.quote``: short, no control characters, or not
shown for an engine that has not identified itself)."""

from __future__ import annotations

import base64
import json
from typing import Iterator

import torch

from ..audio.wav import AudioFormatError
from .http import quote


def sse_events(lines: Iterator[bytes]) -> Iterator[str]:
    """The ``data:`` payloads of a server-sent event stream (one per event), up to ``[DONE]``."""
    data: list[str] = []
    for raw in lines:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if line.startswith("data:"):
            data.append(line[5:].lstrip())
        elif not line and data:
            payload, data = "\n".join(data), []
            if payload == "[DONE]":
                return
            yield payload
    if data and "\n".join(data) != "[DONE]":
        yield "\n".join(data)


def sse_audio(payload: str, where: str, quote=quote) -> tuple[str, bytes | None]:
    """One SSE event → (its type, the audio bytes it carries or None). Knows OpenAI's
    ``speech.audio.delta`` (``audio``: base64) and SGLang-Omni's ``audio.speech.chunk``
    (``audio``: ``{"data": base64}``); an ``error`` event raises."""
    event = stream_event(payload, where, quote)
    kind = str(event.get("type") or event.get("object") or "")
    audio = event.get("audio")
    if isinstance(audio, dict):
        audio = audio.get("data")
    if not audio:
        return kind, None
    try:
        return kind, base64.b64decode(audio, validate=True)
    except (ValueError, TypeError):
        raise AudioFormatError(f"{where}: a stream event's audio is not base64") from None


def stream_event(payload: str, where: str, quote=quote) -> dict:
    """One SSE event's JSON object; an ``error`` event raises, its message quoted."""
    try:
        event = json.loads(payload)
    except (ValueError, RecursionError):
        raise AudioFormatError(
            f"{where}: a stream event is not JSON: {quote(payload[:80])}") from None
    if not isinstance(event, dict):
        raise AudioFormatError(f"{where}: a stream event is not an object: "
                               f"{quote(payload[:80])}")
    if "error" in event:
        error = event["error"]
        message = error.get("message") if isinstance(error, dict) else error
        raise AudioFormatError(f"{where}: the server ended the stream: {quote(message)}")
    return event


def check_audio(wave: torch.Tensor, sample_rate: int | None, where: str) -> torch.Tensor:
    """The last check before a caller sees remote audio: non-empty, a known rate."""
    if sample_rate is None or wave.numel() == 0:
        raise AudioFormatError(f"{where}: the server sent no audio")
    return wave
