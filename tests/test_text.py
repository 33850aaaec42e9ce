"""Long-text planning, sentence cutting (in linear time, whole or in pieces), speaker scripts
and SRT parsing."""

import random
import re

import pytest

from fish_core.text.plan import (PROMPT_CLAUSES, PROMPT_CLOSERS, PROMPT_ENDS, SPACED_CLAUSES,
                                 SPACED_CLOSERS, SPACED_ENDS, SPEAKER_TAG, SentenceCutter,
                                 group_turns, nbytes, plan_batches, split_sentences, split_turns)
from fish_core.text.srt import Cue, SubtitleError, format_srt, parse_srt
from fish_core.text.script import ScriptError, assign_speakers, parse_script


def reference_batches(text: str, chunk_length: int) -> list[str]:
    """fish-speech ``generate_long`` batching, quirks included: untagged text is never split and
    text before the first speaker tag is dropped (the oracle our planner is compared with)."""
    turns = [t.tagged for t in split_turns(text) if t.speaker is not None]
    if not SPEAKER_TAG.search(text) or not turns:
        return [text]
    return group_turns(turns, chunk_length, max_speakers=5)


def test_reference_batching_is_reproduced(golden):
    """fish-speech's own batching (quirks included) gives exactly the golden batch texts."""
    for name, value in golden.json("prompts").items():
        if not isinstance(value, dict) or "batches" not in value:
            continue
        chunk = value["generate_long_kwargs"].get("chunk_length", 512)
        assert reference_batches(value["text"],
                                 chunk) == [b["batch_text"] for b in value["batches"]]


def test_untagged_long_text_is_split_at_sentences():
    text = " ".join(f"Sentence number {i} ends here." for i in range(40))
    batches = plan_batches(text, max_bytes=120)
    assert len(batches) > 5
    assert all(nbytes(b) <= 120 for b in batches)
    assert all(b.endswith(".") for b in batches)  # sentence-bounded
    assert " ".join(batches) == text  # nothing lost or reordered
    assert reference_batches(text, 120) == [text]  # the reference never splits it


def test_preamble_before_the_first_tag_is_kept():
    text = "Preamble words. <|speaker:0|>First.<|speaker:1|>Second."
    batches = plan_batches(text, max_bytes=300)
    assert batches == ["Preamble words.\n<|speaker:0|>First.\n<|speaker:1|>Second."]
    assert "Preamble" not in "".join(reference_batches(text, 300))


def test_long_turn_keeps_its_tag_on_every_piece():
    text = "<|speaker:1|>" + " ".join(f"Part {i} of a long turn." for i in range(30))
    batches = plan_batches(text, max_bytes=100)
    assert len(batches) > 3
    for b in batches:
        for line in b.split("\n"):
            assert line.startswith("<|speaker:1|>")
        assert nbytes(b) <= 100


def test_overlong_sentences_are_cut_at_clauses_words_then_bytes():
    clause = "one, two, three, four, five, six, seven, eight, nine, ten, eleven, twelve."
    assert all(nbytes(b) <= 30 for b in plan_batches(clause, 30))
    cjk = "你好世界" * 40  # no punctuation, no spaces
    pieces = plan_batches(cjk, 48)
    assert "".join(pieces) == cjk and all(nbytes(p) <= 48 for p in pieces)
    cjk_sentences = "今日はいい天気ですね。明日も晴れるでしょう。" * 10
    assert all(p.endswith("。") for p in plan_batches(cjk_sentences, 70))


def test_sentence_splitter_and_turns():
    assert split_sentences('He said "Hi." Then left!  Why?\n\nNew paragraph') == [
        'He said "Hi."', "Then left!", "Why?", "New paragraph"]
    turns = split_turns("intro <|speaker:0|> a <|speaker:2|>b")
    assert [(t.speaker, t.text) for t in turns] == [(None, "intro"), (0, "a"), (2, "b")]


def test_empty_text_is_an_error():
    with pytest.raises(ValueError, match="empty"):
        plan_batches("   ")


@pytest.mark.parametrize("script, names, want", [
    ("[speaker_1]: Hello.\n[speaker_2]: Hi.\n[speaker_1]: Bye.", ["A", "B"], [0, 1, 0]),
    ("[speaker_0]: Hello.\n[speaker_1]: Hi.", ["A", "B"], [0, 1]),
    ("Alice: Hello.\nBob: Hi there,\nhow are you?\nAlice: Fine.", ["Bob", "Alice"], [1, 0, 1]),
    ("<|speaker:1|>Hi<|speaker:0|>Yo", ["A", "B"], [1, 0]),
    ("Carol: Hi.\nDave: Yo.", [], [0, 1]),
    # labels naming no voice take the free voices once per label, not once per turn
    ("Alice: Hi.\nBob: Yo.\nAlice: Again.", ["X", "Y"], [0, 1, 0]),
    ("Carol: Hi.\nDave: Yo.\nCarol: Bye.\nDave: Ciao.", [], [0, 1, 0, 1]),
])
def test_script_forms_map_to_voices(script, names, want):
    turns = assign_speakers(parse_script(script, names), names, require_voice=bool(names))
    assert [t.speaker for t in turns] == want


def test_continuation_lines_join_the_previous_turn():
    turns = parse_script("Alice: Hi there,\nhow are you?\nBob: Good.")
    assert [(t.label, t.text) for t in turns] == [("Alice", "Hi there, how are you?"), ("Bob",
                                                                                        "Good.")]


