"""The one model manager every Sailfish node shares.

A FISH_S2_MODEL value is a ``ModelHandle``: how to load a model, not the model. The manager
loads each configuration once (a lock makes concurrent requests wait for the first load) and
keeps it until one of these frees it:

* ComfyUI: the model's torch modules are wrapped in a ``ModelPatcher`` and handed to
  ``comfy.model_management.load_models_gpu`` before every generation, with the memory a
  generation holds besides the weights (the KV cache at the handle's context, the voice-prefix
  cache's budget, the CUDA graph pool), so ComfyUI accounts for them, may evict other models
  for them, and may evict them ("Unload models", "Free memory", low VRAM). Its detach callback drops
  our entry and the KV caches, so memory is really freed;
  the next run loads the model again from the handle. When we free a model ourselves, ComfyUI
  forgets it as it forgets any freed model (see ``ModelManager._drop``).
* Idle unload: ``unload_after_minutes`` after the last use (postponed while ComfyUI is running
  a prompt, so that its model list is not changed under it).

Outside ComfyUI the manager is a plain cache with the same idle unload.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import torch

from ..fish_core.engine.device import resolve_device
from ..fish_core.engine.prefix_cache import DEFAULT_PREFIX_CACHE_MB, megabytes
from . import host
from .remote import RemoteHandle, remote_synthesizer

if TYPE_CHECKING:  # the Synthesizer is imported when a model is loaded, not at ComfyUI start-up
    from ..fish_core import Synthesizer

log = logging.getLogger("sailfish")
BUSY_RETRY_SECONDS = 30.0


@dataclass(frozen=True)
class ModelKey:
    """What makes two handles share one loaded model."""

    folder: str  # real path
    precision: str
    quantization: str
    device: str
    compile: bool
    context_length: int


@dataclass(frozen=True)
class ModelHandle:
    """What flows between nodes as FISH_S2_MODEL."""

    folder: str
    precision: str = "auto"
    quantization: str = "none"
    device: str = "auto"
    compile: bool = False
    context_length: int = 0  # 0: the model's own
    unload_after_minutes: float = 0  # 0: keep loaded until ComfyUI frees memory
    # The voice prefixes' KV kept for reuse (a budget, counted as model memory; 0: off). Not
    # part of the ModelKey: a new budget resizes the loaded model's cache, never loads again.
    prefix_cache_mb: float = DEFAULT_PREFIX_CACHE_MB

    @property
    def name(self) -> str:
        return Path(self.folder).name


def load_synthesizer(handle: ModelHandle, device: torch.device) -> Synthesizer:
    from ..fish_core import Synthesizer
    from .paths import MODELS, roots, word_timer

    synth = Synthesizer.from_pretrained(
        handle.folder, device=device, dtype=handle.precision, compile=handle.compile,
        quantization=handle.quantization, download=False,
        context_length=handle.context_length or None, prefix_cache_mb=handle.prefix_cache_mb,
        threads=False)  # the loader's `threads` input set them, or left them (model.py)
    synth.timer = word_timer(device)  # loaded on the first request for words, freed with it
    # The speech recogniser (a Voice Encode without transcript) lives in the first models
    # folder, downloaded there when first needed; it is freed with this model.
    synth.listener.configure(None, roots(MODELS)[0], download=True)
    return synth


class SailfishS2(torch.nn.Module):
    """The torch modules of one loaded model, as one module for ComfyUI to move and count."""

    def __init__(self, synth: Synthesizer):
        super().__init__()
        self.model = synth.runtime.model
        self.codec = synth.runtime.codec

    def empty(self) -> None:
        """Let go of the weights (ComfyUI may still hold this module for a moment)."""
        self.model = self.codec = None


class ComfyMemory:
    """ComfyUI's memory management, for the manager."""

    def __init__(self, mm, model_patcher):
        self.mm = mm
        self.model_patcher = model_patcher

    @classmethod
    def find(cls) -> "ComfyMemory | None":
        mm = host.module("comfy.model_management")
        model_patcher = host.module("comfy.model_patcher")
        return None if mm is None or model_patcher is None else cls(mm, model_patcher)

    def default_device(self) -> torch.device:
        return self.mm.get_torch_device()  # honours --cpu, --directml …

    def make_room(self, nbytes: int, device: torch.device) -> None:
        """Let ComfyUI evict other models before we allocate ``nbytes`` on ``device``."""
        if device.type != "cpu":
            self.mm.free_memory(nbytes, device)

    def register(self, synth: Synthesizer, device: torch.device, on_detach: Callable):
        offload = torch.device("cpu") if device.type == "cpu" else self.mm.unet_offload_device()
        patcher = self.model_patcher.ModelPatcher(SailfishS2(synth), load_device=device,
                                                  offload_device=offload)
        patcher.add_callback("on_detach_after", on_detach)  # CallbacksMP.ON_DETACH
        return patcher

    def load(self, patcher, extra_bytes: int = 0) -> None:
        """Load the weights; ``extra_bytes``: what a generation holds besides them, kept free."""
        self.mm.load_models_gpu([patcher], memory_required=extra_bytes, force_full_load=True)

    def busy(self) -> bool:
        queue = getattr(host.prompt_server(), "prompt_queue", None)
        return queue is not None and queue.get_tasks_remaining() > 0

    def empty_cache(self) -> None:
        self.mm.soft_empty_cache()


