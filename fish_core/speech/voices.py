"""Reusable voices: reference clips already encoded to codec codes, saved as ``.safetensors``.

A voice holds one or more clips of the same speaker, each with its transcript. File layout:
tensors ``clip.<i>`` = int32 codes ``[num_codebooks, frames]``; string metadata ``format``
(``sailfish-voice``), ``version``, ``name``, ``texts`` (JSON list), ``sample_rate``,
``frame_length``, ``num_codebooks``; optionally ``lexicon`` (the voice's own pronunciation
lexicon, as a lexicon file's text: ``text.lexicon``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save

from ..audio.atomic import write_bytes
from ..text.lexicon import Lexicon, LexiconError
from ..text.prompt import Reference
from ..text.plan import Turn, check_text

FORMAT = "sailfish-voice"
VERSION = 1


class VoiceError(ValueError):
    """A voice file is unreadable, of another format, or holds invalid codes."""


@dataclass
class Voice:
    name: str
    clips: list[Reference] = field(default_factory=list)
    sample_rate: int = 44100
    frame_length: int = 2048
    lexicon: Lexicon | None = field(default=None, kw_only=True)  # its own pronunciations

    @property
    def frames(self) -> int:
        return sum(clip.codes.shape[1] for clip in self.clips)

    @property
    def duration(self) -> float:
        return self.frames * self.frame_length / self.sample_rate

    def tagged(self, speaker: int) -> list[Reference]:
        """The clips as prompt references of speaker ``speaker`` (every clip tagged with it)."""
        return [Reference(Turn(clip.text, speaker).tagged, clip.codes) for clip in self.clips]

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        if path.suffix != ".safetensors":
            raise VoiceError(f"voice files end in .safetensors, got {path.name!r}")
        if not self.clips:
            raise VoiceError(f"voice {self.name!r} has no clips to save")
        tensors = {f"clip.{i}": clip.codes.to(torch.int32).contiguous()
                   for i, clip in enumerate(self.clips)}
        num_codebooks = self.clips[0].codes.shape[0]
        meta = {"format": FORMAT, "version": str(VERSION), "name": self.name,
                "texts": json.dumps([clip.text for clip in self.clips], ensure_ascii=False),
                "sample_rate": str(self.sample_rate), "frame_length": str(self.frame_length),
                "num_codebooks": str(num_codebooks)}
        if self.lexicon:
            meta["lexicon"] = self.lexicon.text()
        # our own temporary file, renamed when whole (never safetensors' own file writing)
        return write_bytes(path, save(tensors, metadata=meta))

    @classmethod
    def load(cls, path: str | Path, num_codebooks: int | None = None,
             codebook_size: int | None = None) -> "Voice":
        """Read and validate a voice file; ``num_codebooks``/``codebook_size`` (the model's)
        tighten the checks."""
        path = Path(path)
        meta, tensors = read_voice_file(path)
        version, texts, sample_rate, frame_length = voice_metadata(meta, path)
        if not isinstance(texts, list) or len(texts) != len(tensors) or not texts:
            raise VoiceError(f"{path}: {len(tensors)} clips but {len(texts)} transcripts")
        clips = []
        for i, text in enumerate(texts):
            codes = tensors.get(f"clip.{i}")
            clips.append(Reference(str(text), check_codes(codes, f"{path.name} clip {i}",
                                                          num_codebooks, codebook_size)))
        lexicon = None
        if meta.get("lexicon"):
            try:
                lexicon = Lexicon.parse(meta["lexicon"], f"{path.name} lexicon")
            except LexiconError as e:
                raise VoiceError(f"{path}: damaged lexicon ({e})") from None
        return cls(meta.get("name") or path.stem, clips, sample_rate, frame_length,
                   lexicon=lexicon)


def read_voice_file(path: Path) -> tuple[dict, dict]:
    """A voice file's metadata (checked to be ours) and tensors."""
    if not path.is_file():
        raise VoiceError(f"voice file not found: {path}")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError) as e:
        raise VoiceError(f"cannot read voice file {path}: {e}") from None
    if meta.get("format") != FORMAT:
        raise VoiceError(f"{path} is not a Sailfish voice file (format={meta.get('format')!r})")
    return meta, tensors


def voice_metadata(meta: dict, path: Path) -> tuple[int, list, int, int]:
    """Version (one this Sailfish reads), transcripts, sample rate and frame length."""
    try:
        version = int(meta.get("version", "0"))
        texts = json.loads(meta["texts"])
        sample_rate = int(meta.get("sample_rate", 44100))
        frame_length = int(meta.get("frame_length", 2048))
    except (KeyError, ValueError) as e:
        raise VoiceError(f"{path}: damaged metadata ({e})") from None
    if version > VERSION:
        raise VoiceError(f"{path} is voice format v{version}; this Sailfish reads up to "
                         f"v{VERSION} — please update")
    return version, texts, sample_rate, frame_length


def check_codes(codes, where: str, num_codebooks: int | None = None,
                codebook_size: int | None = None) -> torch.Tensor:
    if not isinstance(codes, torch.Tensor) or codes.dim() != 2 or codes.shape[1] == 0:
        shape = None if codes is None else tuple(codes.shape)
        raise VoiceError(f"{where}: codes must be a [codebooks, frames] tensor, got {shape}")
    if codes.dtype.is_floating_point or codes.dtype == torch.bool:
        raise VoiceError(f"{where}: codes must be integers, got {codes.dtype}")
    if num_codebooks is not None and codes.shape[0] != num_codebooks:
        raise VoiceError(f"{where}: {codes.shape[0]} codebooks, the model uses {num_codebooks}")
    low, high = int(codes.min()), int(codes.max())
    if low < 0 or (codebook_size is not None and high >= codebook_size):
        raise VoiceError(f"{where}: code values must lie in [0, {codebook_size or 'size'}), "
                         f"got [{low}, {high}]")
    return codes.long()


def encode_voice(codec, audio, text: str, name: str = "voice", sample_rate: int | None = None
                 ) -> Voice:
    """Encode a reference clip (file path, or tensor/array with ``sample_rate``; a
    ``{"waveform", "sample_rate"}`` dict through ``audio.files.from_mapping``) and its
    transcript into a reusable voice with ``codec`` (a ``fish_core.codec.model.Codec``)."""
    from ..audio.files import load_audio, prepare_audio

    if not check_text(text, "reference transcript").strip():
        raise ValueError("reference transcript must be the words spoken in the reference "
                         "audio, got an empty text")
    if isinstance(audio, (str, Path)):
        wave = load_audio(audio, target_sr=codec.sample_rate)
    else:
        wave = prepare_audio(audio, sample_rate, target_sr=codec.sample_rate,
                             name="reference audio")
    codes = codec.encode(wave)[0].cpu()
    return Voice(name, [Reference(text.strip(), codes)], codec.sample_rate, codec.frame_length)
