"""Audio input/output for the codec.

Input is validated, downmixed to mono (mean over channels), resampled to 44.1 kHz with soxr
("HQ") and returned as float32 in [-1, 1]. No loudness or peak normalisation is applied, as in the
reference. Every rejected input raises ``AudioError`` (a ``ValueError``) that says what was
expected.

Limits (all overridable per call):
  * at least ``MIN_SECONDS`` = 0.1 s: about two codec frames (one frame is 2048 samples = 46 ms);
    anything shorter carries no usable voice for cloning.
  * at most ``MAX_SECONDS`` = 600 s (10 minutes).
  * not all-silent: the peak after downmixing must reach ``SILENCE_PEAK`` (1e-4, i.e. -80 dBFS).

soundfile (file I/O) and soxr (resampling) are imported only when used, so the engine runs
without them; using what needs one that is missing raises ``AudioError`` naming the package.
"""

from __future__ import annotations

import io
import os
import sys
import tempfile
import threading
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

SAMPLE_RATE = 44100
MIN_SECONDS = 0.1
MAX_SECONDS = 600.0
SILENCE_PEAK = 1e-4
MAX_CHANNELS = 16

# Integer PCM -> float: divide by the full-scale value (and remove the offset of unsigned 8-bit).
_INT_SCALE = {np.dtype(np.int8): (0, 128.0), np.dtype(np.uint8): (128, 128.0),
              np.dtype(np.int16): (0, 32768.0), np.dtype(np.int32): (0, 2147483648.0)}

# Writable formats: extension -> (soundfile format, default subtype, allowed subtypes).
_WRITE_FORMATS = {
    ".wav": ("WAV", "PCM_16", ("PCM_16", "PCM_24", "PCM_32", "FLOAT")),
    ".flac": ("FLAC", "PCM_16", ("PCM_16", "PCM_24")),
}


class AudioError(ValueError):
    """Audio that cannot be used: unreadable, malformed, silent, too short or too long."""


def import_soundfile():
    """The soundfile module (reading and writing audio files)."""
    try:
        import soundfile
    except ImportError:
        raise AudioError("reading or writing audio files needs the soundfile package: "
                         "pip install soundfile") from None
    return soundfile


def import_soxr():
    """The soxr module (resampling)."""
    try:
        import soxr
    except ImportError:
        raise AudioError("resampling audio needs the soxr package: pip install soxr") from None
    return soxr


# The first bytes of the audio files libsndfile reads: (what, test on the first 12 bytes).
_MAGIC = (("WAV", lambda b: b[:4] in (b"RIFF", b"RF64") and b[8:12] == b"WAVE"),
          ("FLAC", lambda b: b[:4] == b"fLaC"),
          ("Ogg", lambda b: b[:4] == b"OggS"),
          ("AIFF", lambda b: b[:4] == b"FORM"),
          ("MP3", lambda b: b[:3] == b"ID3" or (len(b) > 1 and b[0] == 0xFF
                                                 and b[1] & 0xE0 == 0xE0)))


def sniff(head: bytes) -> str | None:
    """The audio container ``head`` (a file's first bytes) starts like, or None."""
    return next((kind for kind, test in _MAGIC if test(head)), None)


_STDERR_LOCK = threading.Lock()


@contextmanager
def decoder_notes_hidden():
    """libmpg123, inside libsndfile, prints ``Note: Illegal Audio-MPEG-Header ...`` lines
    straight to the process's stderr (file descriptor 2) while it reads a damaged MP3, before
    our own error says what is wrong. Here fd 2 is held in a temporary file; what else was
    written to it meanwhile is passed on, the ``Note:`` lines are dropped. Where stderr is no
    file descriptor (captured by a test, an embedding app) nothing changes."""
    try:
        sys.stderr.flush()
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        yield
        return
    with _STDERR_LOCK, tempfile.TemporaryFile() as held:
        saved = os.dup(fd)
        os.dup2(held.fileno(), fd)
        try:
            yield
        finally:
            os.dup2(saved, fd)
            os.close(saved)
            _pass_on_all_but_notes(held)


