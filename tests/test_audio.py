"""Audio input validation, conversion, resampling and file round trips."""

import numpy as np
import pytest
import soundfile as sf
import torch

from fish_core.audio.files import (MAX_SECONDS, SAMPLE_RATE, AudioError, load_audio, prepare_audio,
                             save_audio)


def tone(seconds=0.5, sr=SAMPLE_RATE, freq=440.0, amp=0.5, channels=None) -> np.ndarray:
    t = np.arange(int(seconds * sr)) / sr
    x = (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)
    return x if channels is None else np.stack([x * (c + 1) / channels for c in range(channels)])


# --- shapes and dtypes ------------------------------------------------------------------------


def test_mono_passthrough_is_unchanged_and_not_normalised():
    x = tone(amp=0.01)
    out = prepare_audio(x, SAMPLE_RATE)
    assert out.dtype == torch.float32 and out.shape == (x.size,)
    assert torch.equal(out, torch.from_numpy(x))


def test_channels_are_averaged():
    x = tone(channels=2)
    out = prepare_audio(torch.from_numpy(x), SAMPLE_RATE)
    np.testing.assert_allclose(out.numpy(), x.mean(axis=0), atol=1e-7)


def test_batch_takes_item_zero_and_comfy_dict():
    x = np.stack([tone(channels=2), np.zeros_like(tone(channels=2))])  # [B=2, C=2, T]
    expected = x[0].mean(axis=0)
    np.testing.assert_allclose(prepare_audio(x, SAMPLE_RATE).numpy(), expected, atol=1e-7)
    comfy = {"waveform": torch.from_numpy(x), "sample_rate": SAMPLE_RATE}
    np.testing.assert_allclose(prepare_audio(comfy).numpy(), expected, atol=1e-7)


@pytest.mark.parametrize("dtype, scale, offset", [
    (np.int16, 32768.0, 0), (np.int32, 2147483648.0, 0), (np.int8, 128.0, 0), (np.uint8, 128.0,
                                                                               128)])
def test_integer_pcm_is_scaled(dtype, scale, offset):
    x = tone(amp=0.5)
    pcm = (np.round(x * (scale - 1)) + offset).astype(dtype)
    out = prepare_audio(pcm, SAMPLE_RATE)
    assert out.dtype == torch.float32
    np.testing.assert_allclose(out.numpy(), (pcm.astype(np.float64) - offset) / scale, atol=1e-7)
    assert abs(out.abs().max().item() - 0.5) < 0.01


def test_torch_int16_and_half_inputs():
    x = tone()
    pcm = torch.from_numpy((x * 32767).astype(np.int16))
    torch.testing.assert_close(prepare_audio(pcm, SAMPLE_RATE), torch.from_numpy(x), atol=1e-4,
                               rtol=0)
    half = prepare_audio(torch.from_numpy(x).to(torch.bfloat16), SAMPLE_RATE)
    assert half.dtype == torch.float32


# --- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize("audio, sr, match", [
    (np.zeros(0, np.float32), SAMPLE_RATE, "empty"),
    (np.zeros((2, 0), np.float32), SAMPLE_RATE, "empty"),
    (np.zeros((0, 2, 100), np.float32), SAMPLE_RATE, "batch is empty"),
    (np.zeros(SAMPLE_RATE, np.float32), SAMPLE_RATE, "silent"),
    (np.full(SAMPLE_RATE, 5e-5, np.float32), SAMPLE_RATE, "silent"),
    (np.where(np.arange(SAMPLE_RATE) == 7, np.nan, 0.1).astype(np.float32), SAMPLE_RATE,
     "1 NaN/Inf"),
    (np.full(SAMPLE_RATE, np.inf, np.float32), SAMPLE_RATE, "NaN/Inf"),
    (tone(seconds=0.05), SAMPLE_RATE, "too short"),
    (tone(seconds=MAX_SECONDS + 1, sr=100, freq=10), 100, "limit is 600 s"),
    (np.zeros((1, 1, 1, 100), np.float32), SAMPLE_RATE, r"\[T\], \[C, T\] or \[B, C, T\]"),
    (tone().reshape(-1, 1).repeat(2, axis=1), SAMPLE_RATE, r"was it \[T, C\]"),
    (tone().astype(np.int64), SAMPLE_RATE, "unsupported sample dtype int64"),
    (tone().astype(np.complex64), SAMPLE_RATE, "unsupported sample dtype"),
    (tone() > 0, SAMPLE_RATE, "unsupported sample dtype bool"),
    (tone(), None, "sample_rate"),
    (tone(), 0, "sample_rate"),
    (tone(), -8000, "sample_rate"),
    (tone(), "fast", "sample_rate"),
    ([0.1, 0.2], SAMPLE_RATE, "torch.Tensor or numpy.ndarray"),
    ({"waveform": tone()}, None, "'waveform' and 'sample_rate'"),
])
def test_rejections(audio, sr, match):
    with pytest.raises(AudioError, match=match):
        prepare_audio(audio, sr)


def test_silence_after_downmix_is_rejected():
    x = tone()
    with pytest.raises(AudioError, match="silent"):
        prepare_audio(np.stack([x, -x]), SAMPLE_RATE)


def test_limits_are_configurable():
    x = tone(seconds=2.0)
    with pytest.raises(AudioError, match="limit is 1 s"):
        prepare_audio(x, SAMPLE_RATE, max_seconds=1.0)
    with pytest.raises(AudioError, match="too short"):
        prepare_audio(x, SAMPLE_RATE, min_seconds=3.0)
    assert prepare_audio(tone(seconds=0.05), SAMPLE_RATE, min_seconds=0.0).numel() == 2205


