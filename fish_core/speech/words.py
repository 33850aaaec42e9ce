"""Words in time: each spoken word of a result with its start and end on the output timeline.

The times come from a forced aligner (``hearing``: Qwen3-ForcedAligner) listening to the audio,
not from the TTS model. Each text batch is aligned on its own, with its own text (what the model
read: after the lexicon, without pause tags, speaker tags or ``[whisper]``-style directions),
in the audio the model made for it; then its words are placed where the batch sits in the
output: after the pauses and silences before it, on its subtitle cue, scaled by the speaking
rate (a batch stretched to ``n`` samples from ``m`` has its times scaled by ``n / m``). A word
keeps the speaker of its turn and the take it was said in.

The setting (``words``): None (off), ``"auto"`` (``True``): the language of each batch detected
from its script (Latin and Cyrillic text is timed as a space-separated language, CJK ideographs
as Chinese, kana as Japanese, Hangul as Korean), a batch in another script timed as a whole
(sentence-level: one item spanning it), or one of the aligner's 11 languages by name (then any
other name is an error naming them). The aligner itself is the backend's (``Timer``): loaded on
the first request that asks for words, freed with the model.
"""

from __future__ import annotations

import importlib.util
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from typing import Protocol, Sequence

import torch

from ..params import RequestError
from ..text import plan as textplan
from ..text.captions import CAPTION_FORMATS, Line, caption_lines, to_karaoke_vtt, to_srt, to_vtt

# The aligner's languages (``hearing.words.LANGUAGES``; a test keeps the two equal).
LANGUAGES = ("Chinese", "English", "Cantonese", "French", "German", "Italian", "Japanese",
             "Korean", "Portuguese", "Russian", "Spanish")
AUTO = "auto"
DIRECTION = re.compile(r"\[[^\[\]\n]*\]")  # ``[whisper]``-style directions: not spoken
SPLITTERS = {"Japanese": "nagisa", "Korean": "soynlp"}  # optional word splitters
SCRIPTS = (("HIRAGANA", "kana"), ("KATAKANA", "kana"), ("HANGUL", "hangul"), ("CJK", "cjk"),
           ("LATIN", "latin"), ("CYRILLIC", "cyrillic"))  # a letter's name → its script


@dataclass(frozen=True)
class TimedWord:
    """One spoken word: seconds on the result's timeline; ``speaker`` (dialogue: the voice's
    index; None where the text named none); ``take`` (0 for the first); ``segment``: the index
    of the result's segment (text batch) it was said in. ``level`` is ``"sentence"`` for an
    item spanning a batch the aligner could not time word by word (``words="auto"``)."""

    text: str
    start: float
    end: float
    speaker: int | None = None
    take: int = 0
    segment: int = 0
    level: str = "word"

    def as_dict(self) -> dict:
        found = {"text": self.text, "start": self.start, "end": self.end}
        if self.speaker is not None:
            found["speaker"] = self.speaker
        found["take"], found["segment"] = self.take, self.segment
        if self.level != "word":
            found["level"] = self.level
        return found


class Timer(Protocol):
    """What a backend gives to time words (the local one: ``hearing.ForcedAligner``)."""

    def split(self, text: str, language: str) -> list[str]:
        """The words the aligner times in ``text`` (raises ``RuntimeError`` when the language's
        optional word splitter is missing)."""

    def time(self, waves: Sequence[torch.Tensor], sample_rate: int,
             word_lists: Sequence[list[str]]) -> list[list[tuple[float, float]]]:
        """Each word's ``(start, end)`` in seconds from its clip's start."""


def check_words(value, field: str = "words") -> str | None:
    """The checked setting: None (off), ``"auto"`` or the canonical name of one of the
    aligner's languages; a language it does not know is an error naming those it does, and a
    named language whose optional word splitter is missing one naming the package."""
    if value is None or value is False:
        return None
    if value is True:
        return AUTO
    if not isinstance(value, str):
        raise RequestError(field, None, value, f"{field} must be True, \"auto\" or a language "
                           f"name, got {type(value).__name__}")
    name = value.strip().lower()
    if name in ("", "off", "none", "false"):
        return None
    if name in (AUTO, "true", "on"):
        return AUTO
    return _known_language(name, value, field)