def _pass_on_all_but_notes(held) -> None:
    """What was written to the held stderr, less the ``Note:`` lines, on to stderr."""
    held.seek(0)
    rest = [line for line in held.read().decode("utf-8", "replace").splitlines(True)
            if not line.startswith("Note: ")]
    if rest:
        sys.stderr.write("".join(rest))
        sys.stderr.flush()


def check_audio_file(path, field: str = "audio"):
    """The soundfile ``info`` of an audio file, or an AudioError naming ``field`` that says
    what is wrong with it: missing, a folder, unreadable, empty, not audio at all, or audio of a
    known kind that cannot be decoded (corrupt or truncated)."""
    path = Path(path)
    head = _file_head(path, field)
    sf = import_soundfile()
    try:
        with decoder_notes_hidden():
            return sf.info(str(path))
    except (sf.LibsndfileError, RuntimeError, TypeError):
        kind = sniff(head)
        if kind is None:  # libsndfile's own message can say "does not exist" here: it does
            raise AudioError(f"{field}: {path} is not audio: its content is none of WAV, FLAC, "
                             "Ogg (Vorbis/Opus), MP3 or AIFF") from None
        # libsndfile says "File does not exist" of a corrupt MP3: say what is known instead
        raise AudioError(f"{field}: {path} starts like {kind} but cannot be decoded: it is "
                         "corrupt, truncated or in an encoding libsndfile does not read") from None


def _file_head(path: Path, field: str) -> bytes:
    """The first bytes of the file at ``path`` (enough to ``sniff``), or an AudioError naming
    ``field`` when it is missing, a folder, unreadable or empty."""
    if not path.exists():
        raise AudioError(f"{field}: file not found: {path}")
    if path.is_dir():
        raise AudioError(f"{field}: {path} is a folder, not an audio file")
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except OSError as e:
        raise AudioError(f"{field}: cannot read {path}: {e.strerror or e}") from None
    if not head:
        raise AudioError(f"{field}: {path} is empty (0 bytes)")
    return head


def load_audio(path, *, target_sr: int = SAMPLE_RATE, min_seconds: float = MIN_SECONDS,
               max_seconds: float = MAX_SECONDS, field: str = "audio") -> torch.Tensor:
    """Read an audio file (wav/flac/ogg/mp3/... via soundfile) -> mono float32 [T] at
    ``target_sr``. Errors name ``field`` and say what is wrong with the file."""
    path = Path(path)
    info = check_audio_file(path, field)
    sf = import_soundfile()
    # Refuse absurdly long files before decoding them.
    if info.samplerate > 0 and info.frames > 0 and info.frames / info.samplerate > max_seconds:
        raise AudioError(f"{field}: {path} is {info.frames / info.samplerate:.1f} s long; "
                         f"the limit is {max_seconds:g} s")
    try:
        with decoder_notes_hidden():
            data, sr = sf.read(str(path), dtype="float32", always_2d=True)  # [T, C]
    except (sf.LibsndfileError, RuntimeError, TypeError) as e:
        raise AudioError(f"{field}: {path} cannot be decoded past its header (corrupt or "
                         f"truncated: {e})") from None
    return prepare_audio(data.T, sr, target_sr=target_sr, min_seconds=min_seconds,
                         max_seconds=max_seconds, name=str(path))


def read_audio_bytes(data: bytes, *, max_seconds: float = MAX_SECONDS,
                     name: str = "audio") -> tuple[torch.Tensor, int]:
    """An encoded audio file in memory (an upload) -> (mono float32 [T], its own sample rate),
    parsed once: the length is checked from the header before the samples are decoded. Errors
    name ``name`` and never the in-memory file object."""
    sf = import_soundfile()
    try:
        with sf.SoundFile(io.BytesIO(data)) as f:
            sr = f.samplerate
            if sr > 0 and f.frames / sr > max_seconds:
                raise AudioError(f"{name}: is {f.frames / sr:.1f} s long; the limit is "
                                 f"{max_seconds:g} s")
            samples = f.read(dtype="float32", always_2d=True)  # [T, C]
    except sf.LibsndfileError as e:  # its str() names the BytesIO object: the reason only
        raise AudioError(f"{name}: is not readable audio ({e.error_string})") from None
    except (RuntimeError, TypeError) as e:
        raise AudioError(f"{name}: is not readable audio ({e})") from None
    return prepare_audio(samples.T, sr, target_sr=sr, max_seconds=max_seconds, name=name), sr


