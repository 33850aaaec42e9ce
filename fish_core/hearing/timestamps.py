"""From the aligner's raw times to monotonic word times (the reference's ``fix_timestamp``).

The raw times (argmax class × 80 ms, two per word: start, end) need not grow. The longest
non-decreasing run of them is kept as it is; every time outside it is repaired from its kept
neighbours: a gap of one or two takes the nearer kept neighbour (the left one on a tie, the only
one at an edge), a longer gap is filled by a straight line between the kept neighbours (or a
flat one at an edge). Times end as whole milliseconds, truncated.

Ties matter for exactness: among chains of equal length the kept one ends at the earliest
index, and each link is the earliest predecessor that makes it longest.
"""

from __future__ import annotations

from collections.abc import Sequence


def longest_rising(times: Sequence[float]) -> list[bool]:
    """Which entries form the kept non-decreasing chain (quadratic; a text has few words)."""
    n = len(times)
    if n == 0:
        return []
    length = [1] * n
    before = [-1] * n
    for i in range(n):
        for j in range(i):
            if times[j] <= times[i] and length[j] + 1 > length[i]:
                length[i], before[i] = length[j] + 1, j
    kept = [False] * n
    i = length.index(max(length))
    while i != -1:
        kept[i] = True
        i = before[i]
    return kept


def fix_timestamps(times: Sequence[float]) -> list[int]:
    """Monotonic whole-millisecond times for ``times`` (ms), same length."""
    values = [float(t) for t in times]
    kept = longest_rising(values)
    n = len(values)
    out = list(values)
    i = 0
    while i < n:
        if kept[i]:
            i += 1
            continue
        end = i
        while end < n and not kept[end]:
            end += 1
        out[i:end] = _filled(values[i - 1] if i > 0 else None,  # i - 1 is kept: gaps are maximal
                             values[end] if end < n else None, end - i)
        i = end
    return [int(v) for v in out]


def _filled(left: float | None, right: float | None, gap: int) -> list[float]:
    """The ``gap`` times between the kept ``left`` and ``right`` (None past either end): the
    nearer of the two for a gap of one or two, else evenly spaced between them."""
    out = []
    for k in range(1, gap + 1):  # k: the distance from ``left``
        if left is None or right is None:
            out.append(right if left is None else left)
        elif gap <= 2:
            out.append(left if k <= gap + 1 - k else right)
        else:
            out.append(left + (right - left) / (gap + 1) * k)
    return out
