"""Words in time (``speech/words.py``): aligned per text batch, placed on the output timeline.

A deterministic fake aligner proves the placement: it puts word k of a clip at
``[k * STEP, k * STEP + STEP / 2]`` seconds from the clip's start (clamped to the clip), so a
word's place on the output says where its batch sits and how it was stretched. The real aligner
(the tiny fixture) is proven by parity in test_hearing_*; here it only has to keep each word
inside its batch.
"""

from __future__ import annotations

import math

import pytest
import torch

from fish_core.hearing.words import LANGUAGES as HEARING_LANGUAGES
from fish_core.hearing.words import spaced_words
from fish_core.local.synthesizer import Synthesizer
from fish_core.local.timing import AlignerTimer
from fish_core.params import RequestError
from fish_core.speech import words as timing
from fish_core.text.srt import parse_srt

FAST = dict(max_new_tokens=6, temperature=0.8, top_p=0.8, top_k=30)
STEP = 0.01  # seconds between the fake aligner's words


class FakeTimer:
    """Word k of a clip at ``[k * STEP, k * STEP + STEP / 2]``; records what it was given."""

    def __init__(self):
        self.calls = []

    def split(self, text, language):
        return spaced_words(text)

    def time(self, waves, sample_rate, word_lists):
        self.calls.append([list(w) for w in word_lists])
        out = []
        for wave, words in zip(waves, word_lists):
            length = wave.shape[-1] / sample_rate
            out.append([(min(k * STEP, length), min(k * STEP + STEP / 2, length))
                        for k in range(len(words))])
        return out


@pytest.fixture(scope="module")
def synth(ckpt_dir):
    s = Synthesizer.from_pretrained(ckpt_dir, device="cpu", dtype="fp32")
    s.timer = FakeTimer()
    return s