def prepare_audio(audio, sample_rate=None, *, target_sr: int = SAMPLE_RATE,
                  min_seconds: float = MIN_SECONDS, max_seconds: float = MAX_SECONDS,
                  name: str = "audio") -> torch.Tensor:
    """Validate in-memory audio -> mono float32 [T] at ``target_sr``.

    ``audio``: tensor or ndarray shaped [T], [C, T] or [B, C, T] (ComfyUI style; item 0 is
    used), or a ``{"waveform", "sample_rate"}`` dict (``from_mapping``). Float samples are taken
    as is; integer PCM (int8/uint8/int16/int32) is scaled to [-1, 1].
    """
    if isinstance(audio, Mapping):
        audio, sample_rate = from_mapping(audio, name)
    sr = _check_rate(sample_rate, name)
    x = _channels_first(_as_float32(audio, name), name)  # [C, T]
    _check_samples(x, sr, name, min_seconds, max_seconds)

    mono = x.mean(axis=0, dtype=np.float32)
    if float(np.abs(mono).max()) < SILENCE_PEAK:
        raise AudioError(f"{name}: audio is silent (peak below {SILENCE_PEAK:g}, i.e. -80 dBFS)")
    if sr != target_sr:
        mono = import_soxr().resample(mono, sr, target_sr, quality="HQ")
    return torch.from_numpy(np.ascontiguousarray(mono, dtype=np.float32))


def _check_samples(x: np.ndarray, sr: float, name: str, min_seconds: float,
                   max_seconds: float) -> None:
    """``x`` ([C, T] at ``sr``) holds some audio, all finite, of an allowed length."""
    if x.shape[1] == 0:
        raise AudioError(f"{name}: audio is empty (0 samples)")
    bad = int(np.count_nonzero(~np.isfinite(x)))
    if bad:
        raise AudioError(f"{name}: audio contains {bad} NaN/Inf samples")
    seconds = x.shape[1] / sr
    if seconds < min_seconds:
        raise AudioError(f"{name}: audio is too short to encode ({seconds:.3f} s); "
                         f"at least {min_seconds:g} s is needed")
    if seconds > max_seconds:
        raise AudioError(f"{name}: audio is {seconds:.1f} s long; the limit is {max_seconds:g} s")


def from_mapping(audio: Mapping, name: str = "audio"):
    """``{"waveform": [B, C, T], "sample_rate": sr}`` → (waveform, sample rate): the shape of
    ComfyUI's AUDIO, kept for scripts that pass one to ``encode_voice``. The nodes unpack AUDIO
    themselves (``nodes/audio.py``); fish_core otherwise takes tensors, arrays and paths."""
    if "waveform" not in audio or "sample_rate" not in audio:
        raise AudioError(f"{name}: an audio dict needs 'waveform' and 'sample_rate' keys, "
                         f"got {sorted(audio)}")
    return audio["waveform"], audio["sample_rate"]


def save_audio(path, wave, sample_rate: int = SAMPLE_RATE, *, subtype: str | None = None) -> Path:
    """Write ``wave`` ([T], [C, T] or [1, C, T], float in [-1, 1]) to .wav or .flac.

    Samples are clipped to [-1, 1]. Default subtype is 16-bit PCM for both formats; wav also takes
    PCM_24/PCM_32/FLOAT and flac PCM_24. Parent folders are created; the file is replaced
    atomically (``atomic.write_file``: a failed write leaves the old file). Returns the path.
    """
    path = Path(path)
    fmt, subtype = _write_format(path, subtype)
    sr = _check_rate(sample_rate, str(path))
    if sr != int(sr):
        raise AudioError(f"cannot write {path}: sample_rate must be an integer, got {sample_rate}")
    x = _wave_to_write(path, wave)

    from .atomic import write_bytes

    sf = import_soundfile()
    data = io.BytesIO()
    try:
        sf.write(data, np.clip(x, -1.0, 1.0).T, int(sr), subtype=subtype, format=fmt)
    except (sf.LibsndfileError, RuntimeError) as e:
        raise AudioError(f"cannot write {path}: {e}") from None
    return write_bytes(path, data.getvalue())


