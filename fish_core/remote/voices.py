"""Voices on a remote engine: ``RemoteVoice`` (reference audio + transcript, no codes) and
``RemoteVoices``, the registry of one engine: voices made here (``encode``), registered in its
voice store (``register``, or once per voice with ``register_voices``: by a hash of its audio),
and what a request sends for a voice (``for_request``: clips inline, or the id the engine knows
it by; a saved voice file is named from the engine's library, checked there once)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..audio.files import load_audio, prepare_audio
from ..speech.voices import Voice
from ..text import plan as textplan
from .dialects import Clip, stated_consent
from .engine import RemoteEngine

FRAME_LENGTH = 2048  # samples per S2 codec frame


@dataclass
class RemoteVoice(Voice):
    """A voice for a remote engine: its reference clips as audio + transcript (no codes)."""

    references: list[Clip] = field(default_factory=list)
    model: str = ""  # the remote model it was made for

    def save(self, path):
        held = ("holds reference audio, not codes" if self.references
                else "is kept in the engine's voice store, not as codes")
        keep = ("register it on the server (register_voice)" if self.references
                else "use it by name on that engine")
        raise ValueError(f"voice {self.name!r} was made by the remote model "
                         f"{self.model or 'of an engine'} and {held}: a remote model cannot "
                         "encode a voice to codes, so it cannot be saved as a Sailfish voice "
                         f"file. Encode it with a local model to save it, or {keep}.")


class RemoteVoices:
    def __init__(self, engine: RemoteEngine, register: bool = False,
                 consent: str | None = None):
        """``register``: send a voice's clips once, into the engine's store, then name it by
        id; ``consent``: the consent stated for engines whose store asks for it."""
        self.engine = engine
        self.register_all = bool(register)
        self.consent = consent
        if self.register_all and engine.dialect.needs_consent:
            stated_consent(consent, engine.dialect.name)  # before any voice is sent
        self._ids: dict[str, str] = {}  # our key → the id the engine knows it by

    def voice(self, clips: list[Clip], name: str) -> RemoteVoice:
        return RemoteVoice(name, [], self.engine.sample_rate, FRAME_LENGTH, clips,
                           self.engine.spec.label)

    def encode(self, audio, text: str, name: str = "voice",
               sample_rate: int | None = None) -> RemoteVoice:
        """A voice from a reference clip (file path, or tensor/array with ``sample_rate``; a
        ``{"waveform", "sample_rate"}`` dict as ``audio.files.from_mapping`` takes it) and its
        transcript, checked and resampled here; the engine encodes it when a request uses it."""
        if not textplan.check_text(text, "reference transcript").strip():
            raise ValueError("reference transcript must be the words spoken in the reference "
                             "audio, got an empty text")
        rate = self.engine.sample_rate
        if isinstance(audio, str) or hasattr(audio, "__fspath__"):
            wave = load_audio(audio, target_sr=rate)
        else:
            wave = prepare_audio(audio, sample_rate, target_sr=rate, name="reference audio")
        return self.voice([Clip(wave.float().cpu(), rate, text.strip())], name)

    def register(self, voice: RemoteVoice, name: str | None = None,
                 consent: str | None = None) -> RemoteVoice:
        """``voice`` stored in the engine's voice store as ``name`` (default its own): a voice
        that names it there (no clips). The consent is checked before anything is sent."""
        dialect, transport = self.engine.dialect, self.engine.transport
        if not isinstance(voice, RemoteVoice) or not voice.references:
            raise ValueError("voice: register a voice made by encode_voice on this remote "
                             "model (reference audio + transcript)")
        name = voice.name if name is None else name
        if dialect.voices_path is None:
            dialect.voice_names(transport)  # raises: no voice library
        if dialect.needs_consent:
            consent = stated_consent(consent if consent is not None else self.consent,
                                     dialect.name)
        dialect.add_voice(transport, name, voice.references[0], consent)
        self._ids[name] = name
        return self.voice([], name)

    def named(self, name: str) -> RemoteVoice:
        """The engine's own voice ``name`` (one registered there, or built in): checked against
        its voice list now; an unknown name is an error listing the engine's voices."""
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"voice: expected the name of one of the engine's voices, got "
                             f"{name!r}")
        name = name.strip()
        if name not in self._ids:
            engine = self.engine
            known = engine.dialect.voice_names(engine.transport)  # raises: no voice library
            if name not in known:
                raise ValueError(
                    f"voice {name[:60]!r} is not one of the voices of {engine.label}; it has "
                    f"{engine.transport.quote_names(known) or 'none'}. Register it there first "
                    "(`voice register`, register_voice, Voice Encode with a consent), or give "
                    "a reference clip")
            self._ids[name] = name
        return self.voice([], name)

    def resolve(self, voice):
        """``voice`` with every name in it (a string: the engine's voice of that name, see
        ``named``) made a voice; a ``Voice``, a list or a mapping of them passes through."""
        if isinstance(voice, str):
            return self.named(voice)
        if isinstance(voice, (list, tuple)):
            return [self.resolve(v) for v in voice]
        if isinstance(voice, Mapping):
            return {k: self.resolve(v) for k, v in voice.items()}
        return voice

    def for_request(self, voice: Voice | None) -> tuple[list[Clip], str | None]:
        """What a request sends for ``voice``: reference clips, or an engine voice id."""
        dialect = self.engine.dialect
        if voice is None:
            return [], None
        if isinstance(voice, RemoteVoice) and voice.references:
            # A store keeps one clip per voice: a voice of several clips is always sent inline.
            if (not self.register_all or dialect.voices_path is None
                    or len(voice.references) > 1):
                if len(voice.references) > dialect.max_clips:
                    raise ValueError(f"voice {voice.name!r} has {len(voice.references)} clips; "
                                     f"the {dialect.name} dialect takes {dialect.max_clips}")
                return voice.references, None
            return [], self._registered(voice)
        return [], self._library_voice(voice.name)

    def _registered(self, voice: RemoteVoice) -> str:
        """Register ``voice`` in the engine's store once (by a hash of its audio) and reuse
        that id."""
        dialect, transport = self.engine.dialect, self.engine.transport
        digest = hashlib.sha1()
        for clip in voice.references:
            digest.update(clip.audio.numpy().tobytes())  # samples: WAV bytes hold a timestamp
            digest.update(f"{clip.sample_rate}|{clip.text}".encode())
        key = f"sailfish-{digest.hexdigest()[:16]}"
        if key not in self._ids:
            consent = self.consent
            if dialect.needs_consent:
                consent = stated_consent(consent, dialect.name)
            if key not in dialect.voice_names(transport):
                dialect.add_voice(transport, key, voice.references[0], consent)
            self._ids[key] = key
        return self._ids[key]

    def _library_voice(self, name: str) -> str:
        engine = self.engine
        if name not in self._ids:
            known = engine.dialect.voice_names(engine.transport)
            if name not in known:
                raise ValueError(
                    f"voice {name!r} holds codes only (a saved voice file), which the remote "
                    f"model {engine.spec.label} cannot take, so the server must have a voice of "
                    f"that name, but {engine.label} has "
                    f"{engine.transport.quote_names(known) or 'none'}: add it to the server's "
                    "voice library, or make the voice with encode_voice / Voice Encode on this "
                    "remote model")
            self._ids[name] = name
        return self._ids[name]

    def script_voice(self, voices: Sequence[Voice]) -> RemoteVoice | None:
        """One voice holding every speaker's clips, each transcript tagged with its speaker
        (reference i speaks as ``<|speaker:i|>``), for a whole-script request."""
        clips = []
        for i, v in enumerate(voices):
            if not isinstance(v, RemoteVoice) or not v.references:
                raise ValueError(f"voice {v.name!r} is named from the engine's voice library; a "
                                 f"whole-script {self.engine.spec.label} request sends each "
                                 "speaker's reference audio: make it with encode_voice, or "
                                 "speak turn by turn")
            clips += [Clip(c.audio, c.sample_rate, textplan.Turn(c.text, i).tagged)
                      for c in v.references]
        return self.voice(clips, "script") if clips else None
