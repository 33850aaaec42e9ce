"""Reference-prefix KV reuse: the slow AR's keys and values of a prompt's voice prefix (the
system turn: instruction, reference transcripts and every codebook of the reference codes), kept
so that the next prompt starting with the same prefix prefills only the rest.

An entry is keyed on the exact prefix content, all ``1 + K`` rows of its ids (token ids *and*
every codebook of the reference codes; keying on the token row alone would let two voices with
the same transcript share KV), plus what makes KV of the same ids differ: the model's identity,
dtype, device and weight types (quantization). A hit is also compared in full with the stored
prefix, so a digest collision can never hand one voice another's KV. Entries live on the
model's device; the cache is bounded by a byte budget and evicts the least recently used.

Exactness: a prompt with a voice prefix is always prefilled in two steps, the prefix alone
(``[1, 1 + K, P]`` from slot 0, or its kept KV) and then the rest attending through a per-row
mask (``Engine.load_prefixes``), whether the prefix was reused, computed now, or the cache is
off. So reuse never changes a result, in any precision: the same seed gives the same codes and
samples on the first run and every repeat (``tests/test_prefix_cache.py``: fp32 and bf16, no
tolerance). Against a single causal run of the whole prompt (the path before this cache) the
codes are identical on the fp32 fixtures, greedy and seeded; in bf16 the two-step prefill
rounds differently (~2^-8 relative) and can flip a sampled code where two candidates lie within
that, as a different batch size or kernel would.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

import torch
from torch import Tensor

DEFAULT_PREFIX_CACHE_MB = 512


@dataclass
class PrefixEntry:
    ids: Tensor  # the prefix [1 + K, P] (CPU, int64), compared in full on a hit
    keys: list[Tensor]  # per slow layer [Hkv, P, Dh]
    values: list[Tensor]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


class PrefixCache:
    """LRU map: (model identity, prefix content) → the prefix's slow-AR KV. ``budget_bytes`` 0
    turns it off. ``hits``/``misses`` count lookups (for benches and tests)."""

    def __init__(self, budget_bytes: int):
        self.entries: OrderedDict[tuple, PrefixEntry] = OrderedDict()
        self.nbytes = 0
        self.hits = self.misses = 0
        self.resize(budget_bytes)

    def resize(self, budget_bytes: int) -> None:
        """A new budget; the least recently used entries go until the rest fits."""
        if (isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int)
                or budget_bytes < 0):
            raise ValueError(f"prefix_cache_mb must be a number >= 0 (0 turns the prefix "
                             f"cache off), got {budget_bytes!r}")
        self.budget = budget_bytes
        while self.entries and self.nbytes > self.budget:
            _, old = self.entries.popitem(last=False)
            self.nbytes -= old.nbytes

    @property
    def enabled(self) -> bool:
        return self.budget > 0

    @staticmethod
    def key(model_key: tuple, ids: Tensor) -> tuple:
        ids = ids.detach().to("cpu", torch.long).contiguous()
        digest = hashlib.sha256(ids.numpy().tobytes()).hexdigest()
        return (*model_key, tuple(ids.shape), digest)

    def get(self, key: tuple, ids: Tensor) -> PrefixEntry | None:
        entry = self.entries.get(key)
        if entry is None or not torch.equal(entry.ids, ids.detach().to("cpu", torch.long)):
            self.misses += 1
            return None
        self.entries.move_to_end(key)
        self.hits += 1
        return entry

    def put(self, key: tuple, entry: PrefixEntry) -> None:
        """Keep ``entry`` (most recent), evicting the least recently used to fit the budget; an
        entry larger than the whole budget is not kept."""
        if not self.enabled or entry.nbytes > self.budget or key in self.entries:
            return
        self.entries[key] = entry
        self.nbytes += entry.nbytes
        self.resize(self.budget)  # the least recently used make room

    def clear(self) -> None:
        self.entries.clear()
        self.nbytes = 0


def megabytes(value) -> int:
    """``prefix_cache_mb`` (a number >= 0, or None for the default) → bytes."""
    if value is None:
        value = DEFAULT_PREFIX_CACHE_MB
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"prefix_cache_mb must be a number >= 0 (0 turns the prefix cache "
                         f"off), got {value!r}")
    return int(value * 1024 * 1024)