def _write_format(path: Path, subtype: str | None) -> tuple[str, str]:
    """The soundfile format and subtype to write ``path`` with (its extension's default
    subtype unless one is asked for)."""
    ext = path.suffix.lower()
    if ext not in _WRITE_FORMATS:
        raise AudioError(f"cannot write {path}: unsupported extension {ext!r}; "
                         f"use one of {sorted(_WRITE_FORMATS)}")
    fmt, default_subtype, allowed = _WRITE_FORMATS[ext]
    subtype = (subtype or default_subtype).upper()
    if subtype not in allowed:
        raise AudioError(f"cannot write {path}: subtype {subtype!r} is not one of {allowed} "
                         f"for {ext}")
    return fmt, subtype


def _wave_to_write(path: Path, wave) -> np.ndarray:
    """``wave`` ([T], [C, T] or [1, C, T]) as float32 [C, T], not empty, all finite."""
    x = _as_float32(wave, str(path))
    if x.ndim == 3 and x.shape[0] == 1:
        x = x[0]
    if x.ndim not in (1, 2):
        raise AudioError(f"cannot write {path}: expected a wave shaped [T], [C, T] or [1, C, T], "
                         f"got {list(x.shape)}")
    x = x.reshape(1, -1) if x.ndim == 1 else x
    if x.shape[1] == 0:
        raise AudioError(f"cannot write {path}: wave is empty")
    if not np.isfinite(x).all():
        raise AudioError(f"cannot write {path}: wave contains NaN/Inf samples")
    return x


def _check_rate(sample_rate, name: str) -> float:
    try:
        sr = float(sample_rate)
    except (TypeError, ValueError):
        sr = float("nan")
    if not np.isfinite(sr) or sr <= 0:
        raise AudioError(f"{name}: sample_rate must be a positive number, got {sample_rate!r}")
    return int(sr) if sr == int(sr) else sr


def _as_float32(audio, name: str) -> np.ndarray:
    """Tensor/ndarray -> float32 ndarray; integer PCM is scaled to [-1, 1]."""
    if isinstance(audio, torch.Tensor):
        audio = audio.detach().cpu()
        if audio.dtype in (torch.bfloat16, torch.float16):
            audio = audio.float()
        audio = audio.numpy()
    elif not isinstance(audio, np.ndarray):
        raise AudioError(f"{name}: expected a torch.Tensor or numpy.ndarray, "
                         f"got {type(audio).__name__}")
    if audio.dtype.kind == "f":
        return audio.astype(np.float32, copy=False)
    if audio.dtype in _INT_SCALE:
        offset, scale = _INT_SCALE[audio.dtype]
        return ((audio.astype(np.float32) - offset) / scale).astype(np.float32)
    raise AudioError(f"{name}: unsupported sample dtype {audio.dtype}; expected float samples in "
                     f"[-1, 1] or int8/uint8/int16/int32 PCM")


def _channels_first(x: np.ndarray, name: str) -> np.ndarray:
    """[T] | [C, T] | [B, C, T] -> [C, T] (batch item 0)."""
    if x.ndim == 3:
        if x.shape[0] == 0:
            raise AudioError(f"{name}: audio batch is empty (shape {list(x.shape)})")
        x = x[0]
    if x.ndim == 1:
        x = x[None]
    if x.ndim != 2:
        raise AudioError(f"{name}: expected audio shaped [T], [C, T] or [B, C, T], "
                         f"got {list(x.shape)}")
    if x.shape[0] == 0:
        raise AudioError(f"{name}: audio has no channels (shape {list(x.shape)})")
    if x.shape[0] > MAX_CHANNELS:
        raise AudioError(f"{name}: audio has {x.shape[0]} channels (max {MAX_CHANNELS}); "
                         f"expected channels first, [C, T] - was it [T, C]?")
    return x
