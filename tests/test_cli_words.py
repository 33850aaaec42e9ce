"""``--words FILE`` on ``say``, ``srt`` and ``book``, run as users run it (a subprocess, offline)
on the tiny checkpoints: the S2 fixture speaks, the tiny aligner fixture times the words. The
times must follow the audio file written beside them."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf

from fish_core.text.srt import parse_srt
from test_cli import run_cli

FAST = ("--max-new-tokens", "6", "--seed", "1", "--precision", "fp32")


@pytest.fixture(scope="module")
def tiny_aligner(aligner_fixtures):
    return aligner_fixtures / "tiny-aligner"


def say(ckpt_dir, aligner, tmp_path, *args, words="w.json", out="a.wav"):
    proc = run_cli("say", *args, "--model", ckpt_dir, "--aligner", aligner, "-o",
                   tmp_path / out, "--words", tmp_path / words, *FAST)
    assert proc.returncode == 0, proc.stderr
    return proc


def silences(path, at_least: float):
    """``(start, end)`` seconds of every run of exact zeros at least ``at_least`` long."""
    data, rate = sf.read(path)
    zero = np.concatenate([[False], data == 0, [False]])
    edges = np.flatnonzero(np.diff(zero.astype(int)))
    return [(a / rate, b / rate) for a, b in zip(edges[::2], edges[1::2])
            if (b - a) / rate >= at_least]


def test_say_words_srt_follows_the_audio_and_its_pause(ckpt_dir, tiny_aligner, tmp_path):
    proc = say(ckpt_dir, tiny_aligner, tmp_path, "Hello there friend. [pause:500ms] "
               "Goodbye now.", words="out.srt")
    assert "words in" in proc.stdout
    cues = parse_srt((tmp_path / "out.srt").read_text(encoding="utf-8"))
    duration = sf.info(tmp_path / "a.wav").duration
    (quiet_start, quiet_end), = silences(tmp_path / "a.wav", 0.45)
    assert [c.text for c in cues][0].startswith("Hello") and cues[-1].text.endswith("now.")
    for cue in cues:
        assert 0 <= cue.start <= cue.end <= duration + 1e-3
        assert cue.end <= quiet_start + 2e-3 or cue.start >= quiet_end - 2e-3  # not in the pause
    assert cues[-1].start >= quiet_end - 2e-3


def test_say_words_scale_with_speed(ckpt_dir, tiny_aligner, tmp_path):
    pytest.importorskip("pedalboard")
    text = "Hello from the command line."
    say(ckpt_dir, tiny_aligner, tmp_path, text, words="plain.json", out="plain.wav")
    say(ckpt_dir, tiny_aligner, tmp_path, text, "--speed", "2", words="fast.json",
        out="fast.wav")
    plain = json.loads((tmp_path / "plain.json").read_text(encoding="utf-8"))
    fast = json.loads((tmp_path / "fast.json").read_text(encoding="utf-8"))
    scale = sf.info(tmp_path / "fast.wav").frames / sf.info(tmp_path / "plain.wav").frames
    assert scale == pytest.approx(0.5, abs=1e-3)
    assert [w["text"] for w in fast] == [w["text"] for w in plain]
    for p, f in zip(plain, fast):  # the same audio, aligned the same, placed stretched
        assert f["start"] == pytest.approx(p["start"] * scale, abs=1e-5)
        assert f["end"] == pytest.approx(p["end"] * scale, abs=1e-5)


def test_say_script_words_carry_speakers_after_the_turn_pause(ckpt_dir, tiny_aligner,
                                                               tmp_path):
    script = tmp_path / "play.txt"
    script.write_text("[speaker_1]: Hello Bob.\n[speaker_2]: Hi Alice, hello.\n",
                      encoding="utf-8")
    say(ckpt_dir, tiny_aligner, tmp_path, "--script", script, "--pause", "0.4")
    words = json.loads((tmp_path / "w.json").read_text(encoding="utf-8"))
    assert [(w["text"], w["speaker"]) for w in words] == [
        ("Hello", 0), ("Bob", 0), ("Hi", 1), ("Alice", 1), ("hello", 1)]
    (quiet_start, quiet_end), = silences(tmp_path / "a.wav", 0.35)
    assert max(w["end"] for w in words[:2]) <= quiet_start + 2e-3
    assert min(w["start"] for w in words[2:]) >= quiet_end - 2e-3


def test_say_takes_write_a_words_file_per_take(ckpt_dir, tiny_aligner, tmp_path):
    proc = say(ckpt_dir, tiny_aligner, tmp_path, "Take me twice.", "--takes", "2",
               words="w.karaoke.vtt")
    assert "w-2.karaoke.vtt" in proc.stdout
    for k in (1, 2):
        vtt = (tmp_path / f"w-{k}.karaoke.vtt").read_text(encoding="utf-8")
        assert vtt.startswith("WEBVTT") and "Take" in vtt
        assert sf.info(tmp_path / f"a-{k}.wav").duration > 0


def test_srt_words_sit_on_the_cues(ckpt_dir, tiny_aligner, tmp_path):
    srt = tmp_path / "in.srt"
    srt.write_text("1\n00:00:00,300 --> 00:00:01,000\nFirst cue here.\n\n"
                   "2\n00:00:02,000 --> 00:00:03,000\nSecond cue.\n", encoding="utf-8")
    proc = run_cli("srt", srt, "--model", ckpt_dir, "--aligner", tiny_aligner, "-o",
                   tmp_path / "s.wav", "--srt-out", tmp_path / "placed.srt", "--words",
                   tmp_path / "w.json", *FAST)
    assert proc.returncode == 0, proc.stderr
    placed = parse_srt((tmp_path / "placed.srt").read_text(encoding="utf-8"))
    words = json.loads((tmp_path / "w.json").read_text(encoding="utf-8"))
    assert [w["text"] for w in words] == ["First", "cue", "here", "Second", "cue"]
    for w in words:
        cue = placed[0] if w["segment"] == 0 else placed[1]
        assert cue.start - 1e-3 <= w["start"] <= w["end"] <= cue.end + 1e-3


def test_book_words_follow_the_chapters(ckpt_dir, tiny_aligner, tmp_path):
    book = tmp_path / "b.md"
    book.write_text("# One\n\nThe first chapter.\n\n# Two\n\nThe second one.\n",
                    encoding="utf-8")
    out = tmp_path / "out"
    proc = run_cli("book", book, "-o", out, "--model", ckpt_dir, "--aligner", tiny_aligner,
                   "--words", tmp_path / "book.srt", *FAST)
    assert proc.returncode == 0, proc.stderr
    chapters = json.loads((out / "chapters.json").read_text(encoding="utf-8"))["chapters"]
    cues = parse_srt((tmp_path / "book.srt").read_text(encoding="utf-8"))
    first, second = chapters[1]["start"], chapters[1]["start"] + chapters[1]["duration"]
    one = [c for c in cues if "first" in c.text]
    two = [c for c in cues if "second" in c.text]
    assert one and two
    assert all(c.end <= first + 2e-3 for c in one)  # a cue lasts 1 ms at least
    assert all(first - 1e-3 <= c.start <= c.end <= second + 2e-3 for c in two)
    beside = sorted(p.name for p in out.glob("*.words.json"))
    assert len(beside) == 2


def test_words_flags_are_checked_before_the_model_loads(ckpt_dir, tmp_path):
    for args, said in ((["--words", tmp_path / "w.txt"], ".karaoke.vtt"),
                       (["--words", tmp_path / "w.srt", "--words-language", "Klingon"],
                        "Spanish"),
                       (["--words", tmp_path / "w.srt", "--aligner", tmp_path], "aligner folder"),
                       (["--words", tmp_path / "w.srt", "--stream"], "--stream")):
        proc = run_cli("say", "hi", "--model", tmp_path / "no-model", "-o",
                       tmp_path / "x.wav", *args)
        assert proc.returncode == 2 and said in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
