"""``AlignerTimer``: the local backend's word timer (``speech.words.Timer``) over the native
forced aligner (``hearing.ForcedAligner``), loaded on first use beside the TTS model and freed
with it.

Clips are resampled to the aligner's 16 kHz and aligned a few at a time (one forward pass per
group, no decoding); a clip longer than the aligner can time (5000 classes of 80 ms: 400 s) is
refused naming the limit (text batches are far shorter).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

GROUP_SECONDS = 120.0  # audio aligned in one forward pass at most (several clips together)


class AlignerTimer:
    def __init__(self, aligner=None, models_dir: str | Path | None = None,
                 device: str | torch.device = "cpu", dtype=None, download: bool = True,
                 before_load=None):
        """``aligner``: a loaded ``hearing.ForcedAligner``, its folder, or None for the
        official checkpoint (in ``models_dir``, downloaded on first use when ``download``).
        ``before_load(folder, device)``: called before the weights load (ComfyUI makes room
        for them)."""
        self.source, self.models_dir, self.before_load = aligner, models_dir, before_load
        self.device, self.dtype, self.download = device, dtype, download
        self.loaded = None if aligner is None or isinstance(aligner, (str, Path)) else aligner
        self.lock = threading.Lock()

    def ready(self) -> "AlignerTimer":
        """Its checkpoint folder found (or downloaded, where allowed) before a request's work:
        a missing aligner is said then, not after the speech is made."""
        with self.lock:
            if self.loaded is None and not isinstance(self.source, Path):
                from ..hearing.hub import resolve_aligner

                self.source = resolve_aligner(self.source, self.models_dir, self.download)
        return self

    def aligner(self):
        """The ``ForcedAligner``, loaded on first use."""
        self.ready()
        with self.lock:
            if self.loaded is None:
                from ..hearing.aligner import ForcedAligner

                if self.before_load is not None:
                    self.before_load(self.source, self.device)
                self.loaded = ForcedAligner.from_pretrained(self.source, self.device, self.dtype)
            return self.loaded

    def free(self) -> None:
        """Drop the loaded aligner (the next request loads it again)."""
        with self.lock:
            if self.source is not None and not isinstance(self.source, (str, Path)):
                return  # handed in loaded: its owner frees it
            self.loaded = None

    @property
    def is_loaded(self) -> bool:
        return self.loaded is not None

    def split(self, text: str, language: str) -> list[str]:
        from ..hearing.words import split_words

        return split_words(text, language, self.korean_dict())

    def korean_dict(self):
        """The Korean word list: the loaded aligner's, else its folder's (if it has one)."""
        from ..hearing.words import KOREAN_DICT

        if self.loaded is not None:
            return self.loaded.korean_dict
        if isinstance(self.source, Path) and (self.source / KOREAN_DICT).is_file():
            return self.source / KOREAN_DICT
        return None

    def time(self, waves: Sequence[torch.Tensor], sample_rate: int,
             word_lists: Sequence[list[str]]) -> list[list[tuple[float, float]]]:
        aligner = self.aligner()
        rate = aligner.sample_rate
        longest = aligner.model.config.head_size * aligner.segment_seconds
        clips = [resampled(w, sample_rate, rate) for w in waves]
        for clip in clips:
            if clip.numel() / rate > longest:
                raise ValueError(f"words: a text batch of {clip.numel() / rate:.0f} s is longer "
                                 f"than the aligner can time ({longest:g} s)")
        out: list[list[tuple[float, float]]] = []
        group: list[int] = []
        for i in range(len(clips) + 1):
            if group and (i == len(clips) or sum(clips[k].numel() for k in group + [i])
                          > GROUP_SECONDS * rate):
                aligned = aligner.align_words([clips[k] for k in group],
                                              [list(word_lists[k]) for k in group])
                out += [[(w.start, w.end) for w in a.words] for a in aligned]
                group = []
            if i < len(clips):
                group.append(i)
        return out


def resampled(wave: torch.Tensor, rate: int, target: int) -> torch.Tensor:
    """A mono float32 clip at ``target`` Hz (no checks: a generated clip may be silent)."""
    x = wave.detach().reshape(-1).float().cpu()
    if rate == target or x.numel() == 0:
        return x
    from ..audio.files import import_soxr

    return torch.from_numpy(np.ascontiguousarray(
        import_soxr().resample(x.numpy(), rate, target, quality="HQ"), dtype=np.float32))