def test_prose_with_a_colon_is_not_a_script():
    assert [t.label for t in parse_script("Note: this is just prose.")] == [""]


def test_speaker_without_voice_is_named():
    turns = parse_script("Alice: Hi.\nBob: Hello.\nEve: Psst.", ["Alice", "Bob"])
    with pytest.raises(ScriptError, match="Eve.*voices given: Alice, Bob"):
        assign_speakers(turns, ["Alice", "Bob"], require_voice=True)


SRT = """\ufeff1
00:00:01,000 --> 00:00:02,500
Hello <i>there</i>.

2
00:00:03,000 --> 00:00:04,000
Second line
continues here.

"""


def test_srt_round_trip():
    cues = parse_srt(SRT.replace("\n", "\r\n"))
    assert cues == [Cue(1, 1.0, 2.5, "Hello there."), Cue(2, 3.0, 4.0,
                                                          "Second line continues here.")]
    assert parse_srt(format_srt(cues)) == cues


@pytest.mark.parametrize("bad, message", [
    ("1\nno timing\nText", "without a 'start --> end'"),
    ("1\n00:00:02,000 --> 00:00:01,000\nText", "ends before it starts"),
    ("1\n00:00:xx --> 00:00:01,000\nText", "bad SRT timing"),
    ("", "no cues"),
])
def test_bad_srt_is_explained(bad, message):
    with pytest.raises(SubtitleError, match=message):
        parse_srt(bad)


# ---------------------------------------------------------------- sentence cutting in linear time
def old_pattern(spaced: str = "", prompt: str = "") -> "re.Pattern":
    """The sentence regex text.plan used before issue 28 (it backtracks quadratically through
    a run of marks not followed by white space), with the marks of today's rule: the oracle
    the scanner must agree with on every (short) text."""
    e = re.escape
    spaced, prompt = SPACED_ENDS + spaced, PROMPT_ENDS + prompt
    return re.compile(rf".+?(?:[{e(spaced)}]+[{e(SPACED_CLOSERS)}]*(?=\s|$)|"
                      rf"[{e(prompt)}]+[{e(PROMPT_CLOSERS)}]*|(?=\n\s*\n)|$)", re.DOTALL)


def by_pattern(pattern, text: str) -> list[str]:
    return [m.group().strip() for m in pattern.finditer(text) if m.group().strip()]


@pytest.mark.parametrize("clauses", [False, True])
def test_the_scanner_agrees_with_the_old_pattern(clauses):
    """Random texts over the characters the rule looks at, whole and fed in random pieces."""
    pattern = old_pattern(SPACED_CLAUSES, PROMPT_CLAUSES) if clauses else old_pattern()
    rng = random.Random(28)
    alphabet = "ab3 .!?…。！？।؟\"')」」\n\n \t,，;:、"
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 18)))
        want = by_pattern(pattern, text)
        assert split_sentences(text, clauses) == want, text
        cutter, got, at = SentenceCutter(clauses), [], 0
        while at < len(text):
            step = rng.randint(0, 5)
            got += cutter.feed(text[at:at + step])
            at += step
        assert got + cutter.finish() == want, text


@pytest.mark.parametrize("adversary", [
    "." * 4000 + "x",  # the run the old pattern backtracked through
    "!?…" * 1500 + "x",
    ".)" * 2000 + "x",  # runs broken by closers
    "。" * 4000,
    "\n" + " " * 4000 + "x",  # a line break that may start a blank line
    "\n \n" * 1000,
    " " * 4000,
], ids=["dots", "marks", "closers", "cjk", "line-break", "blank-lines", "spaces"])
def test_cutting_reads_each_character_a_bounded_number_of_times(adversary):
    """However an adversarial text is split into pieces (one character each, or empty pieces
    in between), the scanner looks at no character more than twice: linear time."""
    text = "Go" + adversary + " Then the end."
    want = split_sentences(text)
    assert re.sub(r"\s", "", "".join(want)) == re.sub(r"\s", "", text)  # nothing lost
    for pieces in ([text], list(text), [p for c in text for p in (c, "", "")]):
        cutter = SentenceCutter()
        got = [s for piece in pieces for s in cutter.feed(piece)] + cutter.finish()
        assert got == want
        assert cutter.scanned <= 2 * len(text) + 2


def test_clause_cutting_is_streaming_safe():
    """Clause marks of Latin text end a clause only before white space (3,000 and 12:30 are
    not cut); CJK ones at once."""
    assert split_sentences("Well, 3,000 of them at 12:30; fine", clauses=True) == [
        "Well,", "3,000 of them at 12:30;", "fine"]
    assert split_sentences("第一段，第二段；第三段。", clauses=True) == ["第一段，", "第二段；",
                                                             "第三段。"]
    cutter = SentenceCutter(clauses=True)
    assert cutter.feed("Yes,") == [] and cutter.feed(" no") == ["Yes,"]
    assert cutter.pending == " no" and cutter.finish() == ["no"]


def test_devanagari_and_arabic_marks_end_sentences():
    assert split_sentences("नमस्ते। कैसे हो? ठीक") == ["नमस्ते।", "कैसे हो?", "ठीक"]
    assert split_sentences("كيف حالك؟ بخير") == ["كيف حالك؟", "بخير"]
