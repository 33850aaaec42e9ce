"""Finished audio, the one step both synthesizers (local and remote) take around generation.

Before: the text the model reads. The global lexicon, with each voice's own over it, respells
words (``text.lexicon``); ``[pause:…]`` tags are taken out (``text.pauses``) and the text
between them is planned into batches (``text.plan``), each pause kept on the batches beside it
(``Batch.before`` / ``Batch.after``). ``plan`` (the CLI's ``plan`` command) shows exactly that.

After: the audio. Each text batch's audio is time-stretched on its own (``speed``; pauses and
the silence between turns keep their exact length), the batches are laid out with their
silences (``timeline``), then the whole is brought to a loudness (``loudness``): the mix, each
speaker's track or each line, the tracks still summing to the mix sample for sample.

Streams and live playback take the same steps chunk by chunk in ``speech.layout.TakeLayout``
(a batch is stretched when it ends; loudness with a gain fixed from the first batch,
``audio.loudness.StreamGain``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import ClassVar, Sequence

import torch

from ..audio import loudness as lufs
from ..params import RequestError
from ..audio.stretch import SPEED, check_speed, stretch
from ..text import plan as textplan
from ..text.lexicon import Lexicon, LexiconError
from ..text.pauses import Spoken, split_pauses
from .results import Batch, Speech
from .voices import Voice


@dataclass(frozen=True)
class Finishing:
    loudness: lufs.Loudness | None = None
    speed: float = 1.0
    lexicon: Lexicon | None = None  # the global one; voices may hold their own

    RULES: ClassVar[dict] = {"loudness": lufs.TARGET, "speed": SPEED}  # each number's one rule

    @classmethod
    def of(cls, loudness=None, speed: float | None = 1.0, lexicon=None) -> "Finishing":
        """The checked settings: ``loudness`` a target in LUFS or a ``Loudness``; ``speed``
        0.5 … 2; ``lexicon`` a ``Lexicon`` or a lexicon file's path."""
        if isinstance(lexicon, (str, Path)):
            lexicon = Lexicon.load(lexicon, "lexicon")
        elif lexicon is not None and not isinstance(lexicon, Lexicon):
            raise LexiconError(f"lexicon must be a Lexicon or a file path, got "
                               f"{type(lexicon).__name__}", "lexicon", lexicon)
        return cls(lufs.as_loudness(loudness), check_speed(speed), lexicon)

    def keywords(self) -> dict:
        """The keywords ``of`` makes these settings from (``speech.settings``)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def stretches(self) -> bool:
        return self.speed != 1.0

    @property
    def touches_audio(self) -> bool:
        return self.stretches or self.loudness is not None

    def as_dict(self) -> dict:
        found: dict = {"speed": self.speed}
        if self.lexicon:
            found["lexicon"] = self.lexicon.digest()
        if self.loudness is not None:
            found["loudness"] = self.loudness.as_dict()
        return found

    # ---------------------------------------------------------------- text
    def lexicon_of(self, voice: Voice | None) -> Lexicon | None:
        """The global lexicon with ``voice``'s own over it."""
        own = getattr(voice, "lexicon", None)
        if self.lexicon is None:
            return own
        return self.lexicon.merged(own)

    def respell(self, text: str, voices: Sequence[Voice] = (), speaker: int | None = None
                ) -> str:
        """``text`` as the model will read it, pauses still in: each speaker's turn (by its
        ``<|speaker:i|>`` tag; untagged text is ``speaker``'s, default the first voice's)
        respelled by its voice's lexicon over the global one."""
        lexicons = [self.lexicon_of(v) for v in voices] or [self.lexicon]
        if not any(lexicons):
            return text
        parts = textplan.SPEAKER_TAG.split(text)
        out, current = [], speaker or 0
        for i, part in enumerate(parts):
            if i % 2:
                out.append(f"<|speaker:{part}|>")
                current = int(part)
            else:
                lexicon = lexicons[current] if current < len(lexicons) else self.lexicon
                out.append(lexicon.apply(part) if lexicon else part)
        return "".join(out)

    def batches(self, text: str, voices: Sequence[Voice] = (),
                max_bytes: int | None = textplan.DEFAULT_MAX_BYTES, speaker: int | None = None,
                field: str = "text") -> list[Batch]:
        """The text batches of a text not yet taken apart at its pauses (a remote engine's
        whole script): ``pieces`` of ``split_pauses(text)``."""
        spoken = split_pauses(text, field)
        if not spoken.pieces:
            raise RequestError(field, None, text, f"{field} is empty: nothing to say")
        return self.pieces(spoken, voices, max_bytes, speaker)

    def pieces(self, spoken: Spoken, voices: Sequence[Voice] = (),
               max_bytes: int | None = textplan.DEFAULT_MAX_BYTES, speaker: int | None = None
               ) -> list[Batch]:
        """The text batches of a text taken apart at its pauses when its request was made
        (``speech.request``; ``tts``, ``stream``, a dialogue turn when ``speaker`` is given, a
        subtitle cue): each piece respelled and planned (``max_bytes`` None: each piece is one
        batch, as a subtitle cue is), each pause kept on the batches beside it."""
        batches: list[Batch] = []
        for piece in spoken.pieces:
            text = self.respell(piece.text, voices, speaker)
            texts = [text] if max_bytes is None else textplan.plan_batches(text, max_bytes)
            planned = [Batch(b, speaker) for b in texts]
            planned[-1] = replace(planned[-1], after=piece.after)
            batches += planned
        if spoken.lead is not None:
            batches[0] = replace(batches[0], before=spoken.lead)
        return batches

    def turn_batches(self, turns: Sequence[textplan.Turn], spoken: Sequence[Spoken],
                     joined: Spoken, voices: Sequence[Voice], max_bytes: int | None,
                     turn_by_turn: bool) -> list[Batch]:
        """A dialogue's batches: each turn on its own (``turn_by_turn``: ``spoken``, each
        turn's pieces), or the turns joined as one conversation (``joined``) and planned
        together."""
        if turn_by_turn:
            return [b for t, s in zip(turns, spoken)
                    for b in self.pieces(s, voices, max_bytes, t.speaker)]
        return self.pieces(joined, voices, max_bytes)

    def cue_batches(self, spoken: Sequence[Spoken], voices: Sequence[Voice] = ()
                    ) -> tuple[list[Batch], list[int]]:
        """Subtitle cues (each taken apart at its pauses) as text batches (a cue with pauses
        is several) and the cue of each."""
        batches, owners = [], []
        for i, pieces in enumerate(spoken):
            mine = self.pieces(pieces, voices, None)
            batches += mine
            owners += [i] * len(mine)
        return batches, owners

    # ---------------------------------------------------------------- audio
    def piece(self, wave: torch.Tensor, sample_rate: int) -> torch.Tensor:
        """One text batch's audio at the speaking rate."""
        return stretch(wave, sample_rate, self.speed) if self.stretches else wave

    def finish(self, speech: Speech) -> Speech:
        """The result at its loudness (in place; the tracks keep summing to the mix)."""
        if self.touches_audio or self.lexicon:
            speech.finishing = self.as_dict()
        if self.loudness is None:
            return speech
        speech.waveform, gains = normalize(speech, self.loudness)
        mix = self.loudness.per == "mix" or not speech.segments  # one gain: nothing to measure
        speech.finishing["loudness"] = lufs.report(
            self.loudness, gains, None if mix else speech.waveform, speech.sample_rate)
        return speech


