"""hearing/aligner.py: one aligner pass per case against qwen-asr's ``align()``: prompt ids,
timestamp logits, argmaxes, raw and fixed times, final items; and the batched call."""

import json

import pytest
import torch
from safetensors.torch import load_file

from fish_core.hearing.aligner import ForcedAligner
from fish_core.hearing.text_model import positions_from_mask
from fish_core.hearing.words import SplitterMissing

# The head's logits are large (~class²); fp32 op order moves them by ~5e-7 of their largest
# magnitude here. Relative to that magnitude, 1e-5 is the bound; argmaxes are compared exactly
# except at the fixture's fragile slots (top-1/top-2 gap < 0.05).
LOGIT_RTOL = 1e-5
ATOL = 1e-4


@pytest.fixture(scope="module")
def aligner(aligner_fixtures):
    return ForcedAligner.from_pretrained(aligner_fixtures / "tiny-aligner", "cpu", "fp32")


def case_ids(aligner_fixtures):
    return [c["id"] for c in json.loads(
        (aligner_fixtures / "cases.json").read_text(encoding="utf-8"))["cases"]]


def items_of(result):
    return [{"text": w.text, "start_time": w.start, "end_time": w.end} for w in result.words]


def check_times(result, golden_json, argmax):
    fragile = set(golden_json["fragile_slots"])
    expected = golden_json["ts_argmax"]
    assert len(argmax) == len(expected)
    assert [a for i, a in enumerate(argmax) if i not in fragile] == [
        e for i, e in enumerate(expected) if i not in fragile]
    if argmax == expected:  # a flipped fragile slot moves its times, nothing else to compare
        assert result.ts_ms_raw == golden_json["ts_ms_raw"]
        assert result.ts_ms_fixed == golden_json["ts_ms_fixed"]
        assert items_of(result) == golden_json["items"]


def test_every_case_matches_the_reference(aligner, aligner_fixtures, aligner_golden):
    audio = load_file(str(aligner_fixtures / "audio.safetensors"))
    for case in case_ids(aligner_fixtures):
        gj, gt = aligner_golden.json(f"aligner/{case}"), aligner_golden.tensors(f"aligner/{case}")
        (result,) = aligner.align_words([audio[case]], [gj["word_list"]])
        assert torch.equal(result.input_ids, gt["input_ids"][0]), case
        assert len(gj["items"]) == len(gj["word_list"])
        scale = gt["ts_logits"].abs().max()
        assert (result.ts_logits - gt["ts_logits"]).abs().max() <= LOGIT_RTOL * scale, case
        check_times(result, gj, result.ts_logits.argmax(-1).tolist())


def test_text_in_gives_the_reference_words_and_items(aligner, aligner_fixtures, aligner_golden):
    audio = load_file(str(aligner_fixtures / "audio.safetensors"))
    ran = 0
    for case in case_ids(aligner_fixtures):
        gj = aligner_golden.json(f"aligner/{case}")
        try:
            (result,) = aligner.align([audio[case]], [gj["text"]], [gj["language"]])
        except SplitterMissing:
            continue  # Japanese / Korean without their optional splitter: test_hearing_words
        ran += 1
        assert result.word_list == gj["word_list"], case
        check_times(result, gj, result.ts_logits.argmax(-1).tolist())
    assert ran >= 3


def test_a_batch_matches_the_reference_batch(aligner, aligner_fixtures, aligner_golden):
    audio = load_file(str(aligner_fixtures / "audio.safetensors"))
    batch, tensors = aligner_golden.json("batch/aligner"), aligner_golden.tensors("batch/aligner")
    results = aligner.align_words([audio[c] for c in batch["cases"]],
                                  [s["word_list"] for s in batch["samples"]])
    ids, mask = aligner.pad([r.input_ids.tolist() for r in results])
    assert torch.equal(ids, tensors["input_ids"])
    assert torch.equal(mask, tensors["attention_mask"])
    assert torch.equal(positions_from_mask(mask), tensors["position_ids"])
    for row, (result, sample) in enumerate(zip(results, batch["samples"])):
        check_times(result, sample, result.ts_logits.argmax(-1).tolist())
        assert torch.equal(result.ts_logits.argmax(-1), tensors[f"ts_argmax.{row}"]) or (
            sample["fragile_slots"])
    with torch.inference_mode():
        from fish_core.hearing.features import batch_features

        features, fmask = batch_features([audio[c] for c in batch["cases"]], aligner.features)
        embeds = aligner.model.encode_audio(features, fmask)
    for row, e in enumerate(embeds):
        torch.testing.assert_close(e, tensors[f"audio_embeds.{row}"], rtol=0, atol=ATOL)


def test_the_aligner_runs_on_any_fixture_set(aligner):
    """Sizes from the set's own config: one short and one longer clip in one batch give one
    word per word, monotonic times inside the head's range."""
    sr = aligner.sample_rate
    gen = torch.Generator().manual_seed(5)
    waves = [torch.randn(sr, generator=gen) * 0.1, torch.randn(sr * 3, generator=gen) * 0.1]
    results = aligner.align(waves, ["hello there", "the quick brown fox, 12 times"],
                            ["English", "english"])
    assert [r.word_list for r in results] == [["hello", "there"],
                                              ["the", "quick", "brown", "fox", "12", "times"]]
    limit = aligner.model.config.head_size * aligner.segment_seconds
    for r in results:
        assert len(r.words) == len(r.word_list)
        times = [t for w in r.words for t in (w.start, w.end)]
        assert times == sorted(times) and 0 <= times[0] and times[-1] <= limit
        assert r.ts_logits.shape == (2 * len(r.words), aligner.model.config.head_size)


def test_bad_input_is_refused_before_the_model_runs(aligner):
    with pytest.raises(ValueError, match="Klingon"):
        aligner.align([torch.zeros(100)], ["hi"], ["Klingon"])
    with pytest.raises(ValueError, match="2 clips"):
        aligner.align([torch.zeros(100)] * 2, ["hi"], ["English"])


def test_the_prompt_of_every_text_is_the_references(aligner, aligner_golden):
    """``golden/units/text_prep``: the input ids before the audio is expanded (one
    ``<|audio_pad|>``), empty word lists included."""
    units = aligner_golden.json("units/text_prep")
    for unit in units:
        assert aligner.prompt(unit["word_list"], 1) == unit["input_ids"], unit["text"]
