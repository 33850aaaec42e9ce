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


def test_voice_save_on_a_full_disk_is_one_clear_node_error(env, voice, monkeypatch):
    """The disk fills while the voice is written: the node's error names the file and the
    reason, and no file (whole or partial) is left in the voices folder."""
    import errno

    from fish_core.audio import atomic

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    voices_dir = env.base / "models" / "fish_speech_voices"
    before = sorted(p.name for p in voices_dir.rglob("*")) if voices_dir.exists() else []
    monkeypatch.setattr(atomic.os, "fsync", full)
    with pytest.raises(ValueError, match=r"cannot write .*full_00001\.safetensors: no space "
                                         r"left on the device$"):
        run_v1(env, "SailfishVoiceSave", voice=voice, filename_prefix="full")
    monkeypatch.undo()
    assert sorted(p.name for p in voices_dir.rglob("*")) == before


def test_voice_encode_with_no_transcript_hears_the_clip(env, model):
    """An empty transcript: the clip is heard by Qwen3-ASR from the models folder (the tiny
    one placed there as the download would), and the voice carries what a direct
    ``transcribe`` of the same clip says."""
    from conftest import fixtures_dir

    from fish_core.hearing.transcription import transcribe

    tiny = fixtures_dir() / "aligner" / "tiny-asr"
    if not tiny.is_dir():
        pytest.skip("fixture set without the tiny Qwen3-ASR checkpoint")
    target = env.models / "qwen3-asr-0.6b"
    if not target.exists():
        target.symlink_to(tiny, target_is_directory=True)
    rng = torch.Generator().manual_seed(11)  # shaped noise: the tiny recogniser hears words
    n = int(2.5 * 22050)
    envelope = (torch.sin(torch.arange(n) / 22050 * 2 * torch.pi * 1.1) > -0.2).float()
    wave = 0.25 * torch.randn(n, generator=rng) * envelope
    reference = {"waveform": wave.expand(1, 2, -1).clone(), "sample_rate": 22050}
    voice = run_v3(env, "SailfishVoiceEncode", model=model, audio=reference, transcript=" ",
                   name="Heard")[0]
    direct = transcribe(reference["waveform"][0], reference["sample_rate"], asr=tiny)
    assert direct.text.strip() and voice.clips[0].text == direct.text.strip()
