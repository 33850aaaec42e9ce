"""hearing/asr.py against the official qwen-asr 0.0.6 on the tiny Qwen3-ASR checkpoint
(``<fixtures>/aligner/``: ``tiny-asr/``, ``golden/asr``, ``golden/batch/asr``,
``golden/e2e``): prompt ids equal, greedy ids equal, the decoded answer and the parsed
language/text equal, every step's logits within ``LOGITS_ATOL``.

Tolerance: the logits are float32 sums over the same weights in another order (our static KV
cache attends over all its slots, masked, where the reference's grows per step); measured
differences are ~2e-6 on logits of magnitude ~5, the bound is 50× that. Greedy ids and texts are
compared exactly.

On a fixture set without goldens the parity tests skip; the others run on its tiny-asr.
"""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import fixtures_dir
from safetensors.torch import load_file

from fish_core.hearing.asr import (MIN_NEW_TOKENS, AsrInputError, SpeechRecognizer, Transcript,
                                   token_budget)
from fish_core.hearing.split import SEARCH_SECONDS, split
from fish_core.hearing.transcript import parse_answer

LOGITS_ATOL = 1e-4


def aligner_dir() -> Path:
    root = fixtures_dir() / "aligner"
    if not (root / "tiny-asr").is_dir():
        pytest.skip("fixture set without the tiny Qwen3-ASR checkpoint")
    return root


def golden_dir() -> Path:
    root = aligner_dir() / "golden"
    if not (root / "asr").is_dir():
        pytest.skip("fixture set without the ASR goldens")
    return root


def single_cases() -> list[str]:
    root = fixtures_dir() / "aligner" / "golden" / "asr"
    return sorted(p.stem for p in root.glob("*.json")) if root.is_dir() else []


@pytest.fixture(scope="module")
def recognizer() -> SpeechRecognizer:
    return SpeechRecognizer.from_pretrained(aligner_dir() / "tiny-asr")


@pytest.fixture(scope="module")
def clips() -> dict:
    """The reference's inputs; on a set without them, noise bursts of a few lengths."""
    path = aligner_dir() / "audio.safetensors"
    if path.is_file():
        return load_file(str(path))
    rng = np.random.default_rng(5)
    return {f"noise{i}": torch.from_numpy((0.2 * rng.standard_normal(int(s * 16000)))
                                          .clip(-1, 1).astype(np.float32))
            for i, s in enumerate((1.2, 2.7, 6.1))}


def eos_ids(root: Path) -> list[int]:
    """The ids the reference's generate() stopped on (manifest.json)."""
    manifest = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
    return manifest["generate_default_eos_token_id"]["tiny_equivalent"]


def test_eos_ids_come_from_the_tokenizer(recognizer):
    golden_dir()
    assert sorted(recognizer.eos_ids) == sorted(eos_ids(aligner_dir()))


@pytest.mark.parametrize("name", single_cases() or ["(none)"])
def test_single_clip_matches_reference(recognizer, clips, name):
    root = golden_dir()
    if name == "(none)":
        pytest.skip("no single-clip ASR goldens")
    expected = json.loads((root / "asr" / f"{name}.json").read_text(encoding="utf-8"))
    tensors = load_file(str(root / "asr" / f"{name}.safetensors"))
    sample = expected["samples"][0]
    language = recognizer.check(expected["language_arg"], expected["context"], 512)
    decoded = recognizer.decode([clips[expected["case"]]], [expected["context"]], [language],
                                keep_logits=True)
    assert torch.equal(decoded.prompt_ids, tensors["prompt_input_ids"])
    assert torch.equal(decoded.prompt_mask, tensors["prompt_attention_mask"])
    assert decoded.tokens[0] == sample["generated_ids"]
    assert sample["stopped_on_eos"] and decoded.tokens[0][-1] in recognizer.eos_ids
    assert decoded.raw[0] == sample["raw_decoded"]
    assert parse_answer(decoded.raw[0], language) == (sample["language"], sample["text"])
    want = tensors["step_logits"]
    assert decoded.step_logits.shape == want.shape
    torch.testing.assert_close(decoded.step_logits, want, rtol=0, atol=LOGITS_ATOL)
    # The public door gives the same (one piece: the clip is short).
    got = recognizer.transcribe(clips[expected["case"]], 16000, expected["language_arg"],
                                expected["context"])
    assert got == Transcript(sample["language"], sample["text"])


def test_batch_matches_reference(recognizer, clips):
    root = golden_dir()
    expected = json.loads((root / "batch" / "asr.json").read_text(encoding="utf-8"))
    tensors = load_file(str(root / "batch" / "asr.safetensors"))
    n = len(expected["cases"])
    language = recognizer.check(expected["language_arg"], expected["context"], 512)
    decoded = recognizer.decode([clips[c] for c in expected["cases"]], [expected["context"]] * n,
                                [language] * n, keep_logits=True)
    assert torch.equal(decoded.prompt_ids, tensors["prompt_input_ids"])  # left-padded
    assert torch.equal(decoded.prompt_mask, tensors["prompt_attention_mask"])
    for row, sample in enumerate(expected["samples"]):
        ids = sample["generated_ids"]
        # The reference keeps a finished row going (filled with an end token); ours stops it.
        ended = next(i for i, t in enumerate(ids) if t in recognizer.eos_ids) + 1
        assert decoded.tokens[row] == ids[:ended]
        assert set(ids[ended:]) <= set(recognizer.eos_ids)
        assert decoded.raw[row] == sample["raw_decoded"]
        steps = len(decoded.tokens[row])
        torch.testing.assert_close(decoded.step_logits[row, :steps],
                                   tensors["step_logits"][row, :steps], rtol=0, atol=LOGITS_ATOL)
    got = recognizer.transcribe_many([clips[c] for c in expected["cases"]], 16000,
                                     expected["language_arg"], expected["context"])
    assert got == [Transcript(s["language"], s["text"]) for s in expected["samples"]]
    assert all(c["generated_equal_to_single_run"] for c in expected["compare_with_single"])


