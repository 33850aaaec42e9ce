"""``text/pace.py`` and the progress the synthesizer reports with it: frames generated against
the frames the text is expected to take, not the frame limit."""

import pytest

from fish_core.text.pace import BYTES_PER_SECOND, MIN_SECONDS, Pace, expected_frames

RATE = 44100 / 2048  # S2's codec: 21.5 frames a second


def test_expected_frames_follow_the_bytes_of_what_is_spoken():
    sentence = "The quick brown fox jumps over the lazy dog."  # 44 bytes: ~2.9 s
    assert expected_frames(sentence, RATE) == round(len(sentence) / BYTES_PER_SECOND * RATE)
    assert expected_frames("<|speaker:0|>" + sentence, RATE) == expected_frames(sentence, RATE)
    assert expected_frames("Hi.", RATE) == round(MIN_SECONDS * RATE)  # never a zero-frame guess
    assert expected_frames("你好世界。", RATE) == round(15 / BYTES_PER_SECOND * RATE)  # UTF-8 bytes


def test_pace_is_corrected_as_batches_end():
    pace = Pace(["a" * 30, "b" * 30, "c" * 30], frame_rate=10.0, limit=100)  # 20 frames each
    assert pace.frame(1) == (1, 60)
    assert pace.frame(25) == (25, 65)  # past its guess: the batch has made 25 already
    assert pace.frame(40) == (40, 80)
    assert pace.end_batch() == (40, 120)  # twice the guess: the later batches are scaled
    assert pace.frame(10) == (50, 120)
    assert pace.end_batch() == (50, 75)  # 50 for 40 guessed: the last one x 1.25
    assert pace.end_batch() == (50, 50)  # the last batch made nothing more: done is the total
    capped = Pace(["x" * 3000], frame_rate=10.0, limit=64)
    assert capped.frame(1) == (1, 64)  # never more than the frame limit


def test_synthesizer_progress_starts_at_the_expected_frames(tiny_synth):
    """A short sentence with the default frame limit (1024): the first total is the guess for
    that sentence (a few dozen frames), and the last report is done == total."""
    seen = []
    text = "Progress for a short sentence."
    speech = tiny_synth.tts(text, seed=1, max_new_tokens=40,
                            on_progress=lambda d, t: seen.append((d, t)))
    rate = tiny_synth.sample_rate / tiny_synth.runtime.codec.frame_length
    assert seen[0] == (1, min(40, expected_frames(text, rate)))
    done = [d for d, _ in seen]
    frames = speech.codes.shape[1]  # + the step that drew the end of speech, if it came
    assert done == sorted(done) and seen[-1][0] == seen[-1][1] in (frames, frames + 1)
    assert all(t >= d for d, t in seen)


def test_progress_of_a_long_limit_is_not_the_limit(tiny_synth):
    from fish_core.params import Cancelled

    seen = []
    with pytest.raises(Cancelled):  # stop after a few frames: only the totals matter here
        tiny_synth.tts("Hello there.", seed=1, max_new_tokens=1024,
                       on_progress=lambda d, t: seen.append((d, t)), cancel=lambda: len(seen) >= 3)
    rate = tiny_synth.sample_rate / tiny_synth.runtime.codec.frame_length
    assert seen and {t for _, t in seen} == {expected_frames("Hello there.", rate)}
    assert seen[0][1] < 1024 // 10
