"""hearing/words.py: text → the words the aligner times, per language, as the reference splits
them. Japanese (nagisa) and Korean (soynlp + the reference's word list) are optional: their
cases skip, naming what is missing, where those are not installed."""

import pytest

from fish_core.hearing.words import (LANGUAGES, SplitterMissing, check_language, clean,
                                     split_cjk, split_words)


def split_or_skip(text, language):
    try:
        return split_words(text, language)
    except SplitterMissing as e:
        pytest.skip(str(e))


def test_spaced_and_cjk_languages_split_as_the_reference(aligner_golden):
    units = [u for u in aligner_golden.json("units/text_prep")
             if u["language"].lower() not in ("japanese", "korean")]
    assert len(units) > 10
    for unit in units:
        assert split_words(unit["text"], unit["language"]) == unit["word_list"], unit["text"]


@pytest.mark.parametrize("language", ["japanese", "korean"])
def test_japanese_and_korean_split_as_the_reference(aligner_golden, language):
    units = [u for u in aligner_golden.json("units/text_prep")
             if u["language"].lower() == language]
    assert units
    for unit in units:
        assert split_or_skip(unit["text"], unit["language"]) == unit["word_list"], unit["text"]


def test_a_missing_splitter_names_the_package(monkeypatch):
    import importlib

    real = importlib.import_module

    def without(name, *args):
        if name.split(".")[0] in ("nagisa", "soynlp"):
            raise ImportError(name)
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", without)
    with pytest.raises(SplitterMissing, match="nagisa"):
        split_words("今日は", "Japanese")


def test_the_pieces():
    assert clean("O'Brien's,") == "O'Brien's"
    assert clean("—…!") == ""
    assert split_cjk("我今天用iPhone") == ["我", "今", "天", "用", "iPhone"]
    assert check_language("english") == "English"
    with pytest.raises(ValueError, match="Klingon.*English"):
        check_language("Klingon")
    assert len(LANGUAGES) == 11
