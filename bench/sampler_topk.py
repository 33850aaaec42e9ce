"""Why the samplers keep their full sort: a ``topk`` sampler does not draw what the reference
draws (issue 46, item 1).

    python bench/sampler_topk.py                    # S2's codebook width, top_k 30, top_p 0.8
    python bench/sampler_topk.py --rows 2000 --json topk.json

The reference (``fish_core.engine.sampling.sample``, bit-exact with fish-speech) sorts every
row, takes top-p on the cumulative softmax of the sorted logits and top-k by rank, then races
``p / -log(u)``. The candidate replaces the sort by ``topk(k)``: the cumulative probabilities
come from the row's softmax read at the top-k indices (the sum of the whole row in another
order), ties at the cut are ordered by ``topk`` instead of ``sort``, and the kept logits are
scattered back to the full row so the final softmax and race are the reference's own. With the
same logits and the same uniform numbers (drawn in the dtype, as the reference draws them), this
counts the rows whose kept tokens differ and those whose drawn index differs, per dtype and
logit scale. In the model's dtype (bf16, as the reference samples) cumulative sums
and ties land on the cut often enough that draws differ; fp32 hides it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fish_core.engine.sampling import (  # noqa: E402
    exponential_race, logits_to_probs, sample)


def topk_probs(logits, temperature, top_p, k: int):
    values, index = torch.topk(logits, k, dim=-1)
    cum = torch.cumsum(torch.softmax(logits, dim=-1).gather(-1, index), dim=-1)
    remove = (cum > top_p) & (torch.arange(k, device=logits.device) != 0)
    kept = values.masked_fill(remove, float("-inf")) / torch.clamp(temperature, min=1e-5)
    full = torch.full_like(logits, float("-inf")).scatter(-1, index, kept)
    return torch.softmax(full, dim=-1)


def differing(dtype, scale: float, args, generator) -> tuple[int, int]:
    """Rows whose kept tokens differ, and rows whose drawn token differs."""
    logits = (torch.randn(args.rows, args.width, generator=generator) * scale).to(dtype)
    rand = torch.rand(args.rows, args.width, generator=generator, dtype=dtype)
    temperature = torch.tensor([[args.temperature]], dtype=dtype)
    top_p = torch.tensor([[args.top_p]], dtype=dtype)
    ours = logits_to_probs(logits, temperature, top_p, args.top_k)
    theirs = topk_probs(logits, temperature, top_p, args.top_k)
    kept = int(((ours > 0) != (theirs > 0)).any(-1).sum())
    drawn = sample(logits, temperature, top_p, args.top_k, rand)
    return kept, int((drawn != exponential_race(theirs, rand)).sum())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--width", type=int, default=4096, help="row width (S2's codebook: 4096)")
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--top-k", type=int, default=30)
    ap.add_argument("--top-p", type=float, default=0.8)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--scales", default="2,4,8", help="logit standard deviations")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    generator = torch.Generator().manual_seed(0)
    rows = []
    print("| dtype | logit scale | rows keeping other tokens | draws that differ |")
    print("|---|---|---|---|")
    for dtype in (torch.bfloat16, torch.float32):
        for scale in map(float, args.scales.split(",")):
            kept, drawn = differing(dtype, scale, args, generator)
            rows.append({"dtype": str(dtype).removeprefix("torch."), "scale": scale,
                         "kept_differs": kept, "draw_differs": drawn, "rows": args.rows})
            print(f"| {rows[-1]['dtype']} | {scale} | {kept} of {args.rows} | "
                  f"{drawn} of {args.rows} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))
    return rows


if __name__ == "__main__":
    main()
