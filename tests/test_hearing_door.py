"""fish_core.hearing.align: the Python door — waveform + text + language → timed words, the
inputs checked before any model loads."""

import pytest
import torch
from safetensors.torch import load_file

import fish_core.hearing as hearing
from fish_core.audio.files import AudioError
from fish_core.hearing import align, load_aligner


def noise(seconds, rate, seed=0):
    return torch.randn(int(seconds * rate), generator=torch.Generator().manual_seed(seed)) * 0.1


def test_the_door_gives_the_reference_items(aligner_fixtures, aligner_golden):
    audio = load_file(str(aligner_fixtures / "audio.safetensors"))
    case = aligner_golden.json("aligner/en_short")
    words = align(audio["en_short"], case["text"], case["language"], 16000,
                  aligner=aligner_fixtures / "tiny-aligner")
    assert [{"text": w.text, "start_time": w.start, "end_time": w.end} for w in words] == (
        case["items"])


def test_any_rate_and_a_loaded_aligner(aligner_fixtures):
    loaded = load_aligner(aligner_fixtures / "tiny-aligner")
    assert load_aligner(aligner_fixtures / "tiny-aligner") is loaded  # kept for the next call
    stereo = torch.stack([noise(2, 44100), noise(2, 44100, 1)])
    words = align(stereo, "Hello, brave new world!", "english", 44100, aligner=loaded)
    assert [w.text for w in words] == ["Hello", "brave", "new", "world"]
    times = [t for w in words for t in (w.start, w.end)]
    # random weights: times are monotonic and inside the head's range, not tied to the clip
    assert times == sorted(times) and 0 <= times[0]
    assert times[-1] <= loaded.model.config.head_size * loaded.segment_seconds


def test_bad_input_fails_before_a_model_loads(aligner_fixtures, monkeypatch):
    def no_load(*args):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(hearing, "_loaded", no_load)
    folder = aligner_fixtures / "tiny-aligner"
    with pytest.raises(ValueError, match="text"):
        align(noise(1, 16000), "  ", "English", 16000, aligner=folder)
    with pytest.raises(ValueError, match="text: has no words"):
        align(noise(1, 16000), "!!! ...", "English", 16000, aligner=folder)
    with pytest.raises(ValueError, match="language 'Elvish'"):
        align(noise(1, 16000), "hi", "Elvish", 16000, aligner=folder)
    with pytest.raises(AudioError, match="audio.*silent"):
        align(torch.zeros(16000), "hi", "English", 16000, aligner=folder)
    from fish_core.hearing.config import HearingConfig

    config = HearingConfig.from_dir(folder)
    longest = config.head_size * config.timestamp_segment_ms / 1000
    with pytest.raises(ValueError, match="longer than the aligner can time"):
        align(noise(longest + 1, 8000), "hi", "English", 8000, aligner=folder)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from fish_core.loading.hub import ModelNotFound

    with pytest.raises(ModelNotFound, match="--aligner FOLDER"):
        align(noise(1, 16000), "hi", "English", 16000, models_dir=aligner_fixtures / "none")
