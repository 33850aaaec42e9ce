"""A stream's first codec chunk as one CUDA graph: the first audio of every stream waits for it.

The first chunk of a stream (``params.FIRST_FRAMES`` frames, an empty ``state``) is the same
function of its codes every time, its shapes fixed by the batch: about 250 small kernels eager
(``bench/count_ops.py``). ``FirstChunkGraphs`` captures it once per (batch, frames, dtype) with
the engine's ``FrameGraph`` (warm-up, capture, and a replay checked equal to the direct call on
the same codes; cuDNN's deterministic algorithms while it captures) and replays it for later
streams. The graph's outputs are the audio and every tensor of the streaming state it leaves,
packed into one buffer (``FirstChunk``); after a replay they are copied out (the next replay
overwrites them) and the state is rebuilt entry by entry, so the next chunks continue from
exactly the state the checked direct call leaves (``tests/test_codec_graph.py`` checks the
packing and the replay path on the CPU, where the function runs eagerly).

Anything else (another length, a started stream, the CPU) runs eagerly, as does a key whose
capture or check failed: the failure is recorded in ``failures`` (and logged once), never
raised to the caller.
"""

from __future__ import annotations

import logging
import math
import threading
import weakref

import torch
from torch import Tensor, nn

from ..engine.cuda_graph import tensor_addresses
from ..params import FIRST_FRAMES
from .layers import Snake, State, cudnn_flag, version

log = logging.getLogger(__name__)

MAX_GRAPHS = 4  # captured first chunks kept per codec (a stream decodes at batch 1)


def first_chunk_key(device: torch.device, codes: Tensor, state: State,
                    dtype: torch.dtype) -> tuple | None:
    """The graph a chunk of ``codes [B, K, n]`` replays, or None (eager): on CUDA, a stream's
    first chunk (empty ``state``) of ``FIRST_FRAMES`` frames."""
    if torch.device(device).type != "cuda" or state or codes.ndim != 3:
        return None
    if codes.shape[-1] != FIRST_FRAMES:
        return None
    return codes.shape[0], codes.shape[-1], dtype


class FirstChunk:
    """The first chunk as a function of the codes alone: ``codes -> [audio, packed state]``
    (what a graph captures), and ``layout``, how the packed state unpacks."""

    def __init__(self, codec: nn.Module):  # a ``model.Codec``
        # weakly: the codec owns its graphs; no reference cycle keeps a dropped codec's weights
        # and graph memory alive until the garbage collector runs
        self._codec = weakref.ref(codec)
        self.layout: list[tuple] = []  # (module, kind, shape(s) or value), in state order

    @property
    def codec(self) -> nn.Module:
        return self._codec()

    def __call__(self, codes: Tensor) -> list[Tensor]:
        state: State = {}
        audio = self.codec.decode_state(codes, state)
        layout, tensors = [], []
        for module, value in state.items():
            if isinstance(value, Tensor):
                layout.append((module, "tensor", value.shape))
                tensors.append(value)
            elif isinstance(value, tuple):  # an attention layer's keys and values
                layout.append((module, "pair", tuple(t.shape for t in value)))
                tensors += value
            else:  # a transformer's position counter
                layout.append((module, "value", value))
        if len({t.dtype for t in tensors}) > 1:
            raise TypeError("the codec's streaming state mixes dtypes: not packed into one buffer")
        self.layout = layout
        packed = (torch.cat([t.reshape(-1) for t in tensors]) if tensors
                  else audio.new_zeros(0))
        return [audio, packed]

    @staticmethod
    def unpack(layout: list[tuple], packed: Tensor) -> State:
        """The state ``layout`` describes, its tensors views of ``packed`` (never written in
        place: each chunk replaces its layers' entries)."""
        state: State = {}
        at = 0

        def take(shape) -> Tensor:
            nonlocal at
            n = math.prod(shape)
            at += n
            return packed[at - n:at].view(shape)

        for module, kind, info in layout:
            if kind == "tensor":
                state[module] = take(info)
            elif kind == "pair":
                state[module] = tuple(take(shape) for shape in info)
            else:
                state[module] = info
        return state


