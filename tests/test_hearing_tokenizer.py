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


def test_a_real_sized_vocabulary_takes_the_mistral_pattern(aligner_fixtures, tmp_path):
    """As the reference (transformers' fix_mistral_regex applies above 100 000 entries): the
    tiny vocabulary grown past that point switches pattern, ``iPhone`` → ``i`` + ``Phone``."""
    import json
    import shutil

    from fish_core.hearing.tokenizer import MISTRAL_ABOVE

    folder = tmp_path / "big"
    shutil.copytree(aligner_fixtures / "tiny-aligner", folder)
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    base = max(vocab.values()) + 1
    added = {str(int(i) - base + MISTRAL_ABOVE + 1): t
             for i, t in config["added_tokens_decoder"].items()}
    vocab.update({f"<unused{i}>": i for i in range(base, MISTRAL_ABOVE + 1)})
    config["added_tokens_decoder"] = added
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    big = HearingTokenizer.from_dir(folder)
    small = HearingTokenizer.from_dir(aligner_fixtures / "tiny-aligner")
    assert big.regex == "mistral" and small.regex == "qwen2"
    assert big.encode_text("iPhone") != small.encode_text("iPhone")
    assert big.encode_text("iPhone") == HearingTokenizer.from_dir(
        aligner_fixtures / "tiny-aligner", "mistral").encode_text("iPhone")
    assert big.id(TIMESTAMP) == int(next(i for i, t in added.items() if t["content"] == TIMESTAMP))
