"""Audio as remote engines send it: WAV (whole, or streamed with an unknown length), SSE events
carrying base64 audio, and the checks every piece passes before it reaches a caller.

``WavReader`` takes bytes as they arrive and gives float32 mono samples as soon as whole
samples are there; it accepts 16-bit PCM and 32-bit float WAV, mono or stereo (averaged)."""

from __future__ import annotations

import base64
import json
import struct
from typing import Iterator

import numpy as np
import torch

PCM, FLOAT = 1, 3  # WAVE format tags
EXTENSIBLE = 0xFFFE
MIN_RATE, MAX_RATE = 8000, 192000


class AudioFormatError(ValueError):
    """A response whose audio is not what the client can use (names the endpoint)."""


class WavReader:
    """Incremental WAV parser: ``feed(bytes)`` → float32 ``[n]`` samples decoded so far."""

    def __init__(self, where: str):
        self.where = where
        self.header = bytearray()
        self.sample_rate: int | None = None
        self.channels = 0
        self.kind = PCM
        self.width = 2  # bytes per sample of one channel
        self.in_data = False
        self.pending = b""

    def feed(self, data: bytes) -> torch.Tensor:
        if not self.in_data:
            self.header += data
            data = self._parse_header()
            if not self.in_data:
                return torch.zeros(0)
        data = self.pending + data
        frame = self.width * self.channels
        usable = len(data) - len(data) % frame
        self.pending = data[usable:]
        return self._samples(data[:usable])

    def _parse_header(self) -> bytes:
        """Read RIFF chunks until ``data``; returns the bytes after its header (or b"")."""
        h = bytes(self.header)
        if len(h) < 12:
            return b""
        if h[:4] != b"RIFF" or h[8:12] != b"WAVE":
            raise AudioFormatError(f"{self.where}: the response is not WAV audio "
                                   f"(starts {h[:12]!r})")
        at = 12
        while len(h) >= at + 8:
            chunk, size = h[at:at + 4], struct.unpack("<I", h[at + 4:at + 8])[0]
            if chunk == b"data":
                if self.sample_rate is None:
                    raise AudioFormatError(f"{self.where}: WAV data before its fmt chunk")
                self.in_data = True
                return h[at + 8:]
            if len(h) < at + 8 + size:
                return b""  # wait for the whole chunk
            if chunk == b"fmt ":
                self._format(h[at + 8:at + 8 + size])
            at += 8 + size + size % 2
        return b""

    def _format(self, fmt: bytes) -> None:
        tag, channels, rate, _, _, bits = struct.unpack("<HHIIHH", fmt[:16])
        if tag == EXTENSIBLE and len(fmt) >= 26:
            tag = struct.unpack("<H", fmt[24:26])[0]
        if (tag, bits) not in ((PCM, 16), (FLOAT, 32)):
            raise AudioFormatError(f"{self.where}: WAV of format {tag} with {bits}-bit samples "
                                   "is not supported; ask for 16-bit PCM or float WAV")
        if channels not in (1, 2):
            raise AudioFormatError(f"{self.where}: WAV with {channels} channels; expected "
                                   "mono (or stereo)")
        if not MIN_RATE <= rate <= MAX_RATE:
            raise AudioFormatError(f"{self.where}: WAV sample rate {rate} Hz is not plausible")
        self.sample_rate, self.channels, self.kind, self.width = rate, channels, tag, bits // 8

    def _samples(self, data: bytes) -> torch.Tensor:
        if not data:
            return torch.zeros(0)
        if self.kind == PCM:
            x = np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0
        else:
            x = np.frombuffer(data, dtype="<f4").astype(np.float32)
        x = x.reshape(-1, self.channels).mean(axis=1)  # [n] mono
        if not np.isfinite(x).all():
            raise AudioFormatError(f"{self.where}: the audio holds NaN or infinite samples")
        return torch.from_numpy(np.ascontiguousarray(x))


def wav_file(data: bytes, where: str) -> tuple[torch.Tensor, int]:
    """One whole WAV file → (float32 mono ``[n]``, sample rate)."""
    reader = WavReader(where)
    wave = reader.feed(data)
    if reader.sample_rate is None:
        raise AudioFormatError(f"{where}: the WAV response ended inside its header")
    return wave, reader.sample_rate


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


def sse_audio(payload: str, where: str) -> tuple[str, bytes | None]:
    """One SSE event → (its type, the audio bytes it carries or None). Knows OpenAI's
    ``speech.audio.delta`` (``audio``: base64) and SGLang-Omni's ``audio.speech.chunk``
    (``audio``: ``{"data": base64}``); an ``error`` event raises."""
    try:
        event = json.loads(payload)
    except json.JSONDecodeError:
        raise AudioFormatError(f"{where}: a stream event is not JSON: {payload[:80]!r}") from None
    if not isinstance(event, dict):
        raise AudioFormatError(f"{where}: a stream event is not an object: {payload[:80]!r}")
    kind = str(event.get("type") or event.get("object") or "")
    if "error" in event:
        error = event["error"]
        message = error.get("message") if isinstance(error, dict) else error
        raise AudioFormatError(f"{where}: the server ended the stream: {message}")
    audio = event.get("audio")
    if isinstance(audio, dict):
        audio = audio.get("data")
    if not audio:
        return kind, None
    try:
        return kind, base64.b64decode(audio, validate=True)
    except (ValueError, TypeError):
        raise AudioFormatError(f"{where}: a stream event's audio is not base64") from None


def check_audio(wave: torch.Tensor, sample_rate: int | None, where: str) -> torch.Tensor:
    """The last check before a caller sees remote audio: non-empty, a known rate."""
    if sample_rate is None or wave.numel() == 0:
        raise AudioFormatError(f"{where}: the server sent no audio")
    return wave
