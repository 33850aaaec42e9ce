"""Raw PCM as today's engines stream it, read within a byte budget.

* vLLM-Omni answers ``stream: true`` + ``response_format: "pcm"`` with a raw chunked body of
  16-bit little-endian mono samples (no header; the rate is the engine's, 44.1 kHz for S2 and
  Drama 3).
* SGLang-Omni answers the same request with server-sent events whose ``audio.speech.chunk``
  objects carry base64 PCM in ``audio.data`` (and ``audio.format`` / ``audio.sample_rate``).

Every read is bounded: the transport stops an answer past ``reply_budget`` (the bytes
``max_new_tokens`` frames of audio can take; ``http.Response``), and ``bounded_lines`` caps the
length of one line of an event stream (an ``AudioFormatError`` naming the endpoint)."""

from __future__ import annotations

import math
from typing import Iterator

import numpy as np
import torch

from .http import MAX_LINE_BYTES, quote as bounded
from ..audio.wav import MAX_RATE, MIN_RATE, AudioFormatError, WavReader, wav_file

S2_RATE = 44100  # the ModifiedDAC codec of S2 and Drama 3
FRAME_SAMPLES = 2048  # codec samples per generated frame


def reply_budget(max_new_tokens: int, sample_rate: int) -> int:
    """The most bytes one answer of at most ``max_new_tokens`` frames may take: that audio
    (plus 16 frames of slack) as 32-bit stereo at ``sample_rate`` (or 48 kHz, whichever is
    higher), base64-inflated, plus 256 KiB of headers and framing. Generous by design: it stops
    a runaway server, not a real one."""
    rate = max(int(sample_rate), 48000)
    samples = math.ceil((max_new_tokens + 16) * FRAME_SAMPLES * rate / S2_RATE)
    return samples * 8 * 4 // 3 + (256 << 10)


def bounded_lines(pieces: Iterator[bytes], where: str, max_line: int = MAX_LINE_BYTES
                  ) -> Iterator[bytes]:
    """Lines (with their ``\\n``) of a byte stream, none longer than ``max_line``."""
    pending = bytearray()
    for piece in pieces:
        pending += piece
        while (end := pending.find(b"\n")) >= 0:
            yield bytes(pending[:end + 1])
            del pending[:end + 1]
        if len(pending) > max_line:
            raise AudioFormatError(f"{where}: a stream line is longer than {max_line} bytes")
    if pending:
        yield bytes(pending)


class PcmReader:
    """Incremental s16le mono PCM: ``feed(bytes)`` → float32 ``[n]`` (an odd byte waits)."""

    def __init__(self, where: str, sample_rate: int):
        if not MIN_RATE <= sample_rate <= MAX_RATE:
            raise AudioFormatError(f"{where}: PCM sample rate {sample_rate} Hz is not plausible")
        self.where, self.sample_rate, self.pending = where, int(sample_rate), b""

    def feed(self, data: bytes) -> torch.Tensor:
        data = self.pending + data
        usable = len(data) - len(data) % 2
        self.pending = data[usable:]
        if not usable:
            return torch.zeros(0)
        x = np.frombuffer(data[:usable], dtype="<i2").astype(np.float32) / 32768.0
        return torch.from_numpy(x)


class BodyReader:
    """A streamed body that is either WAV (an older engine's answer: it starts with ``RIFF``)
    or raw s16le PCM at ``sample_rate`` (today's vLLM-Omni), told apart by its first bytes;
    ``wav``: the server said WAV (its Content-Type), so it must be WAV."""

    def __init__(self, where: str, sample_rate: int, wav: bool = False):
        self.where, self.sample_rate, self.wav = where, sample_rate, wav
        self.head = b""
        self.reader: WavReader | PcmReader | None = None

    def feed(self, data: bytes) -> torch.Tensor:
        if self.reader is None:
            self.head += data
            if len(self.head) < 4:
                return torch.zeros(0)
            if self.wav or self.head[:4] == b"RIFF":
                self.reader = WavReader(self.where)
            else:
                self.reader = PcmReader(self.where, self.sample_rate)
            data, self.head = self.head, b""
        samples = self.reader.feed(data)
        if self.reader.sample_rate is not None:
            self.sample_rate = self.reader.sample_rate
        return samples


def chunk_audio(audio: bytes, event: dict, default_rate: int, where: str, quote=bounded
                ) -> tuple[torch.Tensor, int]:
    """The samples of one SGLang-Omni ``audio.speech.chunk``: PCM (``audio.format`` ``pcm``,
    at ``audio.sample_rate`` or ``default_rate``) or, from older versions, one WAV file; or of
    one OpenAI ``speech.audio.delta`` (base64 ``audio``, ``response_format`` pcm)."""
    meta = event.get("audio") if isinstance(event.get("audio"), dict) else {}
    fmt = str(meta.get("format") or event.get("response_format") or "").lower()
    if audio[:4] == b"RIFF" or fmt == "wav":
        return wav_file(audio, where)
    if fmt not in ("", "pcm"):
        raise AudioFormatError(f"{where}: a stream chunk in format {quote(fmt)}; expected "
                               "pcm (ask with response_format \"pcm\")")
    rate = meta.get("sample_rate") or default_rate
    if isinstance(rate, bool) or not isinstance(rate, int):
        raise AudioFormatError(f"{where}: a stream chunk's sample_rate is not an integer")
    reader = PcmReader(where, rate)
    if len(audio) % 2:
        raise AudioFormatError(f"{where}: a PCM stream chunk holds half a sample")
    return reader.feed(audio), rate
