"""hearing/features.py: Whisper log-mel features, against the reference's processor output."""

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from fish_core.hearing.features import FeatureConfig, batch_features, log_mel

# The features are bit-equal on the reference's own CPU build; a different BLAS/FFT may move
# the last bits of the log-mel (values span about -1.5 … 1.5), never more than this.
FEATURE_ATOL = 1e-5


def cases(aligner_fixtures):
    return json.loads((aligner_fixtures / "cases.json").read_text(encoding="utf-8"))["cases"]


def test_features_match_the_reference_on_every_case(aligner_fixtures, aligner_golden):
    audio = load_file(str(aligner_fixtures / "audio.safetensors"))
    config = FeatureConfig.from_dir(aligner_fixtures / "tiny-aligner")
    for case in cases(aligner_fixtures):
        golden = aligner_golden.tensors(f"aligner/{case['id']}")
        features, mask = batch_features([audio[case["id"]]], config)
        assert features.shape == golden["input_features"].shape, case["id"]
        torch.testing.assert_close(features, golden["input_features"], rtol=0, atol=FEATURE_ATOL)
        assert torch.equal(mask, golden["feature_attention_mask"]), case["id"]


def test_a_batch_pads_and_keeps_the_reference_frame_rule(aligner_fixtures, aligner_golden):
    audio = load_file(str(aligner_fixtures / "audio.safetensors"))
    batch = aligner_golden.json("batch/aligner")
    golden = aligner_golden.tensors("batch/aligner")
    features, mask = batch_features([audio[c] for c in batch["cases"]],
                                    FeatureConfig.from_dir(aligner_fixtures / "tiny-aligner"))
    torch.testing.assert_close(features, golden["input_features"], rtol=0, atol=FEATURE_ATOL)
    assert torch.equal(mask, golden["feature_attention_mask"])
    for row, compare in enumerate(batch["compare_with_single"]):
        assert int(mask[row].sum()) == compare["feature_frames_in_batch"]


def test_shapes_follow_the_config(aligner_fixtures):
    config = FeatureConfig.from_dir(aligner_fixtures / "tiny-aligner")
    samples = [config.hop_length * 7 + 3, config.hop_length * 4]
    waves = [torch.randn(n, generator=torch.Generator().manual_seed(n)) * 0.1 for n in samples]
    features, mask = batch_features(waves, config)
    frames = max(samples) // config.hop_length
    assert features.shape == (2, config.n_mels, frames) and features.dtype == torch.float32
    assert mask.sum(-1).tolist() == [min(frames, math.ceil(n / config.hop_length)) for n in samples]
    single = log_mel(waves[0], config)
    assert single.shape == (config.n_mels, samples[0] // config.hop_length)
    assert torch.isfinite(features).all()


def test_an_empty_clip_is_refused():
    with pytest.raises(ValueError, match="empty"):
        batch_features([torch.zeros(0)])
    with pytest.raises(ValueError, match="no clips"):
        batch_features([])
