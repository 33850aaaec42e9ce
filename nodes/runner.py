"""What every generating node shares: the model from the manager, a progress bar per frame,
Cancel, and fish_core results as ComfyUI AUDIO."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Callable, Sequence

import torch

from ..fish_core.params import Cancelled
from . import host
from .manager import MANAGER, ModelHandle


def generate(model: ModelHandle, run: Callable):
    """``run(synth, on_progress=…, cancel=…)`` on the loaded model. ComfyUI's progress bar moves
    per generated frame; Cancel stops within a frame and is reported as an interruption (the
    model stays loaded for the next prompt)."""
    mm = host.module("comfy.model_management")  # once per run, not per frame
    with MANAGER.use(model) as synth:
        try:
            return run(synth, on_progress=progress_bar(), cancel=interrupted(mm))
        except Cancelled:
            if mm is not None:
                mm.throw_exception_if_processing_interrupted()  # ComfyUI's "interrupted"
            raise


def progress_bar() -> Callable[[int, int], None] | None:
    utils = host.module("comfy.utils")
    if utils is None:
        return None
    bar = utils.ProgressBar(1)  # made here: it takes ComfyUI's hook at construction

    def on_progress(done: int, total: int) -> None:
        bar.update_absolute(done, total)  # the hook also raises if Cancel was pressed

    return on_progress


def interrupted(mm) -> Callable[[], bool] | None:
    """The per-frame Cancel check: ComfyUI's interrupt flag (None outside ComfyUI)."""
    return None if mm is None else mm.processing_interrupted


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


def require_text(field: str, value: str, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{field} is empty: {what}")
    return value


def finishing(loudness=0.0, speed=1.0, lexicon="", per="mix") -> dict:
    """The finishing keywords from node inputs (``speech.finishing``): ``loudness`` 0 is off;
    ``lexicon`` is the text of a lexicon (word<TAB>respelling lines), typed into the node."""
    from ..fish_core.audio.loudness import Loudness, check_target
    from ..fish_core.text.lexicon import Lexicon

    found: dict = {"speed": speed if speed is not None else 1.0}
    if loudness:
        found["loudness"] = Loudness(check_target(loudness), per=per)
    if isinstance(lexicon, str) and lexicon.strip():
        found["lexicon"] = Lexicon.parse(lexicon, "lexicon")
    return found


def sampling(seed, temperature, top_p, top_k, max_new_tokens) -> dict:
    return dict(seed=seed, temperature=temperature, top_p=top_p, top_k=top_k,
                max_new_tokens=max_new_tokens)
