"""hearing/split.py: clips made ready for the ASR and cut where the reference cuts them
(golden/units/split_audio.json, golden/units/normalize_audio.safetensors)."""

import json

import numpy as np
import pytest
from conftest import fixtures_dir
from safetensors.numpy import load_file

from fish_core.hearing.split import MIN_SECONDS, SAMPLE_RATE, prepare, split


def aligner_file(name: str):
    path = fixtures_dir() / "aligner" / name
    if not path.is_file():
        pytest.skip("fixture set without the aligner/ASR goldens")
    return path


def test_cuts_match_reference():
    cases = json.loads(aligner_file("golden/units/split_audio.json").read_text(encoding="utf-8"))
    audio = load_file(str(aligner_file("audio.safetensors")))
    for case in cases:
        wave = audio[case["case"]][:case.get("prefix_samples")]
        pieces = split(wave, SAMPLE_RATE, case["max_chunk_sec"], case["search_expand_sec"])
        assert [p.wave.shape[0] for p in pieces] == [c["n"] for c in case["chunks"]]
        offsets = [c["offset_sec"] for c in case["chunks"]]
        assert [p.offset for p in pieces] == pytest.approx(offsets, abs=1e-12)
        # Put back together, the pieces are the clip (a padded tail aside).
        joined = np.concatenate([p.wave for p in pieces])
        assert np.array_equal(joined[:wave.shape[0]], wave)
        assert not joined[wave.shape[0]:].any()


def test_short_clip_is_one_padded_piece():
    pieces = split(np.ones(100, dtype=np.float32), SAMPLE_RATE, 5.0)
    assert len(pieces) == 1 and pieces[0].offset == 0.0
    assert pieces[0].wave.shape[0] == int(MIN_SECONDS * SAMPLE_RATE)


def test_prepare_matches_reference():
    tensors = load_file(str(aligner_file("golden/units/normalize_audio.safetensors")))
    names = sorted({k.rsplit(".", 1)[0] for k in tensors})
    assert "int16" in names and "stereo_2xN" in names
    for name in names:
        given = tensors[name + ".in"]
        if name == "int16":  # stored as int32
            given = given.astype(np.int16)
        got = prepare(given, SAMPLE_RATE)
        assert got.dtype == np.float32
        assert np.array_equal(got, tensors[name + ".out"]), name


def test_prepare_resamples_to_16k():
    t = np.arange(44100, dtype=np.float32) / 44100
    got = prepare(0.5 * np.sin(2 * np.pi * 440 * t), 44100)
    assert got.shape[0] == SAMPLE_RATE and got.dtype == np.float32
    assert abs(float(np.max(np.abs(got))) - 0.5) < 0.02