class FirstChunkGraphs:
    """The captured first chunks of one codec, by ``first_chunk_key``; ``failures`` holds the
    keys that run eagerly because their capture or check failed, with the reason."""

    def __init__(self, codec: nn.Module):  # a ``model.Codec``
        self.function = FirstChunk(codec)
        self.enabled = True
        self.graphs: dict[tuple, tuple] = {}  # key -> (FrameGraph, layout)
        self.failures: dict[tuple, str] = {}
        self.weights: tuple | None = None  # what the graphs read (``weights_key``)
        self.lock = threading.Lock()

    def __deepcopy__(self, memo) -> FirstChunkGraphs:
        """A copied codec starts with no graphs of its own (they read the original's weights)."""
        codec = self.function.codec
        return FirstChunkGraphs(memo.get(id(codec), codec))

    def decode(self, codes: Tensor, state: State) -> Tensor | None:
        """Decode ``codes`` (clamped, on the codec's device) into ``state`` with a graph, or
        None where the eager path runs."""
        codec = self.function.codec
        key = first_chunk_key(codec.device, codes, state, codec.decode_dtype)
        if not self.enabled or key is None or key in self.failures:
            return None
        with self.lock:  # a replay's outputs are shared until copied out
            self.follow_weights(codec)
            captured = self.graphs.get(key)
            if captured is None:
                if len(self.graphs) >= MAX_GRAPHS:
                    return None
                captured = self._capture(key, codes)
                if captured is None:
                    return None
            graph, layout = captured
            audio, packed = graph(codes)
            audio, packed = audio.clone(), packed.clone()
        state.update(FirstChunk.unpack(layout, packed))
        return audio

    def _capture(self, key: tuple, codes: Tensor) -> tuple | None:
        from ..engine.cuda_graph import FrameGraph  # CUDA only

        try:
            # deterministic algorithms while it captures: the replay is checked equal to a
            # direct call bit for bit, which an algorithm with atomic adds (cuDNN may pick one
            # for a transposed convolution) would fail by chance; replays run what was captured
            with cudnn_flag("deterministic", True):
                graph = FrameGraph(self.function, [codes])
        except Exception as e:  # noqa: BLE001 - a failed capture must never fail the run
            self.failures[key] = f"{type(e).__name__}: {str(e)[:300]}"
            log.warning("codec first chunk %s runs eagerly: CUDA graph capture failed (%s)",
                        key, self.failures[key])
            return None
        self.graphs[key] = (graph, list(self.function.layout))
        return self.graphs[key]

    def follow_weights(self, codec: nn.Module) -> None:
        """Drop the graphs (under the lock) when a weight they read moved or was replaced
        however it happened: ComfyUI offloads a model module by module (never through
        ``Codec.to``), a state dict may be assigned, an ``alpha`` changed in place (its Snake
        then computes a new inverse). A graph replays fixed addresses: it must never read freed
        or stale weights."""
        weights = weights_key(codec)
        if weights != self.weights:
            self._drop()
            self.weights = weights

    def clear(self) -> None:
        """Drop every graph (the weights they read were cast, moved or replaced)."""
        with self.lock:
            self._drop()

    def _drop(self) -> None:
        for graph, _ in self.graphs.values():
            graph.release()
        self.graphs.clear()
        self.failures.clear()


def weights_key(codec: nn.Module) -> tuple:
    """What a captured first chunk reads of ``codec``: every weight's address and each Snake's
    ``alpha`` version (its cached inverse follows it)."""
    snakes = tuple(version(m.alpha) for m in codec.modules() if isinstance(m, Snake))
    return tensor_addresses(codec), snakes