def pause_seconds(batches: Sequence[Batch]) -> float:
    """The seconds of ``[pause:…]`` silence written around ``batches``."""
    return sum((b.before or 0.0) + (b.after or 0.0) for b in batches)


def normalize(speech: Speech, loudness: lufs.Loudness) -> tuple[torch.Tensor, list]:
    """``speech.waveform`` brought to ``loudness`` per mix, per speaker track or per line: the
    gain of a track or line applies to its segments' samples, so the tracks (``Speech.tracks``)
    still sum to the mix. A track is measured as its own file would be (the mix's length,
    silent where others speak); a line on its own. A line too short to measure (under 0.4 s)
    takes the mix's gain."""
    wave, sr = speech.waveform, speech.sample_rate
    if loudness.per == "mix" or not speech.segments:
        out, gain = lufs.normalize(wave, sr, loudness)
        return out, [gain]
    fallback: list = []  # the mix's gain, measured only when a line needs it
    out, gains = wave.clone(), []
    for segments in _windows(speech.segments, loudness.per):
        spans = [slice(s.start_sample, s.end_sample) for s in segments]
        gain = lufs.gain_for(_measured(wave, spans, loudness.per), sr, loudness)
        if gain.measured is None:
            fallback = fallback or [lufs.gain_for(wave, sr, loudness)]
            gain = fallback[0]
        for span in spans:
            out[span] = wave[span] * gain.factor
        gains.append(gain)
    return out, gains


def _windows(segments: Sequence, per: str) -> list[list]:
    """The segments measured together: a speaker's track (by first speaker), or each line."""
    if per != "track":
        return [[s] for s in segments]
    groups: dict[int, list] = {}
    for s in segments:
        groups.setdefault(s.first_speaker, []).append(s)
    return list(groups.values())


def _measured(wave: torch.Tensor, spans: list[slice], per: str):
    """What a window's loudness is measured on: a track, the mix's length, silent where others
    speak (no copy); a line on its own."""
    if per == "track":
        return lufs.Sparse(wave.shape[0], [(span.start, wave[span]) for span in spans])
    return torch.cat([wave[span] for span in spans])
