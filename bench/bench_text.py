"""Sentence cutting on adversarial text: the old pattern (a regex that backtracks through a run
of ``. ! ? …`` not followed by white space) against ``text.plan.SentenceCutter`` (one
left-to-right scan), time versus input length.

Two workloads:

* ``whole``: ``split_sentences`` of one text (what long-text planning does);
* ``stream``: the text sent as a WebSocket session does, a piece per message (``--piece``
  characters), the old way (the pattern re-run over the whole unfinished text on every message,
  as ``serve/speech_stream.py`` did) and the new one (the cutter reads only the new piece).

Each cell is the median of ``--repeats`` runs, old and new alternated; a cell stops growing once
a run takes longer than ``--cap`` seconds (the old pattern is quadratic).

    python bench/bench_text.py                       # the default table
    python bench/bench_text.py --sizes 1000,4000 --repeats 7 --json text.json
"""

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fish_core.text.plan import (PROMPT_CLOSERS, PROMPT_ENDS, SPACED_CLOSERS,  # noqa: E402
                                 SPACED_ENDS, SentenceCutter, split_sentences)

OLD = re.compile(rf".+?(?:[{re.escape(SPACED_ENDS)}]+[{re.escape(SPACED_CLOSERS)}]*(?=\s|$)|"
                 rf"[{re.escape(PROMPT_ENDS)}]+[{re.escape(PROMPT_CLOSERS)}]*|(?=\n\s*\n)|$)",
                 re.DOTALL)
TEXTS = {  # adversarial inputs of n characters
    "dots": lambda n: "a" + "." * n + "x",
    "marks": lambda n: "a" + "!?…" * (n // 3) + "x",
    "closers": lambda n: "a" + ".)" * (n // 2) + "x",
    "prose": lambda n: ("It weighs 3.5 kg, e.g. a cat. " * (n // 30 + 1))[:n],
}


def old_whole(text: str) -> list[str]:
    return [m.group().strip() for m in OLD.finditer(text) if m.group().strip()]


def old_stream(text: str, piece: int) -> list[str]:
    """What the stream route did: the pattern over pending + piece on every message."""
    pending, done = "", []
    for at in range(0, len(text), piece):
        buffer, end = pending + text[at:at + piece], 0
        for match in OLD.finditer(buffer):
            if match.end() >= len(buffer):
                break
            if match.group().strip():
                done.append(match.group().strip())
            end = match.end()
        pending = buffer[end:]
    return done + old_whole(pending + "\n\n")


def new_stream(text: str, piece: int) -> list[str]:
    cutter = SentenceCutter()
    done = []
    for at in range(0, len(text), piece):
        done += cutter.feed(text[at:at + piece])
    return done + cutter.finish()


def timed(function, *args) -> float:
    start = time.perf_counter()
    function(*args)
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000,2000,4000,8000,16000,64000")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--piece", type=int, default=8, help="characters per stream message")
    p.add_argument("--cap", type=float, default=5.0, help="stop growing a cell past this (s)")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows, skip = [], set()
    for workload in ("whole", "stream"):
        for name, make in TEXTS.items():
            for n in sizes:
                text = make(n)
                runs = {"old": [], "new": []}
                if workload == "whole":
                    jobs = {"old": (old_whole, text), "new": (split_sentences, text)}
                else:
                    jobs = {"old": (old_stream, text, args.piece),
                            "new": (new_stream, text, args.piece)}
                assert jobs["old"][0](*jobs["old"][1:]) == jobs["new"][0](*jobs["new"][1:])
                for _ in range(args.repeats):
                    for which in ("old", "new"):  # alternated: the machine's load hits both
                        if (workload, name, which) not in skip:
                            runs[which].append(timed(*jobs[which]))
                row = {"workload": workload, "text": name, "chars": len(text)}
                for which, times in runs.items():
                    row[which] = statistics.median(times) if times else None
                    if times and row[which] > args.cap:
                        skip.add((workload, name, which))
                rows.append(row)
                old, new = row["old"], row["new"]
                ratio = f"{old / new:9.1f}x" if old and new else "         -"
                print(f"{workload:6s} {name:8s} {len(text):7d} chars  old "
                      + (f"{old * 1e3:10.2f} ms" if old else "  (skipped)  ")
                      + f"  new {new * 1e3:8.2f} ms  {ratio}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
