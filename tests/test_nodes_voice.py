"""Voice Encode / Save / Load (``nodes/voice.py``)."""

from __future__ import annotations

import pytest
import torch

from node_env import run_v1, run_v3


def test_voice_save_and_load_round_trip(env, voice):
    (first,) = run_v1(env, "SailfishVoiceSave", voice=voice, filename_prefix="people/alice")
    (second,) = run_v3(env, "SailfishVoiceSave", voice=voice, filename_prefix="people/alice")
    assert (first, second) == ("people/alice_00001.safetensors", "people/alice_00002.safetensors")
    voices_dir = env.base / "models" / "fish_speech_voices"
    assert (voices_dir / first).is_file()
    options = env.v1["SailfishVoiceLoad"].INPUT_TYPES()["required"]["voice"][0]
    assert options == [first, second]
    (loaded,) = run_v3(env, "SailfishVoiceLoad", voice=first)
    assert loaded.name == "Alice" and torch.equal(loaded.clips[0].codes, voice.clips[0].codes)
    fingerprint = env.v1["SailfishVoiceLoad"].IS_CHANGED(voice=first)
    load = env.v3["SailfishVoiceLoad"]
    assert fingerprint and fingerprint == load.fingerprint_inputs(voice=first)
    with pytest.raises(ValueError, match="filename_prefix"):
        run_v1(env, "SailfishVoiceSave", voice=voice, filename_prefix="../outside")
    with pytest.raises(FileNotFoundError, match="voice: '../x.safetensors'"):
        run_v1(env, "SailfishVoiceLoad", voice="../x.safetensors")
