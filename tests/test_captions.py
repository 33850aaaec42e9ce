"""text/captions.py: timed words → readable caption lines → SRT, WebVTT, karaoke WebVTT, JSON."""

import json
import re
from collections import namedtuple

import pytest

from fish_core.text.captions import (caption_lines, locate, to_karaoke_vtt, to_srt, to_vtt,
                                     write_captions)
from fish_core.text.srt import parse_srt

W = namedtuple("W", "text start end")


def evenly(words, step=0.3, length=0.25):
    return [W(w, round(i * step, 3), round(i * step + length, 3)) for i, w in enumerate(words)]


TEXT = "« Don't panic! » It's late, we'll pay $19.99 for O'Brien's tickets."
WORDS = ["Don't", "panic", "It's", "late", "we'll", "pay", "1999", "for", "O'Brien's", "tickets"]


def test_lines_show_the_texts_own_punctuation_and_break_after_a_sentence():
    lines = caption_lines(evenly(WORDS), TEXT, max_chars=60)
    assert [line.text for line in lines] == [
        "« Don't panic! »", "It's late, we'll pay $19.99 for O'Brien's tickets."]
    assert [w[0] for w in lines[1].words] == ["It's", "late,", "we'll", "pay", "$19.99", "for",
                                              "O'Brien's", "tickets."]
    assert lines[0].start == 0.0 and lines[0].end == 0.55


def test_lines_break_by_length_pause_and_duration():
    words = evenly(WORDS[2:])
    assert all(len(line.text) <= 20 for line in caption_lines(words, TEXT, max_chars=20))
    paused = words[:3] + [W(w.text, w.start + 2, w.end + 2) for w in words[3:]]
    assert [len(line.words) for line in caption_lines(paused, TEXT)] == [3, 5]
    assert all(line.end - line.start <= 1.0 for line in caption_lines(words, TEXT, max_seconds=1))


def test_words_from_elsewhere_are_joined_with_spaces():
    assert locate("something else", ["hello"]) is None
    (line,) = caption_lines(evenly(["hello", "world"]), "something else")
    (part,) = caption_lines(evenly(["late", "we'll"]), TEXT)  # only the words' own part shows
    assert part.text == "late, we'll"
    assert line.text == "hello world"
    (line,) = caption_lines(evenly(["我", "好"]), None)
    assert line.text == "我 好"


def test_cjk_lines_keep_their_own_spacing():
    text = "我今天用 iPhone 拍了照片，效果非常好。"
    words = ["我", "今", "天", "用", "iPhone", "拍", "了", "照", "片", "效", "果", "非", "常", "好"]
    lines = caption_lines(evenly(words), text, max_chars=12)
    assert "".join(line.text for line in lines).replace(" ", "") == text.replace(" ", "")
    assert all(len(line.text) <= 12 for line in lines)


def test_srt_round_trips_and_vtt_is_well_formed():
    lines = caption_lines(evenly(WORDS + ["zero"]) + [W("again", 9.0, 9.0)], TEXT + " zero again")
    cues = parse_srt(to_srt(lines))
    assert [c.text for c in cues] == [line.text for line in lines]
    assert all(c.end > c.start for c in cues)  # a word of no length still lasts 1 ms
    vtt = to_vtt(lines)
    assert vtt.startswith("WEBVTT\n\n") and "&lt;" not in vtt
    stamps = re.findall(r"(\d\d):(\d\d):(\d\d)\.(\d\d\d) --> ", vtt)
    assert len(stamps) == len(lines)
    karaoke = to_karaoke_vtt(lines)
    tags = [tuple(map(int, t)) for t in re.findall(r"<(\d\d):(\d\d):(\d\d)\.(\d\d\d)>", karaoke)]
    assert len(tags) == sum(len(line.words) - 1 for line in lines) and tags == sorted(tags)


def test_vtt_escapes_markup_and_blank_lines():
    (line,) = caption_lines([W("a", 0, 1), W("c", 1, 2)], "a <b>\n\n& c")
    assert "<b>" not in to_vtt([line]) and "&amp;" in to_vtt([line])
    assert "\n\n" not in to_vtt([line]).split("\n\n", 1)[1].rstrip("\n")


def test_json_and_the_format_choice():
    words = evenly(["a", "b"])
    assert json.loads(write_captions(words, "json")) == [
        {"text": "a", "start": 0.0, "end": 0.25}, {"text": "b", "start": 0.3, "end": 0.55}]
    assert write_captions(words, "srt", "a b").startswith("1\n00:00:00,000 --> ")
    assert write_captions([], "vtt") == "WEBVTT\n\n"
    with pytest.raises(ValueError, match="format 'ass'"):
        write_captions(words, "ass")
    with pytest.raises(ValueError, match="max_chars"):
        caption_lines(words, max_chars=0)


def test_captions_of_the_aligners_reference_items(aligner_golden):
    """The recorded items of a long case: every word in exactly one line, in order, each
    line's times covering its words."""
    case = aligner_golden.json("aligner/en_long")
    words = [W(i["text"], i["start_time"], i["end_time"]) for i in case["items"]]
    lines = caption_lines(words, case["text"])
    assert sum(len(line.words) for line in lines) == len(words)
    assert " ".join(line.text for line in lines) == case["text"]
    for line in lines:
        assert all(line.start <= s and e <= line.end for _, s, e in line.words)
