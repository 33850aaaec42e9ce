"""hearing/audio_encoder.py: the conv stem and the transformer tower, layer by layer against the
reference's activations (golden/hidden) and its encoder output on every case."""

import json

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from fish_core.hearing.audio_encoder import chunk_steps, encoded_length
from fish_core.hearing.checkpoint import load_thinker
from fish_core.hearing.config import HearingConfig
from fish_core.hearing.features import FeatureConfig, batch_features

# fp32 with the reference's op order but not its kernels' exact blocking: measured differences
# are ~1e-6 on activations of magnitude 1–5; 1e-4 leaves room for another CPU's BLAS.
ATOL = 1e-4


def tiny(aligner_fixtures):
    return load_thinker(aligner_fixtures / "tiny-aligner", "cpu", "fp32")


def test_every_layer_matches_the_reference(aligner_fixtures, aligner_golden):
    hidden = aligner_golden.tensors("hidden/en_short__aligner")
    features = aligner_golden.tensors("aligner/en_short")["input_features"][0]
    tower = tiny(aligner_fixtures).audio_tower
    with torch.inference_mode():
        chunks, lengths = tower.chunks(features)
        h = F.gelu(tower.conv2d1(chunks))
        h = tower.conv2d2(h)
        torch.testing.assert_close(h, hidden["audio.conv2d2"], rtol=0, atol=ATOL)
        h = tower.conv2d3(F.gelu(h))
        torch.testing.assert_close(h, hidden["audio.conv2d3"], rtol=0, atol=ATOL)
        x = tower.embed(features)
        torch.testing.assert_close(x, hidden["audio.layers.0.input"], rtol=0, atol=ATOL)
        for i, layer in enumerate(tower.layers):
            x = layer(x)
            torch.testing.assert_close(x, hidden[f"audio.layers.{i}"], rtol=0, atol=ATOL)
        x = tower.ln_post(x)
        torch.testing.assert_close(x, hidden["audio.ln_post"], rtol=0, atol=ATOL)
        x = tower.proj1(x)
        torch.testing.assert_close(x, hidden["audio.proj1"], rtol=0, atol=ATOL)
        torch.testing.assert_close(tower.proj2(F.gelu(x)), hidden["audio.proj2"], rtol=0, atol=ATOL)
    assert len(lengths) == hidden["audio.conv2d2"].shape[0]


def test_encoder_output_matches_on_every_case(aligner_fixtures, aligner_golden):
    model = tiny(aligner_fixtures)
    cases = json.loads((aligner_fixtures / "cases.json").read_text(encoding="utf-8"))["cases"]
    for case in cases:
        golden = aligner_golden.tensors(f"aligner/{case['id']}")
        with torch.inference_mode():
            (embeds,) = model.encode_audio(golden["input_features"],
                                           golden["feature_attention_mask"])
        assert embeds.shape == golden["audio_embeds"].shape, case["id"]
        torch.testing.assert_close(embeds, golden["audio_embeds"], rtol=0, atol=ATOL)


def test_lengths_follow_the_chunk_rule(aligner_fixtures):
    config = HearingConfig.from_dir(aligner_fixtures / "tiny-aligner").audio
    size = config.chunk_frames
    assert encoded_length(size, size) == chunk_steps(size)
    assert encoded_length(2 * size + 1, size) == 2 * chunk_steps(size) + 1
    assert encoded_length(0, size) == 0


def test_any_clip_length_runs(aligner_fixtures):
    """On whatever sizes the set has: a clip of a few chunks plus a tail encodes to
    ``encoded_length`` rows of the text model's width."""
    folder = aligner_fixtures / "tiny-aligner"
    model = load_thinker(folder, "cpu", "fp32")
    features_config = FeatureConfig.from_dir(folder)
    samples = features_config.hop_length * (2 * model.config.audio.chunk_frames + 37)
    wave = torch.randn(samples, generator=torch.Generator().manual_seed(3)) * 0.1
    features, mask = batch_features([wave], features_config)
    with torch.inference_mode():
        (embeds,) = model.encode_audio(features, mask)
    frames = int(mask.sum())
    assert embeds.shape == (encoded_length(frames, model.config.audio.chunk_frames),
                            model.config.text.hidden_size)
    assert torch.isfinite(embeds).all()


def test_audio_file_sizes_are_what_the_cases_say(aligner_fixtures, aligner_golden):
    audio = load_file(str(aligner_fixtures / "audio.safetensors"))
    cases = json.loads((aligner_fixtures / "cases.json").read_text(encoding="utf-8"))["cases"]
    for case in cases:
        assert audio[case["id"]].numel() == case["n_samples"]


def test_windowed_attention_is_each_window_encoded_alone(aligner_fixtures):
    """``windowed``: attention within ``n_window_infer`` frames (flash-attention-2's and the
    vLLM backend's way): a long clip encodes as its windows encoded one by one, and a clip
    within one window as with full attention."""
    folder = aligner_fixtures / "tiny-aligner"
    model = load_thinker(folder, "cpu", "fp32")
    tower, config = model.audio_tower, model.config.audio
    frames = 2 * config.n_window_infer + config.chunk_frames // 2 + 3
    features = torch.randn(config.num_mel_bins, frames, generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        full = tower(features)
        tower.windowed = True
        try:
            windowed = tower(features)
            alone = torch.cat([tower(features[:, s:s + config.n_window_infer])
                               for s in range(0, frames, config.n_window_infer)])
            short = tower(features[:, :config.n_window_infer])
        finally:
            tower.windowed = False
        short_full = tower(features[:, :config.n_window_infer])
    assert windowed.shape == full.shape
    torch.testing.assert_close(windowed, alone, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(windowed, full, atol=1e-3)
    torch.testing.assert_close(short, short_full, rtol=1e-5, atol=1e-5)
