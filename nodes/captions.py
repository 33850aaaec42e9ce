"""The Captions node: a speaking node's timed words → SRT, WebVTT, karaoke WebVTT or JSON text
(``fish_core.speech.words.captions``), for a text-saving or preview node."""

from __future__ import annotations

from ..fish_core.speech.words import TimedWord, captions as write_captions
from ..fish_core.text.captions import CAPTION_FORMATS
from .schema import WORDS, Combo, Float, Int, Node, Output, Socket

FORMATS = ["srt", "vtt", "karaoke", "json"]
assert set(FORMATS) == set(CAPTION_FORMATS)
MAX_TAKE = 8


def captions(words, format="srt", max_chars=42, max_seconds=7.0, line_pause=0.5, take=1):
    """The caption text of take ``take`` of ``words`` (a speaking node's WORDS output)."""
    takes = (words or {}).get("takes") if isinstance(words, dict) else None
    if not takes:
        raise ValueError("words: the speaking node timed no words; set its 'words' input to "
                         "auto or the text's language")
    if not 1 <= take <= len(takes):
        raise ValueError(f"take: the words hold {len(takes)} take(s), got take {take}")
    chosen = takes[take - 1]
    timed = [TimedWord(w["text"], w["start"], w["end"], w.get("speaker"), w.get("take", 0),
                       w.get("segment", 0), w.get("level", "word")) for w in chosen["words"]]
    text = write_captions(timed, format, chosen.get("texts", ()), max_chars=max_chars,
                          max_seconds=max_seconds, pause=line_pause)
    return (text,)


CAPTIONS = Node(
    "SailfishCaptions", "Sailfish Captions",
    "Captions from a speaking node's words (timed by the forced aligner): SRT or WebVTT lines "
    "grouped by length, pauses and sentence ends, karaoke WebVTT (each word timed) or JSON. "
    "Connect the text to a node that saves or previews text.",
    inputs=[Socket("words", WORDS, "The words output of a Sailfish speaking node whose 'words' "
                   "input is on."),
            Combo("format", FORMATS, "srt and vtt: caption lines; karaoke: WebVTT with every "
                  "word's time; json: every word with its start, end and speaker.", "srt"),
            Int("max_chars", 42, 8, 200, "Longest caption line, in characters."),
            Float("max_seconds", 7.0, 1.0, 30.0, "Longest time one caption line stays up.",
                  step=0.5),
            Float("line_pause", 0.5, 0.1, 5.0, "A silence this long between words starts a new "
                  "line.", step=0.05),
            Int("take", 1, 1, MAX_TAKE, "Which take's words (takes > 1 on the speaking node).")],
    outputs=[Output("STRING", "captions", "The captions as text (SRT, WebVTT or JSON).")],
    execute=captions,
)
