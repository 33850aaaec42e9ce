"""Speaking rate: pitch-preserving time-stretch of decoded speech by Rubber Band (pedalboard's
``time_stretch``; R3 "finer" engine, formants preserved).

``stretch(wave, sample_rate, speed)`` returns exactly ``round(len(wave) / speed)`` samples:
speed 2 halves the length at the same pitch, 0.5 doubles it. Speeds from ``MIN_SPEED`` to
``MAX_SPEED``; 1 returns the input untouched. pedalboard is an optional dependency (a 5 MB
wheel bundling Rubber Band, GPLv3): imported only when a speed other than 1 is asked for, and
a missing one is a ``SpeedError`` naming the pip command.
"""

from __future__ import annotations

import numpy as np
import torch

from ..params import FieldError, Rule

MIN_SPEED, MAX_SPEED = 0.5, 2.0
# What works wherever the user is: the package's own name, on PyPI (the `finishing` extra of
# pyproject.toml exists only where Sailfish TTS was pip-installed, never in ComfyUI's Python).
INSTALL = "pip install pedalboard (in the Python that runs Sailfish TTS; in ComfyUI, ComfyUI's)"


SPEED = Rule(MIN_SPEED, MAX_SPEED)  # the one rule of a speaking rate (every door, the docs)


class SpeedError(FieldError):
    """A speed out of its rule, or pedalboard missing (a ``RequestError`` naming ``speed``)."""

    FIELD = "speed"


def check_speed(value, field: str = "speed") -> float:
    if value is None:
        return 1.0
    if not SPEED.holds(value):
        raise SpeedError(f"{field} must be a number from {MIN_SPEED:g} (half as fast) to "
                         f"{MAX_SPEED:g} (twice as fast), got {value!r}", field, value, SPEED)
    return float(value)


def import_pedalboard(field: str = "speed"):
    try:
        import pedalboard
    except ImportError:
        raise SpeedError(f"{field}: a speaking rate other than 1 needs pedalboard (Rubber "
                         f"Band): {INSTALL}", field) from None
    return pedalboard


def stretch(wave: torch.Tensor, sample_rate: int, speed: float) -> torch.Tensor:
    """``wave`` (float32 ``[n]``) played ``speed`` times as fast at the same pitch: exactly
    ``round(n / speed)`` samples."""
    speed = check_speed(speed)
    if speed == 1.0 or wave.shape[0] == 0:
        return wave
    pedalboard = import_pedalboard()
    data = wave.detach().to("cpu", torch.float32).numpy()[None]  # [1, n]
    out = pedalboard.time_stretch(data, float(sample_rate), stretch_factor=speed,
                                  high_quality=True, preserve_formants=True)[0]
    length = round(wave.shape[0] / speed)
    if out.shape[0] < length:  # Rubber Band's own length is within a few samples of it
        out = np.concatenate([out, np.zeros(length - out.shape[0], dtype=out.dtype)])
    return torch.from_numpy(np.ascontiguousarray(out[:length], dtype=np.float32))
