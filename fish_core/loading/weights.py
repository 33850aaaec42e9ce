"""Stream tensors into a model built on the ``meta`` device: check each name and shape, place
it, and report every mismatch together at the end.

The LLM checkpoint (``checkpoint``), FP8 checkpoints (``fp8_checkpoint``) and the codec
(``codec_checkpoint``) all load through ``StreamedLoad``; ``Problems`` is the one "weights do
not match" report.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from contextlib import contextmanager
from typing import Callable

import torch
from torch import nn

LISTED = 20  # names shown per kind of problem
TRIM_BYTES = 256 << 20  # give freed memory back to the OS after this many bytes were converted
LABELS = {"missing": "missing", "unexpected": "unexpected", "misshaped": "wrong shape"}


class Problems:
    """Missing / unexpected / mis-shaped tensors, raised together as one error.

    ``labels`` names the three kinds in the message (``LABELS`` by default)."""

    def __init__(self, labels: dict[str, str] = LABELS):
        self.labels = labels
        self.missing: list[str] = []
        self.unexpected: list[str] = []
        self.misshaped: list[str] = []

    def raise_if_any(self, header: str, error: type[Exception]) -> None:
        """Raise ``error("header\\n  missing (n): a, b …\\n  …")`` if anything was recorded."""
        kinds = {"missing": sorted(self.missing), "unexpected": sorted(self.unexpected),
                 "misshaped": self.misshaped}
        if not any(kinds.values()):
            return
        lines = [header]
        for kind, items in kinds.items():
            if items:
                more = " …" if len(items) > LISTED else ""
                lines.append(f"  {self.labels[kind]} ({len(items)}): "
                             + ", ".join(items[:LISTED]) + more)
        raise error("\n".join(lines))


def assign(model: nn.Module, name: str, tensor: torch.Tensor) -> None:
    """Set parameter ``name`` (``"layers.0.attention.wqkv.weight"``) of ``model`` to ``tensor``."""
    module_name, _, leaf = name.rpartition(".")
    module = model.get_submodule(module_name) if module_name else model
    module._parameters[leaf] = nn.Parameter(tensor, requires_grad=False)


class Trim:
    """Hands memory freed by the load back to the OS every ``TRIM_BYTES`` of converted tensors.

    Each converted tensor is read into a buffer of its own and freed once converted (quantized,
    cast, packed). glibc keeps buffers of up to 32 MB in its heap after the first large free
    (its dynamic mmap threshold), and quantizing leaves that heap fragmented: measured on the
    real-size int4 load, the peak grew to 1.58x the weights' bytes without this and 1.14x with
    it (bench/bench_realsize.py). ``malloc_trim`` (glibc only; elsewhere nothing) returns the
    free pages."""

    def __init__(self):
        self.pending = 0

    def freed(self, nbytes: int) -> None:
        self.pending += nbytes
        if self.pending >= TRIM_BYTES:
            self.pending = 0
            release_freed_memory()


def release_freed_memory() -> None:
    """glibc's ``malloc_trim(0)``: free heap pages go back to the OS (no-op elsewhere)."""
    trim = _libc("malloc_trim")
    if trim is not None:
        trim(0)


M_MMAP_THRESHOLD = -3  # mallopt's parameter number (glibc malloc.h)
LOAD_MMAP_THRESHOLD = 1 << 20  # while loading: buffers of 1 MB and more get pages of their own
AFTER_MMAP_THRESHOLD = 32 << 20  # after: glibc's own ceiling, where its dynamic threshold ends


@contextmanager
def separate_large_buffers():
    """While loading, buffers of ``LOAD_MMAP_THRESHOLD`` and more are mapped on their own and
    unmapped when freed (glibc ``mallopt``; elsewhere nothing), so the quantizer's temporaries
    cannot interleave with the weights kept in one heap and strand freed pages between them
    (measured: the real-size int4 load's peak varied from 1.13x to 1.30x the weights' bytes
    with ``Trim`` alone). Afterwards the threshold is glibc's 32 MB ceiling, which its
    dynamic threshold reaches after the first large free anyway."""
    mallopt = _libc("mallopt")
    if mallopt is not None:
        mallopt(M_MMAP_THRESHOLD, LOAD_MMAP_THRESHOLD)
    try:
        yield
    finally:
        if mallopt is not None:
            mallopt(M_MMAP_THRESHOLD, AFTER_MMAP_THRESHOLD)
        release_freed_memory()


_libc_fns: dict = {}


def _libc(name: str):
    """A glibc function by name, or None (another C library, another OS)."""
    if name not in _libc_fns:
        fn = None
        try:
            path = ctypes.util.find_library("c")
            fn = getattr(ctypes.CDLL(path), name, None) if path else None
        except OSError:
            fn = None
        _libc_fns[name] = fn
    return _libc_fns[name]


class StreamedLoad:
    """One load of ``model`` (built on ``meta``): ``take`` each stored tensor, then ``finish``.

    ``display(name)`` is how a missing parameter is named in the report (the stored style)."""

    def __init__(self, model: nn.Module, display: Callable[[str], str] = str,
                 labels: dict[str, str] = LABELS):
        self.model, self.display = model, display
        self.shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
        self.seen: set[str] = set()
        self.problems = Problems(labels)
        self.trim = Trim()

    def expects(self, stored: str, name: str, shape: tuple[int, ...]) -> bool:
        """Whether a tensor of ``shape`` stored as ``stored`` fits parameter ``name``; records
        why not. A known name counts as seen even when its shape is wrong (reported once)."""
        if name not in self.shapes or name in self.seen:
            self.problems.unexpected.append(stored)
            return False
        if tuple(shape) != self.shapes[name]:
            self.problems.misshaped.append(
                f"{stored}: {tuple(shape)}, expected {self.shapes[name]}")
            self.seen.add(name)
            return False
        return True

    def place(self, name: str, tensor: torch.Tensor) -> None:
        assign(self.model, name, tensor)
        self.seen.add(name)

    def take(self, stored: str, name: str, tensor: torch.Tensor,
             convert: Callable[[str, torch.Tensor], torch.Tensor]) -> None:
        """Check ``tensor`` and place ``convert(name, tensor)``."""
        if self.expects(stored, name, tensor.shape):
            placed = convert(name, tensor)
            self.place(name, placed)
            if placed is not tensor:
                self.trim.freed(tensor.numel() * tensor.element_size())

    def finish(self, header: str, error: type[Exception]) -> nn.Module:
        """Report what is missing, unexpected or mis-shaped in one ``error``; returns the model."""
        release_freed_memory()
        self.problems.missing += [self.display(n) for n in self.shapes.keys() - self.seen]
        self.problems.raise_if_any(header, error)
        return self.model
