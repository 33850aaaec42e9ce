"""Whisper-style log-mel features: what the audio encoder hears.

A 16 kHz mono waveform → ``[n_mels, frames]`` log-mel frames, one every ``hop_length`` samples
(``frames = samples // hop_length``): a centred, reflect-padded Hann STFT of ``n_fft`` points,
power spectrum, Slaney-scale mel filters (Slaney area normalisation, 0 Hz … Nyquist), log10 floored
at 1e-10, clipped to 8 decades below the clip's loudest bin, then ``(x + 4) / 4``.

A batch is zero-padded to its longest clip first (the padding is part of the signal the STFT
sees, as in the reference), and each clip's valid frames are ``ceil(samples / hop_length)``,
one fewer where the padded length is not a multiple of the hop — so a clip in a batch may keep
one frame more than the same clip alone (``golden/batch/aligner.json`` records it).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch
from torch import Tensor


@dataclass(frozen=True)
class FeatureConfig:
    """``preprocessor_config.json`` (a ``WhisperFeatureExtractor``), the fields we use."""

    n_mels: int = 128
    sample_rate: int = 16000
    hop_length: int = 160
    n_fft: int = 400

    @classmethod
    def from_dir(cls, folder: str | Path) -> FeatureConfig:
        raw = json.loads((Path(folder) / "preprocessor_config.json").read_text(encoding="utf-8"))
        kind = raw.get("feature_extractor_type", "WhisperFeatureExtractor")
        if kind != "WhisperFeatureExtractor":
            raise ValueError(f"preprocessor_config.json: feature_extractor_type {kind!r} is not "
                             "WhisperFeatureExtractor")
        config = cls(n_mels=int(raw["feature_size"]), sample_rate=int(raw["sampling_rate"])
                     if "sampling_rate" in raw else 16000, hop_length=int(raw["hop_length"]),
                     n_fft=int(raw["n_fft"]))
        for name in ("n_mels", "sample_rate", "hop_length", "n_fft"):
            if getattr(config, name) <= 0:
                raise ValueError(f"preprocessor_config.json: {name} must be positive")
        return config


def _hz_to_mel(hz: Tensor) -> Tensor:
    """Slaney's mel scale: linear below 1 kHz (3 mels per 200 Hz), logarithmic above."""
    linear = hz * 3.0 / 200.0
    log_part = 15.0 + torch.log(hz.clamp(min=1e-30) / 1000.0) / (math.log(6.4) / 27.0)
    return torch.where(hz >= 1000.0, log_part, linear)


def _mel_to_hz(mel: Tensor) -> Tensor:
    linear = mel * 200.0 / 3.0
    log_part = 1000.0 * torch.exp((math.log(6.4) / 27.0) * (mel - 15.0))
    return torch.where(mel >= 15.0, log_part, linear)


@lru_cache(maxsize=8)
def mel_filters(n_mels: int, n_fft: int, sample_rate: int) -> Tensor:
    """``[n_freqs, n_mels]`` triangular filters, built in float64 and rounded to float32."""
    n_freqs = n_fft // 2 + 1
    fft_freqs = torch.linspace(0, sample_rate // 2, n_freqs, dtype=torch.float64)
    top = _hz_to_mel(torch.tensor(float(sample_rate // 2), dtype=torch.float64))
    edges = _mel_to_hz(torch.linspace(0.0, float(top), n_mels + 2, dtype=torch.float64))
    widths = edges[1:] - edges[:-1]  # [n_mels + 1]
    slopes = edges[None, :] - fft_freqs[:, None]  # [n_freqs, n_mels + 2]
    rising = -slopes[:, :-2] / widths[:-1]
    falling = slopes[:, 2:] / widths[1:]
    weights = torch.clamp(torch.minimum(rising, falling), min=0.0)
    weights = weights * (2.0 / (edges[2:] - edges[:-2]))[None, :]  # Slaney area normalisation
    return weights.float()


def frame_count(samples: int, hop_length: int) -> int:
    """Feature frames of a clip of ``samples`` alone (the STFT's last frame is dropped)."""
    return samples // hop_length


def log_mel(waveform: Tensor, config: FeatureConfig = FeatureConfig()) -> Tensor:
    """``[n_mels, samples // hop]`` (or ``[B, n_mels, …]`` for ``[B, samples]``) float32
    features."""
    wave = waveform.to(torch.float32)
    window = torch.hann_window(config.n_fft, device=wave.device)
    spectrum = torch.stft(wave, config.n_fft, config.hop_length, window=window,
                          return_complex=True)
    power = spectrum[..., :-1].abs() ** 2  # [.., n_freqs, frames]
    filters = mel_filters(config.n_mels, config.n_fft, config.sample_rate).to(wave.device)
    mel = filters.T @ power
    logs = torch.clamp(mel, min=1e-10).log10()
    if logs.dim() == 3:
        peak = logs.amax(dim=(1, 2), keepdim=True)
    else:
        peak = logs.max()
    logs = torch.maximum(logs, peak - 8.0)
    return (logs + 4.0) / 4.0


def batch_features(waveforms: list[Tensor], config: FeatureConfig = FeatureConfig()
                   ) -> tuple[Tensor, Tensor]:
    """Features of several 1-D clips zero-padded to the longest: ``features [B, n_mels, T]``
    float32 and ``mask [B, T]`` int32 (1 on each clip's frames)."""
    if not waveforms:
        raise ValueError("audio: no clips given")
    lengths = [int(w.shape[-1]) for w in waveforms]
    if min(lengths) <= 0:
        raise ValueError("audio: a clip is empty")
    longest = max(lengths)
    padded = torch.zeros(len(waveforms), longest, dtype=torch.float32,
                         device=waveforms[0].device)
    for row, wave in enumerate(waveforms):
        padded[row, :wave.shape[-1]] = wave.reshape(-1).to(torch.float32)
    features = log_mel(padded, config)
    frames = features.shape[-1]
    mask = torch.zeros(len(waveforms), frames, dtype=torch.int32, device=padded.device)
    for row, n in enumerate(lengths):
        mask[row, :min(frames, math.ceil(n / config.hop_length))] = 1
    return features, mask
