"""ComfyUI AUDIO packed and unpacked (``nodes/audio.py``)."""

from __future__ import annotations

import pytest
import torch


def test_audio_is_unpacked_here_naming_the_input(env):
    audio = env.pack.nodes.audio
    wave = torch.zeros(1, 1, 8)
    assert (audio.from_audio({"waveform": wave, "sample_rate": 24000}, "audio") ==
            {"audio": wave, "sample_rate": 24000})
    for bad in ({"waveform": wave}, wave, None):
        with pytest.raises(ValueError, match="reference_audio: expected ComfyUI AUDIO"):
            audio.from_audio(bad, "reference_audio")
