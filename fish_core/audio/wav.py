"""WAV in one place: 16-bit PCM bytes, the 44-byte header (whole, or streamed with an unknown
length), and a bounded WAV parser.

Writing: ``pcm16`` converts float samples as ``files.save_audio`` does (through libsndfile,
sample by sample, so chunks concatenate to the whole); ``wav_header`` and ``StreamEncoder`` put
a header in front. The HTTP service, the CLI's ``say --stream`` and the remote client's tests
all use these.

Reading: ``WavReader`` takes bytes as they arrive (a remote engine's answer) and gives float32
mono samples as soon as whole samples are there; it accepts 16-bit PCM and 32-bit float WAV,
mono or stereo (averaged). It parses each header byte once (linear time, whatever the
chunking), and a header is at most ``MAX_HEADER_BYTES`` in at most ``MAX_CHUNKS`` chunks; a
rate outside ``MIN_RATE``..``MAX_RATE`` is refused. Every refusal is an ``AudioFormatError``
naming where the bytes came from.
"""

from __future__ import annotations

import io
import struct

import numpy as np
import torch

from .files import import_soundfile

STREAMABLE = ("wav", "pcm")
UNKNOWN_SIZE = 0xFFFFFFFF  # RIFF sizes of a stream whose length is not known yet

PCM, FLOAT = 1, 3  # WAVE format tags
EXTENSIBLE = 0xFFFE
MIN_RATE, MAX_RATE = 8000, 192000
MAX_HEADER_BYTES = 1 << 20  # RIFF chunks before ``data`` (fmt, LIST, …): a real one is < 1 KiB
MAX_CHUNKS = 64


class AudioFormatError(ValueError):
    """Audio bytes that are not what this reader takes (the message names where they came
    from: a remote endpoint, a file)."""


class WavReader:
    """Incremental WAV parser: ``feed(bytes)`` → float32 ``[n]`` samples decoded so far."""

    def __init__(self, where: str):
        self.where = where
        self.header = bytearray()  # header bytes not parsed yet
        self.header_bytes = 0  # header bytes received so far
        self.chunks = 0
        self.riff = False  # the 12-byte RIFF/WAVE preamble was read
        self.sample_rate: int | None = None
        self.channels = 0
        self.kind = PCM
        self.width = 2  # bytes per sample of one channel
        self.in_data = False
        self.pending = b""

    def feed(self, data: bytes) -> torch.Tensor:
        if not self.in_data:
            self.header_bytes += len(data)
            self.header += data
            data = self._parse_header()
            if not self.in_data and self.header_bytes > MAX_HEADER_BYTES:
                raise AudioFormatError(f"{self.where}: the WAV header is larger than "
                                       f"{MAX_HEADER_BYTES} bytes; not audio this client takes")
            if not self.in_data:
                return torch.zeros(0)
        data = self.pending + data
        frame = self.width * self.channels
        usable = len(data) - len(data) % frame
        self.pending = data[usable:]
        return self._samples(data[:usable])

    def _parse_header(self) -> bytes:
        """Read RIFF chunks until ``data``; returns the bytes after its header (or b""). Parsed
        bytes are dropped from ``header``, so each byte is looked at once."""
        h = self.header
        at = self._chunks_start(h)
        if at is None:
            return b""
        try:
            while len(h) >= at + 8:
                chunk, size = bytes(h[at:at + 4]), struct.unpack("<I", h[at + 4:at + 8])[0]
                if chunk == b"data":
                    if self.sample_rate is None:
                        raise AudioFormatError(f"{self.where}: WAV data before its fmt chunk")
                    self.in_data = True
                    return bytes(h[at + 8:])
                if not self._take_chunk(h, at, chunk, size):
                    break  # wait for the whole chunk
                at += 8 + size + size % 2
        finally:
            del h[:min(at, len(h))]
        return b""

    def _chunks_start(self, h: bytearray) -> int | None:
        """Where the next chunk starts in ``h``: past the RIFF/WAVE header the first time (None
        until all of it has come), else at 0."""
        if self.riff:
            return 0
        if len(h) < 12:
            return None
        if h[:4] != b"RIFF" or h[8:12] != b"WAVE":
            raise AudioFormatError(f"{self.where}: the response is not WAV audio")
        self.riff = True
        return 12

    def _take_chunk(self, h: bytearray, at: int, chunk: bytes, size: int) -> bool:
        """Read the header chunk (not ``data``) at ``at`` in ``h``: a ``fmt `` chunk sets the
        format. False while the chunk has not all come."""
        if size > MAX_HEADER_BYTES:
            raise AudioFormatError(f"{self.where}: a WAV header chunk of {size} bytes; "
                                   "not audio this client takes")
        if len(h) < at + 8 + size:
            return False
        self.chunks += 1
        if self.chunks > MAX_CHUNKS:
            raise AudioFormatError(f"{self.where}: the WAV header has more than "
                                   f"{MAX_CHUNKS} chunks; not audio this client takes")
        if chunk == b"fmt ":
            self._format(bytes(h[at + 8:at + 8 + size]))
        return True

    def _format(self, fmt: bytes) -> None:
        if len(fmt) < 16:
            raise AudioFormatError(f"{self.where}: the WAV fmt chunk is too short")
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


def pcm16(wave: torch.Tensor) -> bytes:
    """float32 ``[T]`` → little-endian signed 16-bit samples, converted by libsndfile as
    ``fish_core.audio.files.save_audio`` converts them (sample by sample, so chunks concatenate to
    the whole)."""
    sf = import_soundfile()
    x = np.clip(wave.detach().cpu().numpy().astype(np.float32), -1.0, 1.0)
    out = io.BytesIO()
    sf.write(out, x, 44100, format="RAW", subtype="PCM_16", endian="LITTLE")
    return out.getvalue()


def wav_header(sample_rate: int, samples: int | None = None) -> bytes:
    """The 44-byte header of a mono 16-bit WAV; ``samples=None`` for a stream of unknown length."""
    data = UNKNOWN_SIZE if samples is None else 2 * samples
    riff = UNKNOWN_SIZE if samples is None else 36 + data
    return (b"RIFF" + struct.pack("<I", riff) + b"WAVE"
            + b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, 2 * sample_rate, 2, 16)
            + b"data" + struct.pack("<I", data))


class StreamEncoder:
    """Chunks of one stream → bytes: a WAV header (unknown length) first, then 16-bit PCM."""

    def __init__(self, fmt: str, sample_rate: int):
        if fmt not in STREAMABLE:
            raise ValueError(f"only {', '.join(STREAMABLE)} can be streamed, got {fmt!r}")
        self.header = wav_header(sample_rate) if fmt == "wav" else b""

    def __call__(self, chunk: torch.Tensor) -> bytes:
        out, self.header = self.header + pcm16(chunk), b""
        return out