def _known_language(name: str, value: str, field: str) -> str:
    """The aligner's language called ``name`` (``value`` lowered), its optional word splitter
    installed."""
    for language in LANGUAGES:
        if language.lower() == name:
            missing = SPLITTERS.get(language)
            if missing and importlib.util.find_spec(missing) is None:
                raise RequestError(field, None, value,
                                   f"{field}: {language} words are split by the optional "
                                   f"package {missing!r}: pip install {missing}")
            return language
    raise RequestError(field, None, value,
                       f"{field}: the aligner does not know {value!r}; it times "
                       f"{', '.join(LANGUAGES)} (or \"auto\": sentence-level timing where the "
                       "script is none of theirs)")


def detect_language(text: str) -> str | None:
    """The aligner's language for ``text`` by its letters' scripts: kana → Japanese, Hangul →
    Korean, CJK ideographs → Chinese, Latin or Cyrillic → a space-separated language (English
    or Russian: the aligner's word splitting is the same for all of them), else None."""
    counts = Counter(_script(ch) for ch in text)
    for script, language in (("kana", "Japanese"), ("hangul", "Korean"), ("cjk", "Chinese")):
        if counts[script]:
            return language
    if counts["other"] > counts["latin"] + counts["cyrillic"]:
        return None
    if counts["cyrillic"] > counts["latin"]:
        return "Russian"
    return "English" if counts["latin"] else None


def _script(ch: str) -> str | None:
    """The script ``detect_language`` counts ``ch`` in (None: not a letter)."""
    if not unicodedata.category(ch).startswith("L"):
        return None
    name = unicodedata.name(ch, "")
    return next((script for prefix, script in SCRIPTS if name.startswith(prefix)), "other")


def spoken_parts(text: str) -> list[tuple[int | None, str]]:
    """A batch's text as ``(speaker, words spoken)`` turns: no speaker tags, no directions."""
    out = []
    for turn in textplan.split_turns(text):
        said = " ".join(DIRECTION.sub(" ", turn.text).split())
        if said:
            out.append((turn.speaker, said))
    return out


def place_words(timer: Timer, setting: str, texts: Sequence[str],
                speakers: Sequence[int | None], waves: Sequence[torch.Tensor],
                spans: Sequence[tuple[int, int]], sample_rate: int, take: int = 0
                ) -> list[TimedWord]:
    """The timed words of one take: batch i's text ``texts[i]`` (spoken by ``speakers[i]``
    where its text has no tags) aligned in ``waves[i]`` (the batch's audio as made) and placed
    at ``spans[i]`` (samples ``[start, end)`` on the output: its length over the wave's is the
    stretch). Batches are aligned together (``timer.time`` batches them)."""
    plans = {}
    for i, text in enumerate(texts):
        plan = _batch_words(timer, setting, text, speakers[i]) if waves[i].numel() else None
        if plan is not None:
            plans[i] = plan
    jobs = [i for i, (_, split) in plans.items() if split is not None]
    times = timer.time([waves[i] for i in jobs], sample_rate,
                       [[w for words in plans[i][1] for w in words] for i in jobs]
                       ) if jobs else []
    timed = dict(zip(jobs, times))
    out: list[TimedWord] = []
    for i, (parts, split) in plans.items():
        out += _placed(parts, split, timed.get(i, ()), spans[i], waves[i], sample_rate, take, i)
    return out


