"""``Bar``: a command's progress (tqdm on stderr; Ctrl-C is Cancel)."""

from __future__ import annotations

import sys


CODEC_FRAME_RATE = 44100 / 2048  # S2's codec, for a progress estimate without one loaded


class Bar:
    """A progress bar in percent of the work: generated frames (a frame is ~46 ms of audio)
    against the frames the text is expected to take, a guess corrected as batches end
    (``text/pace.py``), or a book's characters. It shows no count, so a corrected guess moves
    the percentage, never a total. Shown after half a second (a short run prints only its
    result), redrawn at most every half second, gone when done; only on a terminal (a log or a
    pipe gets no bar)."""

    STEPS = 1000
    FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {elapsed}<{remaining}"

    def __init__(self, desc: str = "speaking", file=None):
        from tqdm import tqdm

        file = sys.stderr if file is None else file
        self.bar = tqdm(desc=desc, total=self.STEPS, dynamic_ncols=True, leave=False, delay=0.5,
                        mininterval=0.5, bar_format=self.FORMAT, file=file,
                        disable=not getattr(file, "isatty", lambda: False)())

    def __call__(self, done: int, total: int) -> None:
        step = self.STEPS * min(done, total) // total if total > 0 else 0
        if step > self.bar.n:
            self.bar.update(step - self.bar.n)  # rate-limited by mininterval

    def close(self):
        self.bar.close()
