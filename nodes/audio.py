"""ComfyUI AUDIO packed and unpacked (only here): fish_core results as AUDIO outputs, AUDIO
inputs as the keywords fish_core takes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Sequence

import torch


def to_audio(speeches: Sequence) -> dict:
    """fish_core ``Speech`` results (one per take) as ComfyUI AUDIO: float32 ``[takes, 1, T]``
    on the CPU, each take padded with silence to the longest (the timeline keeps the exact
    lengths)."""
    return waves_to_audio([s.waveform for s in speeches], speeches[0].sample_rate)


def tracks_to_audio(speeches: Sequence, count: int) -> list[dict]:
    """Each speaker's track (``Speech.tracks``) as AUDIO ``[takes, 1, T]``, speakers 1 … count;
    every track has its take's length, so it lines up with the mix sample for sample."""
    tracks = [s.tracks(count) for s in speeches]  # per take: [speakers, T]
    return [waves_to_audio([t[i] for t in tracks], speeches[0].sample_rate)
            for i in range(count)]


def from_audio(audio, field: str) -> dict:
    """A ComfyUI AUDIO input (``{"waveform": [B, C, T], "sample_rate": sr}``) as the keywords
    fish_core takes: ``audio`` (a tensor; item 0 of the batch is used) and ``sample_rate``."""
    if not isinstance(audio, Mapping) or "waveform" not in audio or "sample_rate" not in audio:
        got = sorted(audio) if isinstance(audio, Mapping) else type(audio).__name__
        raise ValueError(f"{field}: expected ComfyUI AUDIO (a 'waveform' and a 'sample_rate'), "
                         f"got {got}")
    return {"audio": audio["waveform"], "sample_rate": audio["sample_rate"]}


def waves_to_audio(waves: Sequence[torch.Tensor], sample_rate: int) -> dict:
    length = max(w.shape[-1] for w in waves)
    batch = torch.zeros(len(waves), 1, length, dtype=torch.float32)
    for i, wave in enumerate(waves):
        batch[i, 0, :wave.shape[-1]] = wave.detach().to("cpu", torch.float32)
    return {"waveform": batch, "sample_rate": int(sample_rate)}
