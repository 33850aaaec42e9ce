"""``Request``: one speech request, checked once, as every door hands it to a synthesizer.

A request is its kind, its text, its voices and its ``Settings`` (``speech.settings``: sampling,
seed, takes, history, batching, finishing; checked when they are made, before any model loads).
Every door (the Python API of either synthesizer, the CLI, the ComfyUI nodes, the HTTP service)
builds one with a constructor (``Request.tts``, ``dialogue``, ``subtitles``; a stream is a
``tts`` request), handing its settings on as one object or as flat keywords, and reports a
``RequestError`` (``params``: field, rule, value) in its own field names. The constructors
check the text (its ``[pause:…]`` tags taken apart here, once, and kept: ``spoken``), the
script or the subtitles and the voices; nothing below them checks again. The seed is picked
here, once: a request is reproducible from its ``Request``.

One rule per range (``params.Rule``): sampling in ``params.SAMPLING_RULES``, seeds in
``params.SEED_RULE``, the settings' own in ``speech.settings``, speed in ``audio.stretch.SPEED``,
loudness in ``audio.loudness.TARGET``, a dialogue's pause below, pause tags in ``text.pauses``.
``Accepts`` is what a backend takes beyond the rules (a remote engine's seed range, speaker
count and voices by name), given to the constructors by the front (``speech.front``); its
attributes are read only when a request needs them (a remote engine is asked then).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Sequence

from ..params import MAX_SEED, RequestError, Rule
from ..text import plan as textplan
from ..text import srt as textsrt
from ..text.pauses import Spoken, check_total, split_pauses
from ..text.script import EmptyScript, check_script, check_speaker_count
from .finishing import Finishing
from .settings import DEFAULT, Settings, pick_seed  # noqa: F401 - pick_seed: the request's
from .voices import Voice

KINDS = ("tts", "dialogue", "subtitles")
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
    hears: bool = True  # whether it can check takes (``Settings.check``: a speech recogniser)

    def voices(self, voice):
        """``voice`` as the backend takes it (a remote engine's voices may be given by name)."""
        return voice


ANY = Accepts()


@dataclass(frozen=True)
class Request:
    kind: str  # "tts" (and streams), "dialogue" or "subtitles"
    text: str  # the text, the script or the SRT
    voices: tuple[Voice, ...] = ()  # in speaker order (a dialogue's by name: ``names``)
    settings: Settings = DEFAULT  # its seed picked
    pause: float = 0.0  # seconds between a dialogue's turns
    turn_by_turn: bool = False
    turns: tuple = ()  # a dialogue's checked turns (``text.plan.Turn``)
    cues: tuple = ()  # the subtitles' cues (``text.srt.Cue``)
    # The text taken apart at its pause tags, once: the text's (tts), each turn's (dialogue),
    # each cue's (subtitles); ``joined``: a dialogue's turns as one conversation.
    spoken: tuple[Spoken, ...] = ()
    joined: Spoken | None = None

    # ---------------------------------------------------------------- its settings
    @property
    def sampling(self):
        return self.settings.sampling

    @property
    def seed(self) -> int:
        return self.settings.seed

    @property
    def takes(self) -> int | None:
        return self.settings.takes

    @property
    def count(self) -> int:
        """How many takes are generated."""
        return self.settings.count

    @property
    def history_turns(self) -> int:
        return self.settings.history_turns

    @property
    def max_bytes(self) -> int:
        return self.settings.max_bytes

    @property
    def first_frames(self) -> int:
        return self.settings.first_frames

    @property
    def chunk_frames(self) -> int:
        return self.settings.chunk_frames

    @property
    def finishing(self) -> Finishing:
        return self.settings.finishing

    @property
    def words(self) -> str | None:
        return self.settings.words

    # ---------------------------------------------------------------- constructors
    @classmethod
    def tts(cls, text: str, voice=None, settings: Settings | None = None, *,
            accepts: Accepts = ANY, where: str = "tts", **options) -> "Request":
        """Speak ``text`` in ``voice`` (one ``Voice``, several: voice i is ``<|speaker:i|>``,
        or None: the model's own). ``settings`` and/or flat keywords (``Settings.of``)."""
        spoken = spoken_text(text, "text")
        settings = Settings.of(settings, where, **options)  # before the backend is asked
        check_hearing(settings, accepts)
        if accepts.max_speakers is not None:
            check_speaker_count(textplan.split_turns(text), accepts.max_speakers, accepts.model)
        return cls("tts", text, tuple(as_voices(accepts.voices(voice))),
                   settings.seeded(accepts.max_seed), spoken=(spoken,))

    @classmethod
    def dialogue(cls, script: str, voices: Mapping[str, Voice] | Sequence[Voice] = (),
                 settings: Settings | None = None, *, pause: float = 0.0,
                 turn_by_turn: bool = False, require_voices: bool | None = None,
                 accepts: Accepts = ANY, where: str = "dialogue", **options) -> "Request":
        """A multi-speaker script, ``voices`` by name or in speaker order; with voices given
        every speaker maps to one unless ``require_voices`` is False (default: False where the
        model invents voices)."""
        if not textplan.check_text(script, "script").strip():
            raise EmptyScript("the script is empty: nothing to say", "script", script)
        settings = Settings.of(settings, where, **options)  # before the backend is asked
        check_hearing(settings, accepts)
        check_pause(pause)
        names, voice_list = named_voices(accepts.voices(voices))
        if require_voices is None:
            require_voices = bool(voice_list) and not accepts.invents_voices
        turns = check_script(script, names, require_voices, accepts.max_speakers,
                             accepts.model)
        spoken = [spoken_text(t.tagged, "script", f"turn {i + 1} of the script")
                  for i, t in enumerate(turns)]
        check_total(sum(seconds(s) for s in spoken), "script")  # the script's budget
        return cls("dialogue", script, tuple(voice_list), settings.seeded(accepts.max_seed),
                   pause=float(pause), turn_by_turn=bool(turn_by_turn), turns=tuple(turns),
                   spoken=tuple(spoken),
                   joined=split_pauses("".join(t.tagged for t in turns), "script"))

    @classmethod
    def subtitles(cls, srt: str, voice: Voice | None = None, settings: Settings | None = None,
                  *, accepts: Accepts = ANY, where: str = "subtitles", **options) -> "Request":
        """Each SRT cue spoken at its start time."""
        cues = textsrt.parse_srt(srt)
        spoken = [spoken_text(cue.text, f"cue {cue.index}", f"cue {cue.index}") for cue in cues]
        settings = Settings.of(settings, where, **options)  # before the backend is asked
        check_total(sum(seconds(s) for s in spoken), "subtitles")  # the file's budget
        return cls("subtitles", srt, tuple(as_voices(accepts.voices(voice))),
                   settings.seeded(accepts.max_seed), cues=tuple(cues), spoken=tuple(spoken))

    def with_voices(self, voices) -> "Request":
        """This ``tts`` or ``subtitles`` request in ``voices`` (a voice made once the model
        is there: a node's reference clip), nothing else checked again."""
        if self.kind == "dialogue":
            raise ValueError("a dialogue maps its speakers to its voices: build it with them")
        return replace(self, voices=tuple(as_voices(voices)))


def named_voices(voices) -> tuple[list[str], list[Voice]]:
    """A dialogue's voices by name (a mapping) or in speaker order (their own names)."""
    if isinstance(voices, Mapping):
        return list(voices), as_voices(list(voices.values()))
    voice_list = as_voices(list(voices))
    return [v.name for v in voice_list], voice_list


def check_pause(pause) -> None:
    """A dialogue's ``pause`` between turns: 0 to 10 seconds."""
    if isinstance(pause, bool) or not PAUSE.holds(pause):
        raise RequestError("pause", PAUSE, pause,
                           f"pause must be between 0 and 10 seconds, got {pause}")


def check_hearing(settings: Settings, accepts: Accepts) -> None:
    """Checked takes need a backend that hears them (a local model's speech recogniser)."""
    if settings.check and not accepts.hears:
        raise RequestError("check", None, True, "check: a remote engine cannot hear its takes "
                           "(checked takes need a local model and its speech recogniser)")


def asked(request: "Request") -> str:
    """What a request's takes were asked to say, as a transcript would write it: the text
    (or each turn's) without pause or speaker tags, the words as given (not respelled)."""
    from .casting import transcript

    texts = [t.text for t in request.turns] if request.kind == "dialogue" else [request.text]
    return " ".join(transcript(text) for text in texts if split_pauses(text, "text").pieces)


def spoken_text(text: str, field: str, what: str | None = None) -> Spoken:
    """``text`` taken apart at its pause tags (checked), with words to say."""
    if field == "text" and not textplan.check_text(text, "text").strip():
        raise RequestError("text", None, text, "text is empty: nothing to say")
    spoken = split_pauses(text, field)
    if not spoken.pieces:
        if what is None:
            raise RequestError(field, None, text, f"{field} is empty: nothing to say")
        raise RequestError(field, None, text,
                           f"{what} holds only pauses: give it words to say")
    return spoken


def seconds(spoken: Spoken) -> float:
    """The seconds of ``[pause:…]`` silence written in ``spoken``."""
    return (spoken.lead or 0.0) + sum(p.after or 0.0 for p in spoken.pieces)


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