@dataclass
class Entry:
    synth: Synthesizer
    patcher: object | None  # the ModelPatcher inside ComfyUI; we hold the strong reference
    idle_seconds: float
    users: int = 0
    timer: threading.Timer | None = None
    prefix_cache_mb: float = DEFAULT_PREFIX_CACHE_MB  # the loaded model's budget now
    extra_bytes: int = 0  # what a generation holds besides the weights (``generation_size``)
    # One generation at a time per model: nodes and the HTTP API (nodes/routes.py) share it.
    lock: threading.RLock = field(default_factory=threading.RLock)


class ModelManager:
    def __init__(self, load: Callable[[ModelHandle, torch.device], Synthesizer] = load_synthesizer,
                 memory: ComfyMemory | None | str = "auto"):
        self._load = load
        self._memory = memory
        self._lock = threading.RLock()
        self._entries: dict[ModelKey, Entry] = {}
        # Emptied patchers ComfyUI was still unloading when their detach callback ran. Freeing
        # them there would fire ComfyUI's finalizer, which edits the list it is iterating.
        self._retired: list = []

    @property
    def memory(self) -> ComfyMemory | None:
        if self._memory == "auto":
            self._memory = ComfyMemory.find()
        return self._memory

    def device(self, handle: ModelHandle) -> torch.device:
        if handle.device != "auto":
            return torch.device(handle.device)
        if self.memory:
            return self.memory.default_device()
        return resolve_device("auto")

    def key(self, handle: ModelHandle) -> ModelKey:
        return ModelKey(os.path.realpath(handle.folder), handle.precision, handle.quantization,
                        str(self.device(handle)), bool(handle.compile),
                        int(handle.context_length))

    def loaded(self) -> list[ModelKey]:
        """The configurations held loaded now (the HTTP API's health route reports it)."""
        with self._lock:
            return list(self._entries)

    def get(self, handle: ModelHandle | RemoteHandle) -> Synthesizer:
        """The loaded model of ``handle`` (loaded now if needed); a remote engine's client."""
        if isinstance(handle, RemoteHandle):
            return remote_synthesizer(handle)
        with self._lock:
            key, entry = self._entry(handle)
            self._schedule(key, entry)
            return entry.synth

    @contextmanager
    def use(self, handle: ModelHandle) -> Iterator[Synthesizer]:
        """The model of ``handle``, loaded on its device (ComfyUI may first evict others) and
        kept from idle unload until the block ends. A remote engine's client has nothing to
        load or keep."""
        if isinstance(handle, RemoteHandle):
            yield remote_synthesizer(handle)
            return
        with self._lock:
            key, entry = self._entry(handle)
            entry.users += 1
            if entry.timer is not None:
                entry.timer.cancel()
        try:
            with entry.lock:
                if entry.patcher is not None:
                    self.memory.load(entry.patcher, entry.extra_bytes)
                yield entry.synth
        finally:
            with self._lock:
                entry.users -= 1
                self._schedule(key, entry)

    def unload(self, handle: ModelHandle | None = None) -> None:
        """Free ``handle``'s model, or every model."""
        with self._lock:
            keys = list(self._entries) if handle is None else [self.key(handle)]
            for key in keys:
                self._drop(key, "unloaded")
        self._collect()

    # ---------------------------------------------------------------- internals (lock held)
    def _entry(self, handle: ModelHandle) -> tuple[ModelKey, Entry]:
        key = self.key(handle)
        entry = self._entries.get(key)
        self._retired.clear()  # ComfyUI is done with them by the next run
        if entry is None:
            device = torch.device(key.device)
            if self.memory is not None:
                self.memory.make_room(load_size(handle), device)
            log.info("Sailfish: loading %s on %s (%s, quantization %s)", handle.name, device,
                     handle.precision, handle.quantization)
            t0 = time.perf_counter()
            synth = self._load(handle, device)
            patcher = self.memory.register(synth, device, self._on_detach) if self.memory else None
            entry = Entry(synth, patcher, 0.0, prefix_cache_mb=handle.prefix_cache_mb,
                          extra_bytes=generation_size(handle))
            self._entries[key] = entry
            log.info("Sailfish: %s loaded in %.1f s", handle.name, time.perf_counter() - t0)
        if entry.prefix_cache_mb != handle.prefix_cache_mb:  # another loader's budget: resize
            entry.synth.runtime.resize_prefix_cache(handle.prefix_cache_mb)
            entry.prefix_cache_mb = handle.prefix_cache_mb
            entry.extra_bytes = generation_size(handle)
        entry.idle_seconds = max(0.0, float(handle.unload_after_minutes) * 60)
        return key, entry

    def _schedule(self, key: ModelKey, entry: Entry, seconds: float | None = None) -> None:
        if entry.timer is not None:
            entry.timer.cancel()
            entry.timer = None
        if entry.idle_seconds > 0 and entry.users == 0:
            # The timer gets the key only: a timer must not keep the model alive.
            entry.timer = threading.Timer(seconds or entry.idle_seconds, self._expire, (key,))
            entry.timer.daemon = True
            entry.timer.start()

    def _expire(self, key: ModelKey) -> None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry.timer is not threading.current_thread() or entry.users:
                return  # unloaded, used again, or rescheduled meanwhile
            if self.memory is not None and self.memory.busy():
                self._schedule(key, entry, min(entry.idle_seconds, BUSY_RETRY_SECONDS))
                return
            self._drop(key, f"idle for {entry.idle_seconds / 60:g} min")
            del entry  # so that the collection below can free it
        self._collect()

    def _on_detach(self, patcher, unpatch_all=True) -> None:
        """ComfyUI unloaded our model ("Unload models", "Free memory", low VRAM). A detach
        without unpatching is ComfyUI re-loading a loaded model: the weights stay."""
        if not unpatch_all:
            return
        with self._lock:
            self._retired.append(patcher)
            for key, entry in list(self._entries.items()):
                if entry.patcher is patcher:
                    self._drop(key, "freed by ComfyUI")
        self._collect()

    def _drop(self, key: ModelKey, reason: str) -> None:
        """Forget the model and let go of its weights. ComfyUI 0.3.64 has no call that unloads
        one given model (``free_memory`` and ``unload_all_models`` unload every model on a
        device, other packs' too), and its list of loaded models is internal. But that list
        holds our ``ModelPatcher`` only weakly, with a finalizer on our module that runs
        ``cleanup_models``: so letting go of the patcher (the strong reference is ours, in the
        entry) and emptying the module is ComfyUI's own way out; ``_collect`` makes it happen
        now. After a detach (``_on_detach``) ComfyUI has already taken it out."""
        entry = self._entries.pop(key, None)
        if entry is None:
            return
        if entry.timer is not None:
            entry.timer.cancel()
            entry.timer = None
        if entry.patcher is not None:
            entry.patcher.model.empty()
        entry.synth.release_caches()
        free_aligner = getattr(entry.synth, "free_aligner", None)
        if free_aligner is not None:  # the word aligner goes with the model
            free_aligner()
        log.info("Sailfish: unloaded %s (%s)", Path(key.folder).name, reason)

    def _collect(self) -> None:
        gc.collect()  # the engine holds reference cycles; free the weights now
        if self.memory is not None:
            self.memory.empty_cache()


