"""The pronunciation lexicon (``text/lexicon.py``): file format, whole-word and case rules,
longest match first, global + per voice, applied before tokenisation (the ``plan`` command
shows it), and the phoneme markers of S2's tokenizer (present in the vocabulary, never
produced from text, so refused in respellings)."""

import json

import pytest
import torch

from fish_core.cli import main
from fish_core.speech.finishing import Finishing
from fish_core.speech.voices import Voice
from fish_core.text.lexicon import Lexicon, LexiconError
from fish_core.text.prompt import Reference
from fish_core.text.tokenizer import FishTokenizer

LEXICON = """# words S2 gets wrong
SQL\tsequel
Dr.\tDoctor
New York\tNoo Yawk
York\tYork-shire
nginx\tengine x
"""


def test_whole_words_any_case_longest_first():
    lex = Lexicon.parse(LEXICON)
    assert (lex.apply("sql, SQL and Sql; not SQLite nor mySQL.") ==
            "sequel, sequel and sequel; not SQLite nor mySQL.")
    assert lex.apply("From new  york to York.") == "From Noo Yawk to York-shire."
    assert lex.apply("Ask dr. Who about NGINX.") == "Ask Doctor Who about engine x."
    assert lex.apply("[sql] <|speaker:0|>SQL") == "[sql] <|speaker:0|>sequel"  # tags untouched


def test_file_errors_name_the_line():
    with pytest.raises(LexiconError, match="line 2: expected 'word<TAB>respelling'"):
        Lexicon.parse("a\tb\nno tab here\n")
    with pytest.raises(LexiconError, match="line 3: 'sql' is respelled 'squeal' here but "
                                           "'sequel' on line 1"):
        Lexicon.parse("SQL\tsequel\n\nsql\tsqueal\n")
    with pytest.raises(LexiconError, match="empty respelling"):
        Lexicon.parse("word\t \n")
    assert Lexicon.parse("# only comments\n\n").entries == ()


def test_phoneme_markers_exist_in_the_vocabulary_but_are_never_read_from_text(ckpt_dir):
    """The investigation the issue asks for: the fixture's tokenizer lists the markers, but
    text is never encoded to special tokens, and no official prompt uses them, so a lexicon
    may not hold them (it says why)."""
    tok = FishTokenizer.from_dir(ckpt_dir)
    start = tok._tok.token_to_id("<|phoneme_start|>")
    end = tok._tok.token_to_id("<|phoneme_end|>")
    assert start is not None and end is not None
    ids = tok.encode_text("<|phoneme_start|>s i k w ə l<|phoneme_end|>")
    assert start not in ids and end not in ids
    with pytest.raises(LexiconError, match="phoneme markers"):
        Lexicon.parse("SQL\t<|phoneme_start|>sikwəl<|phoneme_end|>\n")


def test_a_voice_lexicon_goes_over_the_global_one_and_is_kept_in_its_file(tmp_path):
    codes = torch.zeros(2, 3, dtype=torch.long)
    alice = Voice("Alice", [Reference("hi", codes)], lexicon=Lexicon.parse("SQL\tess queue ell\n"))
    bob = Voice("Bob", [Reference("hi", codes)])
    finish = Finishing.of(lexicon=Lexicon.parse(LEXICON))
    batches = finish.batches("<|speaker:0|>SQL in New York.<|speaker:1|>SQL too.",
                             [alice, bob], 300)
    assert batches[0].text == "<|speaker:0|>ess queue ell in Noo Yawk.\n<|speaker:1|>sequel too."
    loaded = Voice.load(alice.save(tmp_path / "alice.safetensors"))
    assert loaded.lexicon == alice.lexicon


