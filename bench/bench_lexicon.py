"""Applying a pronunciation lexicon: the old matcher (one regex alternation of every entry,
longest first, as ``text/lexicon.py`` had before issue 36) against the linear one (a pass over
the text's tokens with a trie walk per token), time versus lexicon size.

Workloads (4 kB of text each):

* ``words``: distinct entries ``word<i>``, the text words drawn from them and from unknown ones;
* ``prefix``: entries sharing their first words (``go go go w<i>``) on a text of ``go go go …``:
  the alternation tries every entry at every word (what the issue measured at 12-26 s).

Each cell is the median of ``--repeats`` runs (the first apply, which builds the matcher, and
parse excluded: both are linear); a cell stops growing once the old matcher takes longer than
``--cap`` seconds.

    python bench/bench_lexicon.py
    python bench/bench_lexicon.py --sizes 1000,20000 --repeats 3 --json /tmp/lexicon.json
"""

import argparse
import json
import random
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fish_core.text.lexicon import Lexicon  # noqa: E402 - after the path set-up

PROTECTED = re.compile(r"\[[^\[\]\n]*\]|<\|[^|]*\|>")


def old_matcher(lexicon: Lexicon):
    """The alternation of every entry (the old ``Lexicon._pattern``) and its ``apply``."""
    table = {" ".join(w.split()).casefold(): r for w, r in lexicon.entries}
    words = sorted((w for w, _ in lexicon.entries), key=len, reverse=True)
    body = "|".join(r"\s+".join(map(re.escape, w.split(" "))) for w in words)
    pattern = re.compile(rf"(?<!\w)(?:{body})(?!\w)", re.IGNORECASE)

    def respell(part: str) -> str:
        return pattern.sub(lambda m: table[" ".join(m.group(0).split()).casefold()], part)

    def apply(text: str) -> str:
        out, position = [], 0
        for m in PROTECTED.finditer(text):
            out += [respell(text[position:m.start()]), m.group(0)]
            position = m.end()
        return "".join(out + [respell(text[position:])])

    return apply


def workload(kind: str, n: int) -> tuple[str, str]:
    rng = random.Random(n)
    if kind == "words":
        lexicon = "".join(f"word{i}\tr{i}\n" for i in range(n))
        text = " ".join(f"word{rng.randrange(2 * n)}" for _ in range(800))[:4096]
    else:
        lexicon = "".join(f"go go go w{i}\tR{i}\n" for i in range(n))
        text = ("go " * 1400)[:4096]
    return lexicon, text


def timed(function, text: str, repeats: int) -> float:
    function(text)  # builds what it caches
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        function(text)
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000,5000,20000", help="entries, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cap", type=float, default=30.0, help="stop the old matcher above this")
    parser.add_argument("--json", default=None, help="also write the table here")
    args = parser.parse_args()
    rows = []
    for kind in ("words", "prefix"):
        old_stopped = False
        for n in (int(s) for s in args.sizes.split(",")):
            text_lexicon, text = workload(kind, n)
            lexicon = Lexicon.parse(text_lexicon)
            new = timed(lexicon.apply, text, args.repeats)
            old = None
            if not old_stopped:
                apply = old_matcher(lexicon)
                assert apply(text) == lexicon.apply(text)
                old = timed(apply, text, args.repeats)
                old_stopped = old > args.cap
            rows.append({"kind": kind, "entries": n, "lexicon_bytes": len(text_lexicon.encode()),
                         "text_chars": len(text), "old_s": old, "new_s": new})
            shown = "-" if old is None else f"{old:.3f}"
            print(f"{kind:7s} {n:6d} entries ({rows[-1]['lexicon_bytes'] / 1024:6.0f} KiB): "
                  f"old {shown:>8s} s   new {new:.4f} s", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
