"""hearing/checking.py: every take is transcribed and scored with exactly the numbers of a
direct call of the scorer on its transcript; the best take is the lowest rate."""

import numpy as np
import pytest
from conftest import fixtures_dir

from fish_core.hearing.asr import SpeechRecognizer, Transcript
from fish_core.hearing.checking import CheckedTake, best_take, check_takes
from fish_core.hearing.scoring import score


@pytest.fixture(scope="module")
def recognizer():
    root = fixtures_dir() / "aligner" / "tiny-asr"
    if not root.is_dir():
        pytest.skip("fixture set without the tiny Qwen3-ASR checkpoint")
    return SpeechRecognizer.from_pretrained(root)


def takes(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(21)
    return [(0.2 * rng.standard_normal(int((1.0 + 0.7 * k) * 24000))).astype(np.float32)
            for k in range(n)]


def test_each_take_scores_as_a_direct_call_on_its_transcript(recognizer):
    text = "The quick brown fox jumps over the lazy dog."
    clips = takes(3)
    checked = check_takes(recognizer, clips, 24000, text, language="English")
    assert len(checked) == 3
    for clip, c in zip(clips, checked):
        alone = recognizer.transcribe(clip, 24000, "English")
        assert c.heard == alone
        assert c.score == score(text, alone.text)
    assert any(c.heard.text for c in checked), "nothing was heard: the test proves nothing"


def made(rate: float, complete: bool = True) -> CheckedTake:
    fake = score("a b c d", "a b c d")
    return CheckedTake(Transcript("English", "x", complete), type(fake)(
        rate, "word", int(rate * 4), 4, ()))


def test_best_take_is_the_lowest_rate_first_of_equals():
    assert best_take([made(0.5), made(0.25), made(0.25)]) == 1
    assert best_take([made(0.0, complete=False), made(0.75)]) == 1  # cut short loses
    with pytest.raises(ValueError, match="no takes"):
        best_take([])
