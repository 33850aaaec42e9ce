"""hearing/tokenizer.py: the aligner's prompts encode to the reference's ids, with either
pre-tokenizer pattern."""

import pytest

from fish_core.hearing.tokenizer import (AUDIO_END, AUDIO_PAD, AUDIO_START, TIMESTAMP,
                                         HearingTokenizer, TokenizerError)


@pytest.mark.parametrize("regex,key", [("auto", "input_ids"), ("qwen2", "input_ids"),
                                       ("mistral", "input_ids_if_mistral_regex")])
def test_prompt_ids_match_the_reference(aligner_fixtures, aligner_golden, regex, key):
    tok = HearingTokenizer.from_dir(aligner_fixtures / "tiny-aligner", regex)
    units = aligner_golden.json("units/text_prep")
    assert units
    for unit in units:
        assert tok.encode(unit["input_text"]) == unit[key], unit["text"]
        # word by word, added tokens never matched inside a word: the same ids
        ts = tok.id(TIMESTAMP)
        ids = [tok.id(AUDIO_START), tok.id(AUDIO_PAD), tok.id(AUDIO_END)]
        for word in unit["word_list"]:
            ids += tok.encode_text(word) + [ts, ts]
        assert ids == unit[key] or not unit["word_list"], unit["text"]


def test_the_tiny_vocabulary_takes_the_qwen2_pattern(aligner_fixtures):
    assert HearingTokenizer.from_dir(aligner_fixtures / "tiny-aligner").regex == "qwen2"


def test_special_tokens_are_read_not_hard_coded(aligner_fixtures):
    import json

    config = json.loads((aligner_fixtures / "tiny-aligner" / "config.json").read_text())
    tok = HearingTokenizer.from_dir(aligner_fixtures / "tiny-aligner")
    assert tok.id(TIMESTAMP) == config["timestamp_token_id"]
    assert tok.id(AUDIO_PAD) == config["thinker_config"]["audio_token_id"]
    assert tok.encode_text(TIMESTAMP) != [tok.id(TIMESTAMP)]  # plain text never matches it
    assert tok.decode(tok.encode_text("hello world")) == "hello world"


def test_missing_files_and_bad_pattern_are_clear(tmp_path, aligner_fixtures):
    with pytest.raises(TokenizerError, match="vocab.json"):
        HearingTokenizer.from_dir(tmp_path)
    with pytest.raises(ValueError, match="regex"):
        HearingTokenizer.from_dir(aligner_fixtures / "tiny-aligner", "gpt2")