def test_audio_error_is_a_value_error():
    assert issubclass(AudioError, ValueError)


# --- resampling -------------------------------------------------------------------------------


@pytest.mark.parametrize("sr", [22050, 48000, 16000, 8000])
def test_resampled_length_and_content(sr):
    x = tone(seconds=1.3, sr=sr, freq=300.0)
    out = prepare_audio(x, sr).numpy()
    assert abs(out.size - x.size * SAMPLE_RATE / sr) <= 1
    t = np.arange(out.size) / SAMPLE_RATE
    ref = 0.5 * np.sin(2 * np.pi * 300.0 * t)
    edge = SAMPLE_RATE // 20  # ignore filter edges
    assert np.abs(out[edge:-edge] - ref[edge:-edge]).max() < 2e-3


# --- files ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, subtype, atol", [
    ("a.wav", None, 1 / 32768 + 1e-6), ("b.wav", "FLOAT", 0.0), ("c.wav", "PCM_24", 1e-6),
    ("d.flac", None, 1 / 32768 + 1e-6), ("e.flac", "PCM_24", 1e-6), ("F.WAV", "pcm_16",
                                                                     1 / 32768 + 1e-6)])
def test_file_round_trip(tmp_path, name, subtype, atol):
    x = tone(seconds=0.4)
    path = save_audio(tmp_path / name, torch.from_numpy(x), SAMPLE_RATE, subtype=subtype)
    assert path.is_file()
    np.testing.assert_allclose(load_audio(path).numpy(), x, atol=atol, rtol=0)


def test_save_accepts_codec_output_shape_and_clips(tmp_path):
    wave = torch.from_numpy(tone(seconds=0.2) * 3)[None, None]  # [1, 1, T], peak 1.5
    path = save_audio(tmp_path / "deep" / "dir" / "clip.wav", wave, subtype="FLOAT")
    data, sr = sf.read(path, dtype="float32")
    assert sr == SAMPLE_RATE and data.shape == (wave.shape[-1],)
    assert data.max() == 1.0 and data.min() == -1.0


def test_load_stereo_file_at_other_rate(tmp_path):
    x = tone(seconds=0.5, sr=48000, channels=2)
    sf.write(tmp_path / "s.flac", x.T, 48000)
    out = load_audio(tmp_path / "s.flac")
    assert abs(out.numel() - 0.5 * SAMPLE_RATE) <= 1


@pytest.mark.parametrize("name, wave, subtype, match", [
    ("x.mp3", tone(), None, "unsupported extension '.mp3'"),
    ("x", tone(), None, "unsupported extension ''"),
    ("x.flac", tone(), "FLOAT", "subtype 'FLOAT'"),
    ("x.wav", np.zeros(0, np.float32), None, "empty"),
    ("x.wav", np.full(10, np.nan, np.float32), None, "NaN"),
    ("x.wav", np.zeros((2, 1, 10), np.float32), None, r"\[T\], \[C, T\] or \[1, C, T\]"),
])
def test_save_rejections(tmp_path, name, wave, subtype, match):
    with pytest.raises(AudioError, match=match):
        save_audio(tmp_path / name, wave, SAMPLE_RATE, subtype=subtype)


def test_save_rejects_bad_rate(tmp_path):
    with pytest.raises(AudioError, match="integer"):
        save_audio(tmp_path / "x.wav", tone(), 44100.5)


def test_load_errors(tmp_path):
    """Each error says what is wrong with the file (never libsndfile's "File does not exist"
    about a file that exists), naming the field."""
    def refused(path, pattern):
        with pytest.raises(AudioError, match=pattern) as e:
            load_audio(path, field="--voice")
        assert str(e.value).startswith("--voice: ") and "does not exist" not in str(e.value)

    refused(tmp_path / "missing.wav", "file not found")
    refused(tmp_path, "is a folder, not an audio file")
    (tmp_path / "empty.wav").write_bytes(b"")
    refused(tmp_path / "empty.wav", r"is empty \(0 bytes\)")
    (tmp_path / "junk.wav").write_bytes(b"RIFF....not really a wave file")
    refused(tmp_path / "junk.wav", "is not audio: its content is none of WAV")
    (tmp_path / "notes.mp3").write_text("these are words, not sound")
    refused(tmp_path / "notes.mp3", "is not audio")
    rng = np.random.default_rng(0)  # an ID3 tag, then noise: an MP3 cut off or damaged
    (tmp_path / "broken.mp3").write_bytes(b"ID3\x03\x00\x00\x00\x00\x00\x00"
                                          + rng.integers(0, 256, 3000, np.uint8).tobytes())
    refused(tmp_path / "broken.mp3", "starts like MP3 but cannot be decoded: it is corrupt")
    good = tmp_path / "good.wav"
    sf.write(good, tone(seconds=0.5, sr=8000), 8000)
    (tmp_path / "cut.flac").write_bytes(b"fLaC" + good.read_bytes()[4:40])
    refused(tmp_path / "cut.flac", "starts like FLAC but cannot be decoded")
    sf.write(tmp_path / "long.wav", tone(seconds=3.0, sr=8000), 8000)
    with pytest.raises(AudioError, match="3.0 s long; the limit is 2 s"):
        load_audio(tmp_path / "long.wav", max_seconds=2.0)
