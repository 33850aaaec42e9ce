"""What Qwen3-ASR is asked and what it answers: the chat prompt, and its answer parsed into
(language, text).

The prompt is a system turn holding the context string (words the model should expect: names,
terms), a user turn holding the clip (``<|audio_pad|>`` repeated once per audio frame the encoder
gives), and the assistant turn. Asked for a language, the assistant turn already begins
``language {Language}<asr_text>`` and the model writes only the text; otherwise it writes
``language {Language}<asr_text>{text}`` itself, or ``language None<asr_text>`` for silence.

The answer is parsed as the official ``parse_asr_output`` does (golden/units/parse_asr_output.json):
stripped; runs of one character longer than the threshold kept once, then the first pattern of at
most 20 characters repeated more than the threshold kept once (a model caught in a loop); the
language taken from the first ``language X`` line before ``<asr_text>``, written ``Capitalised``.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby

ASR_TEXT = "<asr_text>"
LANGUAGE_PREFIX = "language "
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
AUDIO_START, AUDIO_PAD, AUDIO_END = "<|audio_start|>", "<|audio_pad|>", "<|audio_end|>"
# The languages Qwen3-ASR names (its config's ``support_languages``; checked against the loaded
# checkpoint's own list too): what a request is checked against before the model is loaded.
LANGUAGES = ("Chinese", "English", "Cantonese", "Arabic", "German", "French", "Spanish",
             "Portuguese", "Indonesian", "Italian", "Korean", "Russian", "Thai", "Vietnamese",
             "Japanese", "Turkish", "Hindi", "Malay", "Dutch", "Swedish", "Danish", "Finnish",
             "Polish", "Czech", "Filipino", "Persian", "Greek", "Romanian", "Hungarian",
             "Macedonian")
REPEAT_THRESHOLD = 20  # a run repeated more often than this is a loop, kept once
MAX_PATTERN = 20  # the longest repeated pattern looked for, in characters


class LanguageError(ValueError):
    """A language the checkpoint does not list."""


def language_name(language: str) -> str:
    """``'cHINese'`` → ``'Chinese'``: the spelling the model's prompt and answers use."""
    s = str(language).strip()
    if not s:
        raise LanguageError("language is empty")
    return s[:1].upper() + s[1:].lower()


def check_language(language: str | None, supported) -> str | None:
    """``None`` or blank (detect the language) stays ``None``; a name is normalised and must be
    one the checkpoint supports (its config's ``support_languages``)."""
    if language is None or not str(language).strip():
        return None
    name = language_name(language)
    if name not in supported:
        raise LanguageError(f"language {language!r} is not one Qwen3-ASR knows; "
                            f"use one of: {', '.join(supported)} (or leave it empty to detect)")
    return name


# ---- the prompt ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Prompt:
    """One request's prompt as text pieces: ``ids`` encodes it with the checkpoint's tokenizer."""
    context: str
    language: str | None  # forced language (already normalised) or None
    n_audio: int  # audio frames the encoder gives for the clip

    def text(self) -> str:
        """The whole prompt as a string, the way the reference renders its chat template."""
        pads = AUDIO_PAD * self.n_audio
        head = (f"{IM_START}system\n{self.context}{IM_END}\n"
                f"{IM_START}user\n{AUDIO_START}{pads}{AUDIO_END}{IM_END}\n"
                f"{IM_START}assistant\n")
        return head + (f"{LANGUAGE_PREFIX}{self.language}{ASR_TEXT}" if self.language else "")

    def ids(self, tokenizer) -> list[int]:
        """Token ids. The markers are looked up by name; the context and the language line are
        encoded as plain text (a marker typed into the context is text, never a marker).
        ``tokenizer`` needs ``id(name)`` and ``encode_text(str)``."""
        def mark(name):
            return [tokenizer.id(name)]
        ids = (mark(IM_START) + tokenizer.encode_text("system\n" + self.context) + mark(IM_END)
               + tokenizer.encode_text("\n")
               + mark(IM_START) + tokenizer.encode_text("user\n") + mark(AUDIO_START)
               + mark(AUDIO_PAD) * self.n_audio + mark(AUDIO_END) + mark(IM_END)
               + tokenizer.encode_text("\n")
               + mark(IM_START) + tokenizer.encode_text("assistant\n"))
        if self.language:
            ids += tokenizer.encode_text(LANGUAGE_PREFIX + self.language) + mark(ASR_TEXT)
        return ids


# ---- the answer -----------------------------------------------------------------------------

def _collapse_runs(s: str, threshold: int) -> str:
    """Every run of one character longer than ``threshold`` kept as that character once."""
    out = []
    for char, run in groupby(s):
        n = sum(1 for _ in run)
        out.append(char if n > threshold else char * n)
    return "".join(out)


def _first_loop(s: str, threshold: int, longest: int):
    """The first place a pattern of 1..``longest`` characters repeats at least ``threshold``
    times in a row: ``(start, pattern, end of its last repetition)``, or ``None``. Positions are
    tried left to right, shorter patterns first; a loop must fit ``2 * threshold`` characters
    after its start."""
    n = len(s)
    for start in range(0, n - 2 * threshold + 1):
        for size in range(1, longest + 1):
            if start + size * threshold > n:
                break
            pattern = s[start:start + size]
            if s[start:start + size * threshold] != pattern * threshold:
                continue
            end = start + size * threshold
            while s[end:end + size] == pattern:
                end += size
            return start, pattern, end
    return None


def fix_repetitions(text: str, threshold: int = REPEAT_THRESHOLD) -> str:
    """A transcript with its loops cut: long runs of one character, then repeated patterns
    (the rest after each loop is searched again)."""
    s = _collapse_runs(text, threshold)
    if len(s) < 2 * threshold:
        return s
    out = []
    while True:
        found = _first_loop(s, threshold, MAX_PATTERN) if len(s) >= 2 * threshold else None
        if found is None:
            out.append(s)
            return "".join(out)
        start, pattern, end = found
        out.append(s[:start] + pattern)
        s = s[end:]


def parse_answer(raw: str | None, forced_language: str | None = None) -> tuple[str, str]:
    """The model's decoded answer → ``(language, text)``; ``("", "")`` for silence. With a
    forced language the whole answer is the text."""
    if raw is None:
        return "", ""
    s = str(raw).strip()
    if not s:
        return "", ""
    s = fix_repetitions(s)
    if forced_language:
        return forced_language, s
    if ASR_TEXT not in s:
        return "", s.strip()
    meta, text = s.split(ASR_TEXT, 1)
    if "language none" in meta.lower():
        return "", text.strip()
    language = ""
    for line in (part.strip() for part in meta.splitlines()):
        if line.lower().startswith(LANGUAGE_PREFIX):
            name = line[len(LANGUAGE_PREFIX):].strip()
            language = language_name(name) if name else ""
            break
    return language, text.strip()


def merge_languages(languages) -> str:
    """The languages of a clip's pieces, in order, repeats in a row and blanks dropped:
    ``["Chinese", "English", "English"]`` → ``"Chinese,English"``."""
    out = []
    for name in languages:
        name = (name or "").strip()
        if name and (not out or out[-1] != name):
            out.append(name)
    return ",".join(out)