def _batch_words(timer: Timer, setting: str, text: str, speaker: int | None
                 ) -> tuple[list[tuple[int | None, str]], list[list[str]] | None] | None:
    """One batch's spoken parts (``(speaker, said)``, ``speaker`` where its text has no tags)
    and each part's words as the aligner splits them, or None for the words: the batch is
    timed as one sentence (a script none of the aligner's, in ``"auto"``). None: says nothing."""
    parts = [(s if s is not None else speaker, said) for s, said in spoken_parts(text)]
    if not parts:
        return None
    language = setting if setting != AUTO else detect_language(" ".join(p for _, p in parts))
    split = None
    if language is not None:
        try:
            split = [timer.split(said, language) for _, said in parts]
        except RuntimeError:
            if setting != AUTO:
                raise
    return parts, (split if split is not None and any(split) else None)


def _placed(parts: list[tuple[int | None, str]], split: list[list[str]] | None, times,
            span: tuple[int, int], wave: torch.Tensor, sample_rate: int, take: int,
            segment: int) -> list[TimedWord]:
    """One batch's words at ``span`` on the output (its length over ``wave``'s is the stretch):
    each at its aligned ``times`` (seconds in ``wave``), or without ``split`` the batch as one
    sentence-level item spanning it."""
    start, end = span
    offset, length = start / sample_rate, wave.shape[-1] / sample_rate
    scale = (end - start) / wave.shape[-1]
    if split is None:
        return [TimedWord(" ".join(said for _, said in parts), round(offset, 6),
                          round(end / sample_rate, 6), parts[0][0], take, segment, "sentence")]
    pairs, out = iter(times), []
    for (speaker, _), words in zip(parts, split):
        for word in words:
            s, e = next(pairs)
            s, e = min(max(s, 0.0), length), min(max(e, 0.0), length)
            out.append(TimedWord(word, round(offset + s * scale, 6),
                                 round(offset + max(s, e) * scale, 6), speaker, take, segment))
    return out


# ---------------------------------------------------------------------------- captions
def word_lines(words: Sequence[TimedWord], texts: Sequence[str], **grouping) -> list[Line]:
    """Caption lines of ``words``: a line never spans two segments or two speakers, and shows
    its segment's own text (``texts[segment]``, punctuation and spacing kept)."""
    runs: list[list[TimedWord]] = []
    for word in words:
        if runs and (runs[-1][-1].segment, runs[-1][-1].speaker) == (word.segment, word.speaker):
            runs[-1].append(word)
        else:
            runs.append([word])
    lines: list[Line] = []
    for run in runs:
        text = texts[run[0].segment] if run[0].segment < len(texts) else None
        said = " ".join(p for speaker, p in spoken_parts(text) if speaker in (None, run[0].speaker)
                        ) if text else None
        lines += caption_lines(run, said or None, **grouping)
    return lines


def captions(words: Sequence[TimedWord], fmt: str, texts: Sequence[str] = (),
             **grouping) -> str:
    """``words`` as ``fmt``: ``"json"`` (every word with its speaker, take and segment),
    ``"srt"``, ``"vtt"`` or ``"karaoke"`` (WebVTT with a timestamp before every word)."""
    import json

    if fmt not in CAPTION_FORMATS:
        raise ValueError(f"captions: format {fmt!r} is not one of {', '.join(CAPTION_FORMATS)}")
    if fmt == "json":
        return json.dumps([w.as_dict() for w in words], ensure_ascii=False, indent=1) + "\n"
    lines = word_lines(words, texts, **grouping)
    return {"srt": to_srt, "vtt": to_vtt, "karaoke": to_karaoke_vtt}[fmt](lines)


def caption_format(path: str) -> str:
    """The caption format a file name asks for: ``.json``, ``.srt``, ``.vtt``, and
    ``.karaoke.vtt`` (word-by-word WebVTT)."""
    name = str(path).lower()
    if name.endswith(".karaoke.vtt"):
        return "karaoke"
    for fmt in ("json", "srt", "vtt"):
        if name.endswith("." + fmt):
            return fmt
    raise ValueError(f"{path}: a words file ends in .json, .srt, .vtt or .karaoke.vtt")