def test_e2e_transcript_matches_reference(recognizer, clips):
    expected = json.loads((golden_dir() / "e2e" / "transcribe_with_timestamps.json")
                          .read_text(encoding="utf-8"))
    got = recognizer.transcribe(clips[expected["case"]], 16000, expected["language_arg"])
    assert (got.language, got.text) == (expected["result"]["language"], expected["result"]["text"])
    assert expected["aligner_calls"][0]["text"] == [got.text]


def test_a_batch_decodes_as_its_rows_alone(recognizer, clips):
    names = sorted(clips)[:3]
    together = recognizer.decode([clips[n] for n in names], ["", "ctx", ""], [None, None, None],
                                 max_new_tokens=12)
    for row, name in enumerate(names):
        alone = recognizer.decode([clips[name]], [["", "ctx", ""][row]], [None], max_new_tokens=12)
        # A clip in a batch may keep one feature frame more (the reference's batch rule), which
        # can move a logit in its last bits but not a greedy id on these clips.
        assert together.tokens[row] == alone.tokens[0]


def test_long_clip_is_cut_and_joined(recognizer, clips):
    name = max(clips, key=lambda n: clips[n].shape[0])
    wave = clips[name].numpy()
    limit = 2 * SEARCH_SECONDS
    if wave.shape[0] < 2.2 * limit * 16000:
        wave = np.concatenate([wave] * 3)
    got = recognizer.transcribe_many([wave], 16000, max_seconds=limit, max_new_tokens=8)[0]
    pieces = split(wave, 16000, limit)
    assert len(pieces) >= 2
    alone = [recognizer.transcribe(p.wave, 16000, max_new_tokens=8) for p in pieces]
    assert got.text == "".join(t.text for t in alone)


def test_max_new_tokens_stops_decoding_and_says_so(recognizer, clips):
    clip = clips[sorted(clips)[0]]
    full = recognizer.decode([clip], [""], [None])
    assert full.complete == [True], "the tiny model did not end: the test proves nothing"
    cut = len(full.tokens[0]) - 1
    decoded = recognizer.decode([clip], [""], [None], max_new_tokens=cut)
    assert decoded.tokens[0] == full.tokens[0][:cut] and decoded.complete == [False]
    short = recognizer.transcribe(clip, 16000, max_new_tokens=cut)
    assert not short.complete
    assert recognizer.transcribe(clip, 16000).complete


def test_a_long_piece_gets_a_longer_budget():
    assert token_budget(1.0) == MIN_NEW_TOKENS
    assert token_budget(1200.0) >= 1200 * 8  # 20 minutes of fast speech still fits


def test_audio_at_another_rate_and_in_stereo(recognizer):
    rng = np.random.default_rng(0)
    stereo = (0.1 * rng.standard_normal((2, 22050))).astype(np.float32)
    got = recognizer.transcribe(stereo, 22050, max_new_tokens=4)
    assert isinstance(got.text, str) and isinstance(got.language, str)


@pytest.mark.parametrize("kwargs, field", [
    (dict(language="Klingon"), "Klingon"),
    (dict(context=7), "context"),
    (dict(context="x" * 10_001), "context"),
    (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(sample_rate=0), "sample_rate"),
    (dict(max_seconds=3.0), "max_seconds"),
    (dict(audio=np.zeros(0, dtype=np.float32)), "audio is empty"),
    (dict(audio=np.array([0.0, np.nan], dtype=np.float32)), "audio holds NaN"),
])
def test_bad_input_is_refused_before_work(recognizer, monkeypatch, kwargs, field):
    def no_model_run(*args, **kw):
        raise AssertionError("the model ran on a bad request")
    monkeypatch.setattr(recognizer, "decode", no_model_run)
    args = dict(audio=np.zeros(16000, dtype=np.float32), sample_rate=16000)
    args.update(kwargs)
    audio = args.pop("audio")
    with pytest.raises(AsrInputError, match=field):
        recognizer.transcribe_many([audio], **args)


def test_long_pieces_are_decoded_alone():
    from fish_core.hearing.asr import ALONE_SECONDS, batches
    from fish_core.hearing.split import Piece

    def piece(seconds):
        return Piece(np.zeros(int(seconds * 16000), dtype=np.float32), 0.0)

    short, long = piece(5.0), piece(ALONE_SECONDS + 1)
    items = [(0, short), (0, short), (0, long), (1, short), (1, short), (1, short)]
    got = [[i for i, _ in b] for b in batches(items, 2)]
    assert got == [[0, 0], [0], [1, 1], [1]]
    assert [len(b) for b in batches(items, 8)] == [2, 1, 3]
    assert [p for b in batches(items, 8) for _, p in b] == [p for _, p in items]  # in order


def test_a_config_without_its_languages_gets_the_model_cards(recognizer, monkeypatch):
    import dataclasses

    from fish_core.hearing.transcript import LANGUAGES

    assert recognizer.languages  # the fixture lists them
    bare = dataclasses.replace(recognizer.model.config, languages=())
    monkeypatch.setattr(recognizer.model, "config", bare)
    assert recognizer.languages == LANGUAGES
    assert recognizer.check("english", "", None) == "English"