# The CUDA graph's private pool and a frame's temporaries at batch 1 (a few vocabulary-sized
# rows): headroom, not a measurement. bench/gpu_first.py reports vram_peak_GB - vram_model_GB,
# which is this plus the KV cache.
GRAPH_POOL_BYTES = 256 << 20


def load_size(handle: ModelHandle) -> int:
    """Bytes loading ``handle`` will hold on its device: the weights on disk and what a
    generation holds besides them (``generation_size``)."""
    return weights_size(handle.folder) + generation_size(handle)


def generation_size(handle: ModelHandle) -> int:
    """Bytes a generation holds besides the weights: the slow AR's KV cache at the full context
    (batch 1), the voice-prefix cache's budget and the CUDA graph pool."""
    return kv_cache_size(handle) + megabytes(handle.prefix_cache_mb) + GRAPH_POOL_BYTES


def kv_cache_size(handle: ModelHandle) -> int:
    """Bytes of the slow AR's K and V caches at ``handle``'s context length, batch 1, in its
    precision (0 if the folder has no readable config: loading will say why)."""
    from ..fish_core.engine.config import ModelConfig

    try:
        text = ModelConfig.from_file(handle.folder).text
    except (OSError, ValueError):
        return 0
    length = min(handle.context_length or text.max_seq_len, text.max_seq_len)
    itemsize = 4 if handle.precision in ("fp32", "float32") else 2
    return text.n_layer * 2 * text.n_local_heads * text.head_dim * length * itemsize


def weights_size(folder: str) -> int:
    """Bytes of the weights on disk (what loading will roughly allocate)."""
    files = [*Path(folder).glob("*.safetensors"), Path(folder, "codec.pth")]
    return sum(f.stat().st_size for f in files if f.is_file())


MANAGER = ModelManager()
