"""``SpeechSynthesizer``: the one interface of every synthesizer, local
(``fish_core.local.synthesizer.Synthesizer``) or remote (``fish_core.remote.RemoteSynthesizer``).

Both have the same methods with the same keywords and defaults (``tests/test_interface.py``
checks the signatures against this Protocol). Sampling parameters are the ``**sampling``
keywords ``temperature``, ``top_p``, ``top_k``, ``max_new_tokens`` (``fish_core.params``:
defaults ``DEFAULTS``, checked by ``SamplingParams.from_options``); any other keyword is a
``TypeError`` naming it, on either synthesizer.

``on_chunk(samples, sample_rate)`` (tts, dialogue, subtitles): the returned waveform (take 1's)
handed out in consecutive pieces, float32 ``[n]`` on the CPU, that concatenate to it exactly.
The local synthesizer hands them out while it generates (``local/layout.py``); a remote one
hands out the whole result in one piece when it is done.

Finishing keywords (tts, stream, dialogue, subtitles; ``speech.finishing``): ``loudness`` (a
target in LUFS, or an ``audio.loudness.Loudness`` with its ceiling and what it normalises:
mix, speaker track or line), ``speed`` (0.5 … 2, pitch kept) and ``lexicon`` (a
``text.lexicon.Lexicon`` or its file; each voice's own lexicon goes over it). Both apply them
the same way, a remote one on the audio the engine returns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping, Protocol, Sequence, runtime_checkable

from ..params import CHUNK_FRAMES, FIRST_FRAMES
from ..text.plan import DEFAULT_MAX_BYTES
from .results import Speech, SubtitleSpeech
from .voices import Voice

if TYPE_CHECKING:
    import torch

Progress = Callable[[int, int], None]
OnChunk = Callable[["torch.Tensor", int], None]


@runtime_checkable
class SpeechSynthesizer(Protocol):
    @property
    def sample_rate(self) -> int:
        """Samples per second of every waveform it returns."""

    def release_caches(self) -> None:
        """Free what the next call can re-make (KV caches; nothing for a remote engine)."""

    def encode_voice(self, audio, text: str, name: str = "voice",
                     sample_rate: int | None = None) -> Voice:
        """A reusable voice from a reference clip and its transcript."""

    def tts(self, text: str, voice: Voice | Sequence[Voice] | None = None, *,
            seed: int | None = None, max_bytes: int = DEFAULT_MAX_BYTES,
            history_turns: int = 3, takes: int | None = None,
            on_progress: Progress | None = None, cancel: Callable[[], bool] | None = None,
            on_chunk: OnChunk | None = None, loudness=None, speed: float = 1.0, lexicon=None,
            **sampling) -> Speech | list[Speech]:
        """Speak ``text``; with ``takes=N`` a list of N Speech (take k seeded ``seed + k``)."""

    def stream(self, text: str, voice: Voice | Sequence[Voice] | None = None, *,
               seed: int | None = None, max_bytes: int = DEFAULT_MAX_BYTES,
               history_turns: int = 3, first_frames: int = FIRST_FRAMES,
               chunk_frames: int = CHUNK_FRAMES, loudness=None, speed: float = 1.0, lexicon=None,
               **sampling):
        """``tts`` as an iterator of float32 waveform chunks (``.sample_rate``, ``.seed``,
        ``close()``)."""

    def dialogue(self, script: str, voices: Mapping[str, Voice] | Sequence[Voice] = (), *,
                 pause: float = 0.0, turn_by_turn: bool = False,
                 require_voices: bool | None = None,
                 seed: int | None = None, max_bytes: int = DEFAULT_MAX_BYTES,
                 history_turns: int = 3, takes: int | None = None,
                 on_progress: Progress | None = None, cancel: Callable[[], bool] | None = None,
                 on_chunk: OnChunk | None = None, loudness=None, speed: float = 1.0, lexicon=None,
                 **sampling) -> Speech | list[Speech]:
        """A multi-speaker script, voices by name or in speaker order."""

    def subtitles(self, srt: str, voice: Voice | None = None, *,
                  seed: int | None = None, history_turns: int = 3,
                  on_progress: Progress | None = None,
                  cancel: Callable[[], bool] | None = None, on_chunk: OnChunk | None = None,
                  loudness=None, speed: float = 1.0, lexicon=None,
                  **sampling) -> SubtitleSpeech:
        """Each SRT cue spoken at its start time."""
