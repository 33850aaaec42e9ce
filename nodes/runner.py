"""The node runner: what every node that runs the model shares, written once.

A generating node (TTS, Voice Clone, Multi-Speaker, Subtitles; local or remote model) is a
schema and an ``execute`` that calls fish_core inside ``generation(model)``::

    with generation(model) as run:
        speeches = run.speak(Request.tts(text, voice, **sampling(...), **finishing(...)))

``generation`` brings the model from the manager (loaded, kept from idle unload while the
block runs) and the keywords of one run (``run.hooks``): ComfyUI's progress bar per generated
frame (``on_progress``), Cancel within a frame (``cancel``: ComfyUI's interrupt flag), and,
when the tab that queued the prompt listens, live playback of take 1 (``on_chunk``: the
``playback`` events, the stream closed with done, cancelled or error). A Cancel leaves the
block as ComfyUI's interruption; the model stays loaded for the next prompt. The nodes that
only encode (Voice Encode, Voice From Take) take the model with ``loaded(model)``.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from ..fish_core import Cancelled
from . import host, playback
from .manager import MANAGER, ModelHandle

if TYPE_CHECKING:
    from ..fish_core.speech.front import Front


@dataclass
class Run:
    """One node's generation: the model's synthesizer (``Synthesizer`` or
    ``RemoteSynthesizer``) and the keywords every generating call of it takes."""

    synth: "Front"  # the local Synthesizer or a RemoteSynthesizer
    hooks: dict = field(default_factory=dict)  # on_progress, cancel[, on_chunk]

    def speak(self, request):
        """A node's checked request (``speech.request.Request``, built from its inputs before
        the model loads) spoken by the model, with this run's progress, Cancel and playback."""
        return self.synth.speak(request, **self.hooks)


@contextmanager
def generation(model: ModelHandle) -> Iterator[Run]:
    """The model of ``model`` with progress, Cancel and live playback for one node run."""
    mm = host.module("comfy.model_management")  # once per run, not per frame
    with loaded(model) as synth:
        run = Run(synth, {"on_progress": progress_bar(), "cancel": interrupted(mm)})
        sender = playback.sender() if accepts_chunks(synth) else None
        if sender is not None:
            sender.start()
            run.hooks["on_chunk"] = sender.chunk
        try:
            yield run
        except BaseException as e:
            if sender is not None:
                sender.close("cancelled" if interruption(e) else "error")
            if isinstance(e, Cancelled) and mm is not None:
                mm.throw_exception_if_processing_interrupted()  # ComfyUI's "interrupted"
            raise
        if sender is not None:
            sender.close("done")


@contextmanager
def loaded(model: ModelHandle) -> Iterator[object]:
    """The model's synthesizer from the manager, kept loaded while the block runs."""
    with MANAGER.use(model) as synth:
        yield synth


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


def interruption(error: BaseException) -> bool:
    """Cancel pressed: our ``Cancelled`` or ComfyUI's ``InterruptProcessingException``."""
    mm = host.module("comfy.model_management")
    kinds = (Cancelled, getattr(mm, "InterruptProcessingException", Cancelled))
    return isinstance(error, kinds)


def accepts_chunks(synth) -> bool:
    """Whether the model hands out audio as it is made (``on_chunk`` of its ``tts``: either
    synthesizer, as the audio is generated or arrives)."""
    try:
        return "on_chunk" in inspect.signature(synth.tts).parameters
    except (AttributeError, TypeError, ValueError):
        return False


# ---------------------------------------------------------------- a node's keywords
def require_text(field: str, value: str, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{field} is empty: {what}")
    return value


def typed_lexicon(text: str, field: str = "lexicon"):
    """A lexicon typed into a node: at most ``budgets.NODE_LEXICON_CHARS`` characters, read
    and applied (``text.lexicon``) with ComfyUI's Cancel looked at as it goes."""
    from ..fish_core.budgets import NODE_LEXICON_CHARS
    from ..fish_core.text.lexicon import Lexicon

    return interruptible(Lexicon.parse, text, field, NODE_LEXICON_CHARS,
                         interrupted(host.module("comfy.model_management")))


def interruptible(work: Callable, *args):
    """``work(*args)`` outside ``generation`` (a lexicon read or applied) that Cancel stops:
    our ``Cancelled`` leaves as ComfyUI's interruption."""
    try:
        return work(*args)
    except Cancelled:
        mm = host.module("comfy.model_management")
        if mm is not None:
            mm.throw_exception_if_processing_interrupted()
        raise