@pytest.fixture(scope="module")
def voice(synth):
    rate = 44100
    t = torch.arange(rate // 2) / rate
    return synth.encode_voice({"waveform": (0.3 * torch.sin(2 * math.pi * 220 * t))[None, None],
                               "sample_rate": rate}, "A short reference.", name="Ref")


def expected(speech, scale: float = 1.0):
    """Where the fake aligner's words must land: word k of segment i at its start + k·STEP·scale."""
    out = []
    for i, segment in enumerate(speech.segments):
        said = " ".join(p for _, p in timing.spoken_parts(segment.text))
        length = (segment.end_sample - segment.start_sample) / segment.sample_rate
        for k, _ in enumerate(spaced_words(said)):
            out.append((i, min(segment.start + k * STEP * scale, segment.start + length)))
    return out


def starts(speech):
    return [(w.segment, w.start) for w in speech.words]


def same_places(got, want):
    assert [i for i, _ in got] == [i for i, _ in want]
    assert [t for _, t in got] == pytest.approx([t for _, t in want], abs=2e-6)


# ---------------------------------------------------------------------------- the setting
def test_languages_are_the_aligners():
    assert timing.LANGUAGES == HEARING_LANGUAGES


@pytest.mark.parametrize("value, want", [(None, None), (False, None), (True, "auto"),
                                         ("auto", "auto"), ("english", "English"),
                                         (" Chinese ", "Chinese"), ("off", None)])
def test_the_setting(value, want):
    assert timing.check_words(value) == want


def test_a_language_outside_the_aligners_names_them():
    with pytest.raises(RequestError, match="Klingon.*Chinese, English.*Spanish") as e:
        timing.check_words("Klingon")
    assert e.value.field == "words"


def test_a_bad_language_is_said_before_any_work(synth, monkeypatch):
    monkeypatch.setattr(synth, "render", lambda *a, **k: pytest.fail("generated"))
    with pytest.raises(RequestError, match="Arabic"):
        synth.tts("Hello.", words="Arabic", **FAST)


def test_a_named_languages_missing_word_splitter_is_said_before_any_work(synth, monkeypatch):
    class Missing(FakeTimer):
        def split(self, text, language):
            raise RuntimeError(f"{language} words are split by the optional package 'x'")

    monkeypatch.setattr(synth, "timer", Missing())
    monkeypatch.setattr(synth, "render", lambda *a, **k: pytest.fail("generated"))
    with pytest.raises(RequestError, match="optional package") as e:
        synth.tts("Hello.", words="English", **FAST)
    assert e.value.field == "words"


@pytest.mark.parametrize("text, language", [
    ("Hello there, world.", "English"), ("Привет, мир.", "Russian"),
    ("我今天很好。", "Chinese"), ("今日はいい天気です。", "Japanese"),
    ("안녕하세요.", "Korean"), ("مرحبا بالعالم", None), ("12 34!", None)])
def test_language_detected_by_script(text, language):
    assert timing.detect_language(text) == language


def test_what_is_aligned_is_what_the_model_said():
    parts = timing.spoken_parts("<|speaker:0|>Hi [whisper] there.<|speaker:1|>[laugh] Yes!")
    assert parts == [(0, "Hi there."), (1, "Yes!")]


# ---------------------------------------------------------------------------- placement
def test_placement_offsets_scales_and_speakers():
    rate = 1000
    waves = [torch.zeros(500), torch.zeros(400)]
    spans = [(100, 600), (900, 1100)]  # batch 2 after a gap, stretched 400 → 200 samples
    placed = timing.place_words(FakeTimer(), "English", ["One two three.", "Four five."],
                                [0, 1], waves, spans, rate, take=2)
    assert [(w.text, w.start, w.speaker, w.take, w.segment) for w in placed] == [
        ("One", 0.1, 0, 2, 0), ("two", 0.11, 0, 2, 0), ("three", 0.12, 0, 2, 0),
        ("Four", 0.9, 1, 2, 1), ("five", 0.905, 1, 2, 1)]
    assert placed[-1].end == pytest.approx(0.9 + 0.015 / 2)


def test_auto_times_another_script_as_its_sentence():
    rate = 1000
    timer = FakeTimer()
    placed = timing.place_words(timer, "auto", ["Hello you.", "مرحبا بالعالم"], [None, None],
                                [torch.zeros(300), torch.zeros(200)], [(0, 300), (500, 700)],
                                rate)
    assert [(w.text, w.level) for w in placed] == [("Hello", "word"), ("you", "word"),
                                                   ("مرحبا بالعالم", "sentence")]
    assert (placed[-1].start, placed[-1].end) == (0.5, 0.7)
    assert timer.calls == [[["Hello", "you"]]]  # the other script never reached the aligner


def test_a_turn_batch_keeps_each_words_speaker():
    placed = timing.place_words(FakeTimer(), "auto", ["<|speaker:0|>Hi.<|speaker:1|>Hello you."],
                                [None], [torch.zeros(1000)], [(0, 1000)], 1000)
    assert [(w.text, w.speaker) for w in placed] == [("Hi", 0), ("Hello", 1), ("you", 1)]


# ---------------------------------------------------------------------------- on results
def test_words_only_when_asked(synth):
    synth.timer.calls.clear()
    assert synth.tts("No words here.", seed=1, **FAST).words is None
    assert synth.timer.calls == []


def test_tts_words_after_a_pause(synth):
    speech = synth.tts("First part here. [pause:400ms] Second part here.", seed=1, words=True,
                       **FAST)
    assert len(speech.segments) == 2
    assert speech.segments[1].start - speech.segments[0].end == pytest.approx(0.4, abs=1e-4)
    same_places(starts(speech), expected(speech))
    assert [w.text for w in speech.words] == ["First", "part", "here", "Second", "part", "here"]
    assert all(w.speaker is None and w.take == 0 for w in speech.words)


def test_batches_are_aligned_with_their_own_text_after_the_lexicon(synth, tmp_path):
    lexicon = tmp_path / "lexicon.tsv"
    lexicon.write_text("Sailfish\tSale fish\n", encoding="utf-8")
    synth.timer.calls.clear()
    speech = synth.tts("Sailfish talks.", seed=1, words="English", lexicon=lexicon, **FAST)
    assert synth.timer.calls == [[["Sale", "fish", "talks"]]]
    assert [w.text for w in speech.words] == ["Sale", "fish", "talks"]


@pytest.mark.parametrize("speed", [0.5, 2.0])
def test_speed_scales_the_times(synth, speed):
    pytest.importorskip("pedalboard")
    speech = synth.tts("Quick brown foxes jump.", seed=1, words=True, speed=speed, **FAST)
    segment = speech.segments[0]
    made = segment.frames * synth.runtime.codec.frame_length
    scale = (segment.end_sample - segment.start_sample) / made
    assert scale == pytest.approx(1 / speed, rel=1e-3)
    same_places(starts(speech), expected(speech, scale))


def test_dialogue_words_carry_their_speakers(synth, voice):
    speech = synth.dialogue("Alice: Hello Bob.\nBob: Hi Alice, hi.", {"Alice": voice, "Bob": voice},
                            pause=0.3, seed=1, words=True, **FAST)
    assert [(w.text, w.speaker) for w in speech.words] == [
        ("Hello", 0), ("Bob", 0), ("Hi", 1), ("Alice", 1), ("hi", 1)]
    same_places(starts(speech), expected(speech))
    assert speech.words[2].start >= speech.segments[0].end + 0.3 - 1e-6


def test_each_take_has_its_words(synth):
    takes = synth.tts("Take this.", seed=3, takes=3, words=True, **FAST)
    for k, speech in enumerate(takes):
        assert [w.take for w in speech.words] == [k, k]
        same_places(starts(speech), expected(speech))


def test_subtitle_words_sit_on_their_cues(synth):
    srt = ("1\n00:00:00,500 --> 00:00:01,500\nFirst cue.\n\n"
           "2\n00:00:02,000 --> 00:00:03,000\nSecond cue [pause:200ms] goes on.\n")
    result = synth.subtitles(srt, seed=1, words=True, **FAST)
    same_places(starts(result), expected(result))
    cue2 = [w for w in result.words if w.segment >= 1]
    assert cue2[0].start == pytest.approx(result.cues[1].start)
    assert [w.text for w in cue2] == ["Second", "cue", "goes", "on"]


def test_captions_follow_the_words(synth, voice):
    speech = synth.dialogue("Alice: Hello Bob.\nBob: Hi Alice.", {"Alice": voice, "Bob": voice},
                            pause=0.3, seed=1, words=True, **FAST)
    cues = parse_srt(speech.captions("srt"))
    assert [c.text for c in cues] == ["Hello Bob.", "Hi Alice."]  # a line per speaker
    assert cues[1].start == pytest.approx(speech.words[2].start, abs=1e-3)
    vtt = speech.captions("karaoke")
    assert vtt.startswith("WEBVTT") and "<00:00:" in vtt
    assert '"speaker": 1' in speech.captions("json")
    assert speech.timeline()["words"][0]["text"] == "Hello"


# ---------------------------------------------------------------------------- the real aligner
def test_the_real_aligner_keeps_each_word_in_its_batch(ckpt_dir, aligner_fixtures):
    synth = Synthesizer.from_pretrained(ckpt_dir, device="cpu", dtype="fp32",
                                        aligner=aligner_fixtures / "tiny-aligner")
    assert isinstance(synth.timer, AlignerTimer) and not synth.timer.is_loaded
    speech = synth.tts("One two. [pause:300ms] Three four five.", seed=1, words="English",
                       **FAST)
    assert synth.timer.is_loaded
    assert [w.text for w in speech.words] == ["One", "two", "Three", "four", "five"]
    for word in speech.words:
        segment = speech.segments[word.segment]
        assert segment.start - 1e-6 <= word.start <= word.end <= segment.end + 1e-6
    synth.free_aligner()
    assert not synth.timer.is_loaded


def test_a_wrong_aligner_folder_is_said_before_the_model_loads(ckpt_dir, tmp_path):
    with pytest.raises(Exception, match="aligner folder"):
        Synthesizer.from_pretrained(ckpt_dir, device="cpu", dtype="fp32", aligner=tmp_path)
