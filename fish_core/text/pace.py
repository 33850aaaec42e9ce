"""How long a text takes to say, for progress bars: a guess from its length, corrected by what
the model has generated so far.

Speech runs at about ``BYTES_PER_SECOND`` UTF-8 bytes of text per second in the languages S2
speaks most (English ~15 characters a second; Chinese and Japanese ~4-6 characters a second at 3
bytes each), so a text's frames are guessed as its bytes / ``BYTES_PER_SECOND`` x the codec's
frame rate (at least ``MIN_SECONDS``), never more than the frame limit. ``Pace`` keeps the
guess honest while a job runs: once batches are done, the later ones are scaled by how far the
finished ones were from their guess.
"""

from __future__ import annotations

import re

BYTES_PER_SECOND = 15.0
MIN_SECONDS = 0.5
SPEAKER_TAG = re.compile(r"<\|[^|<>]{0,40}\|>")  # <|speaker:0|>: not spoken


def expected_frames(text: str, frame_rate: float) -> int:
    """The frames ``text`` is expected to take at ``frame_rate`` frames per second."""
    spoken = len(SPEAKER_TAG.sub("", text).strip().encode("utf-8"))
    seconds = max(MIN_SECONDS, spoken / BYTES_PER_SECOND)
    return max(1, round(seconds * frame_rate))


class Pace:
    """Progress over a job's text batches: ``frame(i)`` while batch ``b`` has made ``i`` frames,
    ``end_batch()`` when it is done; both return ``(done, total)`` in frames, where ``total``
    is what the whole job is now expected to take (``done`` when it has ended)."""

    def __init__(self, texts: list[str], frame_rate: float, limit: int):
        self.limit = limit  # frames per batch, at most
        self.guess = [min(limit, expected_frames(t, frame_rate)) for t in texts]
        self.batch = 0  # the batch being generated
        self.spoken = 0  # frames of the finished batches
        self.current = 0  # frames of the batch being generated

    def frame(self, frames: int) -> tuple[int, int]:
        self.current = frames
        return self.progress()

    def end_batch(self) -> tuple[int, int]:
        self.spoken += self.current
        self.current = 0
        self.batch += 1
        return self.progress()

    def progress(self) -> tuple[int, int]:
        done = self.spoken + self.current
        guessed = sum(self.guess[:self.batch])
        scale = min(4.0, max(0.25, self.spoken / guessed)) if guessed else 1.0
        later = [min(self.limit, max(1, round(g * scale))) for g in self.guess[self.batch:]]
        if later:
            later[0] = max(self.current, later[0])  # the batch running now has made this many
        return done, self.spoken + sum(later)
