"""What every generating node shares (``nodes/runner.py``): the progress bar per frame and
Cancel within a frame."""

from __future__ import annotations

import pytest
import torch

from node_env import (  # noqa: F401 - fixtures are found by name
    FAST, _clean_progress, check_audio, env, manager, model, run_v1)


# ---------------------------------------------------------------- progress and Cancel
def test_progress_bar_moves_per_frame(env, model):
    updates = []
    env.stubs.utils.PROGRESS_BAR_HOOK = lambda value, total, preview, node_id=None: \
        updates.append((value, total))
    run_v1(env, "SailfishTTS", model=model, text="Count my frames.", **FAST)
    values = [v for v, _ in updates]
    done, total = updates[-1]  # full at the end: the frames generated (EOS may come early)
    assert values == sorted(values) and done == total and 0 < done <= FAST["max_new_tokens"]
    assert values[:3] == [1, 2, 3]  # one update per generated frame


@pytest.mark.parametrize("via", ["progress hook", "cancel callback"])
def test_cancel_stops_within_a_frame_and_the_model_stays(env, model, via):
    mm = env.stubs.mm
    seen = []

    def hook(value, total, preview, node_id=None):
        seen.append(value)
        if value == 3:
            mm.interrupt_current_processing(True)  # the user presses Cancel
            if via == "progress hook":
                mm.throw_exception_if_processing_interrupted()  # what ComfyUI's hook does

    env.stubs.utils.PROGRESS_BAR_HOOK = hook
    before = env.manager.get(model)
    long_text = " ".join(f"Sentence number {i} goes here." for i in range(40))
    with pytest.raises(mm.InterruptProcessingException):
        run_v1(env, "SailfishTTS", model=model, text=long_text,
               **{**FAST, "max_new_tokens": 64})
    assert seen[-1] == 3 and not mm.processing_interrupted()  # stopped at once, flag reset
    env.stubs.utils.PROGRESS_BAR_HOOK = None
    check_audio(run_v1(env, "SailfishTTS", model=model, text="Still here.", **FAST)[0])
    assert env.manager.get(model) is before  # not reloaded


def test_audio_is_unpacked_here_naming_the_input(env):
    runtime = env.pack.nodes.runner
    wave = torch.zeros(1, 1, 8)
    assert runtime.from_audio({"waveform": wave, "sample_rate": 24000}, "audio") == \
        {"audio": wave, "sample_rate": 24000}
    for bad in ({"waveform": wave}, wave, None):
        with pytest.raises(ValueError, match="reference_audio: expected ComfyUI AUDIO"):
            runtime.from_audio(bad, "reference_audio")
