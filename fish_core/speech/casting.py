"""Casting: a generated take kept as a voice ("generate takes with no reference, keep the best,
reuse it").

``take_clip`` turns a take (the waveform ``tts`` returned, a file it was saved to, or one item
of a node's AUDIO batch) and the text it says into a reference clip: the silence around the
speech cut off (takes in a batch are padded to the longest; a lead or trailing pause is no
voice), ``[pause:…]`` and speaker tags taken out of the transcript, respelled by the voice's
lexicon as the model read it. ``Synthesizer.encode_voice`` (or the codec) then encodes it.
"""

from __future__ import annotations

import torch

from ..text import plan as textplan
from ..text.lexicon import Lexicon
from ..text.pauses import strip_pauses

SILENCE_DB = -60.0  # what counts as silence at the ends of a take
MARGIN_SECONDS = 0.1  # kept around the speech
MIN_SECONDS = 0.5
RATES = (1000, 768000)  # sample rates (Hz) a take may have
ADVICE_SECONDS = 30.0  # longer references work but cost prompt length


def transcript(text: str, lexicon: Lexicon | None = None) -> str:
    """What the take says, as a reference transcript: without pause and speaker tags, respelled
    as the model read it."""
    textplan.check_text(text, "text")
    said = strip_pauses(textplan.SPEAKER_TAG.sub(" ", text))
    said = lexicon.apply(said) if lexicon else said
    if not said.strip():
        raise ValueError("text: give the words the take says (its transcript)")
    return " ".join(said.split())


def check_rate(sample_rate, field: str = "audio") -> int:
    """A take's sample rate: a whole number of Hz in ``RATES`` (0 or a fraction would divide
    by zero or cut at the wrong place)."""
    ok = (not isinstance(sample_rate, bool) and isinstance(sample_rate, (int, float))
          and sample_rate == int(sample_rate) and RATES[0] <= sample_rate <= RATES[1])
    if not ok:
        raise ValueError(f"{field}: the sample rate must be a whole number of Hz from "
                         f"{RATES[0]} to {RATES[1]}, got {sample_rate!r}")
    return int(sample_rate)


def trim(wave: torch.Tensor, sample_rate: int) -> torch.Tensor:
    """``wave`` without the silence before and after its speech (a short margin kept)."""
    loud = (wave.abs() > 10 ** (SILENCE_DB / 20)).nonzero()
    if loud.numel() == 0:
        raise ValueError("audio: the take is silent; pick a take with speech")
    margin = round(MARGIN_SECONDS * sample_rate)
    start = max(0, int(loud[0]) - margin)
    end = min(wave.shape[0], int(loud[-1]) + 1 + margin)
    return wave[start:end]


def take_clip(wave: torch.Tensor, sample_rate: int, text: str,
              lexicon: Lexicon | None = None) -> tuple[torch.Tensor, str, list[str]]:
    """The reference clip of a take (mono float ``[T]``): trimmed waveform, transcript, and
    notes for the user (a take that is long for a reference)."""
    if not isinstance(wave, torch.Tensor) or wave.dim() != 1:
        raise ValueError("audio: expected one mono take")
    sample_rate = check_rate(sample_rate)
    said = transcript(text, lexicon)
    clip = trim(wave.float(), sample_rate)
    seconds = clip.shape[0] / sample_rate
    if seconds < MIN_SECONDS:
        raise ValueError(f"audio: the take holds {seconds:.2f} s of speech; a voice needs at "
                         f"least {MIN_SECONDS:g} s (5–30 s works best)")
    notes = []
    if seconds > ADVICE_SECONDS:
        notes.append(f"the take is {seconds:.1f} s long; references of 5–30 s work best (a "
                     "longer one lengthens every prompt)")
    return clip, said, notes