def test_plan_prints_what_the_model_reads(tmp_path, capsys):
    words = tmp_path / "words.tsv"
    words.write_text(LEXICON)
    script = tmp_path / "play.txt"
    script.write_text("Alice: Meet me in New York. [pause:1s]\nBob: At the SQL bar?\n")
    assert main(["plan", "--script", str(script), "--lexicon", str(words), "--turn-by-turn",
                 "--json"]) == 0
    batches = json.loads(capsys.readouterr().out)["batches"]
    assert [(b["text"], b["silence_before"]) for b in batches] == [
        ("<|speaker:0|>Meet me in Noo Yawk.", 0.0), ("<|speaker:1|>At the sequel bar?", 1.0)]
    assert main(["plan", "Hi [pause:2]"]) == 2
    assert "[pause:2] is not a duration" in capsys.readouterr().err
    assert main(["plan", "SQL rocks. [pause:250ms] Yes.", "--lexicon", str(words)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "batch 1: sequel rocks.", "        [silence 0.25 s]", "batch 2: Yes."]


def test_the_lexicon_reaches_the_model(tiny_synth):
    """Applied before tokenisation: the prompt holds the respelling's ids, not the word's
    (the spy sits on the runtime, where every job encodes its prompts)."""
    seen = []
    runtime = tiny_synth.runtime
    original = runtime.prompt

    def spy(text, *args, **kwargs):
        seen.append(text)
        return original(text, *args, **kwargs)

    runtime.prompt = spy
    try:
        tiny_synth.tts("I love SQL.", seed=1, lexicon=Lexicon.parse(LEXICON), max_new_tokens=4)
    finally:
        del runtime.prompt
    assert seen == ["I love sequel."]


# ---------------------------------------------------------------- cost (issue 36)
def regex_apply(lexicon: Lexicon, text: str) -> str:
    """The matcher lexicons had before issue 36 (one alternation of every entry, longest
    first): the semantics the linear matcher keeps, as an oracle for small lexicons."""
    import re

    table = {" ".join(w.split()).casefold(): r for w, r in lexicon.entries}
    words = sorted((w for w, _ in lexicon.entries), key=len, reverse=True)
    body = "|".join(r"\s+".join(map(re.escape, w.split(" "))) for w in words)
    pattern = re.compile(rf"(?<!\w)(?:{body})(?!\w)", re.IGNORECASE)
    protected = re.compile(r"\[[^\[\]\n]*\]|<\|[^|]*\|>")

    def respell(part: str) -> str:
        return pattern.sub(lambda m: table[" ".join(m.group(0).split()).casefold()], part)

    out, position = [], 0
    for m in protected.finditer(text):
        out += [respell(text[position:m.start()]), m.group(0)]
        position = m.end()
    return "".join(out + [respell(text[position:])])


def test_the_linear_matcher_respells_as_the_alternation_did():
    """Random lexicons and texts over a few letters, marks and spaces (words inside words,
    entries sharing prefixes, marks at both ends, tags): the same text as before."""
    import random

    rng = random.Random(36)
    pieces = ["a", "b", "ab", "A", "B", "x1", ".", "-", "+", "'", " ", "  ", "\n", "é", "_"]
    for _ in range(400):
        entries = {}
        for _ in range(rng.randint(1, 8)):
            word = " ".join("".join(rng.choice(pieces[:10]) for _ in range(rng.randint(1, 3)))
                            for _ in range(rng.randint(1, 3))).strip()
            word = " ".join(word.split())
            if word:
                entries.setdefault(word.casefold(), (word, f"R{len(entries)}"))
        lexicon = Lexicon.parse("".join(f"{w}\t{r}\n" for w, r in entries.values()))
        text = "".join(rng.choice(pieces + ["[ab]", "<|speaker:0|>"]) for _ in range(40))
        assert lexicon.apply(text) == regex_apply(lexicon, text), (lexicon.entries, text)


class CountingDict(dict):
    lookups = 0

    def get(self, key, default=None):
        CountingDict.lookups += 1
        return super().get(key, default)


def test_applying_costs_the_text_times_one_entry_not_the_lexicon():
    """20,000 entries sharing their first words (the alternation that stalled for seconds):
    each token of the text walks the entries' trie at most one entry deep, whatever the
    lexicon's size (counted, not timed)."""
    lexicon = Lexicon.parse("".join(f"go go go w{i}\tR{i}\n" for i in range(20000)))
    text = "go " * 2000 + "go go go w19999."
    edges, ends = lexicon._matcher
    counted = CountingDict(edges)
    object.__setattr__(lexicon, "_matcher_cache", (counted, ends))
    CountingDict.lookups = 0
    out = lexicon.apply(text)
    assert out.endswith("go R19999.")
    tokens = 2 * 2000 + 8
    assert CountingDict.lookups <= tokens * (7 + 1)  # an entry is 7 tokens ("go", " ", …)


def test_the_respelled_text_is_bounded():
    """A one-letter word respelled to 200 letters, 1000 times: refused, naming the lexicon
    and the limit (budgets.LEXICON_GROWTH), before the text is built."""
    from fish_core.budgets import LEXICON_GROWTH

    lexicon = Lexicon.parse("a\t" + "b" * 200 + "\n", "--lexicon words.tsv")
    assert lexicon.apply("[a] a.") == "[a] " + "b" * 200 + "."  # one respelling always fits
    with pytest.raises(LexiconError, match=rf"--lexicon words.tsv: .* the limit is "
                                           rf"{LEXICON_GROWTH} times the text's 1999 plus 200"):
        lexicon.apply(" ".join(["a"] * 1000))
    assert Lexicon.parse("Dr.\tDoctor\n").apply("Dr. " * 1000).count("Doctor") == 1000


def test_a_lexicon_checks_cancel_while_read_and_applied():
    from fish_core.params import Cancelled

    pressed = []
    big = "".join(f"w{i}\tr{i}\n" for i in range(10000))
    with pytest.raises(Cancelled, match="lexicon: cancelled"):
        Lexicon.parse(big, cancel=lambda: True)
    lexicon = Lexicon.parse("SQL\tsequel\n", cancel=lambda: bool(pressed))
    text = "I love SQL. " * 2000
    assert lexicon.apply(text).count("sequel") == 2000
    pressed.append(True)  # Cancel pressed
    with pytest.raises(Cancelled):
        lexicon.apply(text)
    with pytest.raises(Cancelled):  # kept by a merge (a voice's own lexicon over it)
        lexicon.merged(Lexicon.parse("nginx\tengine x\n")).apply(text)
    with pytest.raises(LexiconError, match=r"lexicon is 50 characters; the limit is 10"):
        Lexicon.parse("x" * 49 + "\n", max_chars=10)


def test_a_merge_is_made_once_per_voice_not_per_turn_or_cue():
    """Every turn, batch and subtitle cue asks for the voice's lexicon over the global one:
    the same merged lexicon each time, so its matcher is built once."""
    codes = torch.zeros(2, 3, dtype=torch.long)
    alice = Voice("Alice", [Reference("hi", codes)], lexicon=Lexicon.parse("SQL\tess queue\n"))
    finish = Finishing.of(lexicon=Lexicon.parse(LEXICON))
    merged = finish.lexicon_of(alice)
    assert finish.lexicon_of(alice) is merged
    assert merged.apply("SQL in New York") == "ess queue in Noo Yawk"
    other = Lexicon.parse("SQL\tsquirrel\n")
    assert finish.lexicon.merged(other).apply("SQL") == "squirrel"  # another voice's own
    assert finish.lexicon_of(alice) is merged


def test_any_case_is_unicode_case_folding_and_never_a_key_error():
    """Words match by case folding (what entries are keyed by): ``Straße`` is ``STRASSE``; the
    alternation matched by simple case mapping, so ``İstanbul`` matched ``istanbul`` and then
    found no entry for it (a KeyError, a traceback in the CLI and a 500 in serve)."""
    assert (Lexicon.parse("Straße\tShtrahsseh\n").apply("STRASSE, straße.") ==
            "Shtrahsseh, Shtrahsseh.")
    assert (Lexicon.parse("İstanbul\tIstanbul\n").apply("istanbul İSTANBUL") ==
            "istanbul Istanbul")


def test_the_cli_says_the_growth_limit_in_one_line(tmp_path, capsys):
    words = tmp_path / "words.tsv"
    words.write_text("a\t" + "b" * 200 + "\n")
    assert main(["plan", " ".join(["a"] * 300), "--lexicon", str(words)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --lexicon words.tsv: the respelled text would be over")
    assert "budgets.LEXICON_GROWTH" in err and "Traceback" not in err
