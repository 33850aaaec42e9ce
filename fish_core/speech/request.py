"""``Request``: one speech request, checked once, as every door hands it to a synthesizer.

Every door (the Python API of either synthesizer, the CLI, the ComfyUI nodes, the HTTP
service) builds a ``Request`` with one of its constructors (``Request.tts``, ``dialogue``,
``subtitles``; a stream is a ``tts`` request) and reports a ``RequestError`` in its own field
names (``RequestError.renamed``). The constructors hold every check of a request (text,
voices, sampling, seed, takes, history, batch size, pauses, finishing); nothing below them
checks again. The seed is picked here, once: a request is reproducible from its ``Request``.

One rule per range (``params.Rule``): sampling in ``params.SAMPLING_RULES``, seeds in
``params.SEED_RULE``, the rest below; speed (``audio.stretch.check_speed``), loudness
(``audio.loudness.check_target``) and the pause budget (``text.pauses``) where their effect
lives. ``Accepts`` is what a backend takes beyond the rules (a remote engine's seed range, speaker
count and voices by name), given to the constructors by the front (``speech.front``); its
attributes are read only when a request needs them (a remote engine is asked then).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..params import (CHUNK_FRAMES, DEFAULTS, FIRST_FRAMES, MAX_SEED, RequestError, Rule,
                      SamplingParams, check_seed, random_seed)
from ..text import plan as textplan
from ..text import script as textscript
from ..text import srt as textsrt
from ..text.script import check_script, check_speaker_count
from .finishing import Finishing
from .results import MAX_TAKES
from .voices import Voice
from .words import check_words

KINDS = ("tts", "dialogue", "subtitles")
TAKES = Rule(1, MAX_TAKES, integer=True)
HISTORY_TURNS = Rule(0, None, integer=True)
MAX_BYTES = Rule(16, None, integer=True)  # text bytes per batch
FRAMES = Rule(1, 1024, integer=True)  # a stream's first chunk and later chunks, in frames
PAUSE = Rule(0, 10)  # seconds between a dialogue's turns


@dataclass(frozen=True)
class Accepts:
    """What a backend takes beyond the rules: seeds drawn below ``max_seed`` (a remote engine
    draws its own half range so that take and piece seeds stay in it); ``max_speakers`` of its
    ``model``; whether the model invents a voice for a speaker given none."""

    max_seed: int = MAX_SEED
    max_speakers: int | None = None
    model: str = "this model"
    invents_voices: bool = False

    def voices(self, voice):
        """``voice`` as the backend takes it (a remote engine's voices may be given by name)."""
        return voice


ANY = Accepts()


@dataclass(frozen=True)
class Request:
    kind: str  # "tts" (and streams), "dialogue" or "subtitles"
    text: str  # the text, the script or the SRT
    voices: tuple[Voice, ...] = ()  # in speaker order (a dialogue's by name: ``names``)
    sampling: SamplingParams = DEFAULTS
    seed: int = 0  # the base seed, picked once: take k draws with seed + k
    takes: int | None = None  # None: one result; N: a list of N
    history_turns: int = 3
    max_bytes: int = textplan.DEFAULT_MAX_BYTES
    finishing: Finishing = field(default_factory=Finishing)
    pause: float = 0.0  # seconds between a dialogue's turns
    turn_by_turn: bool = False
    turns: tuple = ()  # a dialogue's checked turns (``text.plan.Turn``)
    cues: tuple = ()  # the subtitles' cues (``text.srt.Cue``)
    first_frames: int = FIRST_FRAMES  # a stream's chunking
    chunk_frames: int = CHUNK_FRAMES
    words: str | None = None  # timed words: None, "auto" or a language (``speech.words``)

    @property
    def count(self) -> int:
        """How many takes are generated."""
        return self.takes or 1

    # ---------------------------------------------------------------- constructors
    @classmethod
    def tts(cls, text: str, voice=None, *, seed: int | None = None,
            max_bytes: int = textplan.DEFAULT_MAX_BYTES, history_turns: int = 3,
            takes: int | None = None, loudness=None, speed: float = 1.0, lexicon=None,
            first_frames: int = FIRST_FRAMES, chunk_frames: int = CHUNK_FRAMES,
            words=None, accepts: Accepts = ANY, where: str = "tts", **sampling) -> "Request":
        """Speak ``text`` in ``voice`` (one ``Voice``, several: voice i is ``<|speaker:i|>``,
        or None: the model's own)."""
        if not textplan.check_text(text, "text").strip():
            raise RequestError("text", None, text, "text is empty: nothing to say")
        sampling = SamplingParams.from_options(sampling, where)  # before the backend is asked
        if accepts.max_speakers is not None:
            check_speaker_count(textplan.split_turns(text), accepts.max_speakers, accepts.model)
        return cls("tts", text, tuple(as_voices(accepts.voices(voice))),
                   **common(seed, takes, history_turns, max_bytes, loudness, speed, lexicon,
                            accepts, sampling),
                   first_frames=FRAMES.check(first_frames, "first_frames"),
                   chunk_frames=FRAMES.check(chunk_frames, "chunk_frames"),
                   words=check_words(words))

    @classmethod
    def dialogue(cls, script: str, voices: Mapping[str, Voice] | Sequence[Voice] = (), *,
                 pause: float = 0.0, turn_by_turn: bool = False,
                 require_voices: bool | None = None, seed: int | None = None,
                 max_bytes: int = textplan.DEFAULT_MAX_BYTES, history_turns: int = 3,
                 takes: int | None = None, loudness=None, speed: float = 1.0, lexicon=None,
                 words=None, accepts: Accepts = ANY, where: str = "dialogue", **sampling
                 ) -> "Request":
        """A multi-speaker script, ``voices`` by name or in speaker order; with voices given
        every speaker maps to one unless ``require_voices`` is False (default: False where the
        model invents voices)."""
        if not textplan.check_text(script, "script").strip():
            raise textscript.ScriptError("the script is empty: nothing to say")
        sampling = SamplingParams.from_options(sampling, where)  # before the backend is asked
        voices = accepts.voices(voices)
        if isinstance(voices, Mapping):
            names, voice_list = list(voices), as_voices(list(voices.values()))
        else:
            voice_list = as_voices(list(voices))
            names = [v.name for v in voice_list]
        if require_voices is None:
            require_voices = bool(voice_list) and not accepts.invents_voices
        turns = check_script(script, names, require_voices, accepts.max_speakers,
                             accepts.model)
        if isinstance(pause, bool) or not PAUSE.holds(pause) or pause != pause:
            raise RequestError("pause", PAUSE, pause,
                               f"pause must be between 0 and 10 seconds, got {pause}")
        return cls("dialogue", script, tuple(voice_list),
                   **common(seed, takes, history_turns, max_bytes, loudness, speed, lexicon,
                            accepts, sampling),
                   pause=float(pause), turn_by_turn=bool(turn_by_turn), turns=tuple(turns),
                   words=check_words(words))

    @classmethod
    def subtitles(cls, srt: str, voice: Voice | None = None, *, seed: int | None = None,
                  history_turns: int = 3, loudness=None, speed: float = 1.0, lexicon=None,
                  words=None, accepts: Accepts = ANY, where: str = "subtitles", **sampling
                  ) -> "Request":
        """Each SRT cue spoken at its start time."""
        cues = textsrt.parse_srt(srt)
        sampling = SamplingParams.from_options(sampling, where)  # before the backend is asked
        return cls("subtitles", srt, tuple(as_voices(accepts.voices(voice))),
                   **common(seed, None, history_turns, textplan.DEFAULT_MAX_BYTES, loudness,
                            speed, lexicon, accepts, sampling),
                   cues=tuple(cues), words=check_words(words))


def common(seed, takes, history_turns, max_bytes, loudness, speed, lexicon, accepts: Accepts,
           sampling: SamplingParams) -> dict:
    """The settings every kind of request takes, checked (the seed picked when not given)."""
    if takes is not None:
        TAKES.check(takes, "takes")
    return dict(sampling=sampling,
                seed=pick_seed(seed, accepts.max_seed), takes=takes,
                history_turns=HISTORY_TURNS.check(history_turns, "history_turns"),
                max_bytes=MAX_BYTES.check(max_bytes, "max_bytes"),
                finishing=Finishing.of(loudness, speed, lexicon))


def pick_seed(seed: int | None, max_seed: int = MAX_SEED) -> int:
    """A request's base seed: ``seed`` (checked), or a fresh one below half of ``max_seed``
    when that is not the whole range (so the seeds of takes and pieces stay in it)."""
    if seed is not None:
        return check_seed(seed)
    fresh = random_seed()
    return fresh if max_seed == MAX_SEED else fresh % (max_seed // 2 + 1)


def as_voices(voice) -> list[Voice]:
    """None, one ``Voice`` or a list/tuple of them, as a list. Anything else (a file path: read
    it with ``Voice.load`` first) is an error naming the voice field."""
    if voice is None:
        return []
    voices = list(voice) if isinstance(voice, (list, tuple)) else [voice]
    for v in voices:
        if not isinstance(v, Voice):
            raise RequestError("voice", None, v,
                               f"voice must be a Voice (read a file with Voice.load), got "
                               f"{type(v).__name__} {str(v)[:60]!r}")
    return voices
