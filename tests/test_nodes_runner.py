"""The node runner (``nodes/runner.py``): every generating node's progress bar per frame and
Cancel within a frame, and which models get live playback's ``on_chunk``."""

from __future__ import annotations

import pytest

from node_env import FAST, check_audio, run_v1


# ---------------------------------------------------------------- progress and Cancel
def test_progress_bar_moves_per_frame(env, model):
    updates = []
    env.stubs.utils.PROGRESS_BAR_HOOK = (lambda value, total, preview, node_id=None:
                                         updates.append((value, total)))
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


@pytest.mark.parametrize("node", ["SailfishVoiceClone", "SailfishMultiSpeaker",
                                  "SailfishSubtitles"])
def test_every_generating_node_moves_the_progress_bar(env, model, voice, reference, node):
    """The other generating nodes get the runner's progress too (TTS above)."""
    updates = []
    env.stubs.utils.PROGRESS_BAR_HOOK = (lambda value, total, preview, node_id=None:
                                         updates.append((value, total)))
    inputs = {"SailfishVoiceClone": dict(reference_audio=reference, reference_text="A test.",
                                         text="Count my frames."),
              "SailfishMultiSpeaker": dict(script="Alice: Count my frames.", pause=0.0,
                                           speaker_1=voice),
              "SailfishSubtitles": dict(srt="1\n00:00:00,000 --> 00:00:01,000\nCount.\n",
                                        voice=voice)}[node]
    run_v1(env, node, model=model, **inputs, **FAST)
    values = [v for v, _ in updates]
    assert values[:2] == [1, 2] and values == sorted(values)
    assert updates[-1][0] == updates[-1][1]  # full at the end


def test_only_engines_that_report_chunks_get_on_chunk(env, tiny_synth):
    runner = env.pack.nodes.runner

    class Remote:  # an engine whose tts takes no on_chunk
        def tts(self, text, voice=None, *, on_progress=None, cancel=None):
            pass

    assert not runner.accepts_chunks(Remote())
    assert not runner.accepts_chunks(object())
    assert runner.accepts_chunks(tiny_synth)


# ---------------------------------------------------------------- lexicons (issue 36)
def test_a_typed_lexicon_is_bounded_and_cancel_stops_it(env, model):
    """A lexicon typed into a node is at most budgets.NODE_LEXICON_CHARS (an error naming the
    input and the limit, before any model work); Cancel pressed while a long lexicon is read,
    or while a long text is respelled, leaves as ComfyUI's interruption."""
    from fish_core.budgets import NODE_LEXICON_CHARS

    mm = env.stubs.mm
    huge = "".join(f"word{i}\tr{i}\n" for i in range(NODE_LEXICON_CHARS // 10))
    assert len(huge) > NODE_LEXICON_CHARS
    with pytest.raises(ValueError, match=rf"^lexicon is {len(huge)} characters; the limit is "
                                         rf"{NODE_LEXICON_CHARS}"):
        run_v1(env, "SailfishTTS", model=model, text="Hi.", lexicon=huge, **FAST)
    long_lexicon = "".join(f"word{i}\tr{i}\n" for i in range(10000))
    mm.interrupt_current_processing(True)  # Cancel pressed while the lexicon is read
    with pytest.raises(mm.InterruptProcessingException):
        run_v1(env, "SailfishTTS", model=model, text="Hi.", lexicon=long_lexicon, **FAST)
    assert not mm.processing_interrupted()
    # and while a long text is respelled (without the lexicon, this run would generate)
    env.stubs.utils.PROGRESS_BAR_HOOK = lambda *args, **kwargs: pytest.fail("generated")
    mm.interrupt_current_processing(True)
    with pytest.raises(mm.InterruptProcessingException):
        run_v1(env, "SailfishTTS", model=model, text="I love SQL. " * 1500,
               lexicon="SQL\tsequel\n", **FAST)
    assert not mm.processing_interrupted()
