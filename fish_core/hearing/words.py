"""Text → the words the aligner times, per language (the reference's rules).

A word keeps only letters, digits (any script) and the apostrophe ``'``. Most languages split
on whitespace, and inside a piece every CJK ideograph stands alone (``我今天用 iPhone`` → 我 今
天 用 iPhone). Japanese is split by the nagisa tagger and Korean by soynlp's L-tokenizer over
the reference's word list; both are optional packages (``pip install nagisa`` / ``soynlp``):
without them those two languages raise ``SplitterMissing`` naming what to install.
"""

from __future__ import annotations

import importlib
import importlib.util
import unicodedata
from functools import lru_cache
from pathlib import Path

LANGUAGES = ("Chinese", "English", "Cantonese", "French", "German", "Italian", "Japanese",
             "Korean", "Portuguese", "Russian", "Spanish")
KOREAN_DICT = "korean_dict_jieba.dict"  # the reference's Korean word list (Apache-2.0)

# CJK Unified Ideographs, Extensions A–E, Compatibility Ideographs: one word per character.
_CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
        (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF))


class SplitterMissing(RuntimeError):
    """The optional package a language's word splitting needs is not installed."""


def is_cjk(ch: str) -> bool:
    code = ord(ch)
    return any(low <= code <= high for low, high in _CJK)


def keeps(ch: str) -> bool:
    return ch == "'" or unicodedata.category(ch)[0] in "LN"


def clean(piece: str) -> str:
    """``piece`` without what a word does not keep (punctuation, symbols, marks, spaces)."""
    return "".join(ch for ch in piece if keeps(ch))


def split_cjk(piece: str) -> list[str]:
    """Every CJK ideograph on its own, the runs between them whole."""
    out, run = [], []
    for ch in piece:
        if is_cjk(ch):
            if run:
                out.append("".join(run))
                run = []
            out.append(ch)
        else:
            run.append(ch)
    if run:
        out.append("".join(run))
    return out


def spaced_words(text: str) -> list[str]:
    words = []
    for piece in text.split():
        kept = clean(piece)
        if kept:
            words += split_cjk(kept)
    return words


def japanese_words(text: str) -> list[str]:
    nagisa = _optional("nagisa", "Japanese")
    return [w for w in (clean(t) for t in nagisa.tagging(text).words) if w]


def korean_words(text: str, dictionary: str | Path | None = None) -> list[str]:
    tokenizer = _korean_tokenizer(str(dictionary) if dictionary else None)
    return [w for w in (clean(t) for t in tokenizer.tokenize(text)) if w]


def split_words(text: str, language: str, korean_dict: str | Path | None = None) -> list[str]:
    """The words of ``text`` in ``language`` (any case of a name in ``LANGUAGES``; other
    names split as spaced text, as the reference does)."""
    lang = language.lower()
    if lang == "japanese":
        return japanese_words(text)
    if lang == "korean":
        return korean_words(text, korean_dict)
    return spaced_words(text)


def check_language(language: str) -> str:
    """The canonical name of a supported language, or a ValueError naming them."""
    for name in LANGUAGES:
        if name.lower() == str(language).strip().lower():
            return name
    raise ValueError(f"language {language!r} is not one the aligner knows: "
                     f"{', '.join(LANGUAGES)}")


def _optional(module: str, language: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        raise SplitterMissing(f"{language} words are split by the optional package "
                              f"{module!r}: pip install {module}") from None


def find_korean_dict() -> Path | None:
    """The reference's Korean word list where an installed ``qwen_asr`` keeps it (located,
    never imported), or None."""
    try:
        spec = importlib.util.find_spec("qwen_asr")
    except (ImportError, ValueError):
        return None
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = Path(root) / "inference" / "assets" / KOREAN_DICT
        if path.is_file():
            return path
    return None


@lru_cache(maxsize=4)
def _korean_tokenizer(dictionary: str | None):
    path = Path(dictionary) if dictionary else find_korean_dict()
    if path is None or not path.is_file():
        raise SplitterMissing(f"Korean words are split with the reference's word list "
                              f"({KOREAN_DICT}); pass its path (korean_dict=…) or put it in "
                              "the aligner's folder")
    ltokenizer = _optional("soynlp.tokenizer", "Korean")
    scores = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if parts:
                scores[parts[0]] = 1.0
    return ltokenizer.LTokenizer(scores=scores)
