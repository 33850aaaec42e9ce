"""A decode frame captured as one CUDA graph.

At batch 1 a frame is ~1,000 small kernels (36 slow layers, 9 × 4 fast layers, 10 samplers);
launching them one by one from Python costs more than running them. Captured once per
(batch, cache length), a frame is replayed with a single launch. Inputs are copied into the
graph's static buffers; outputs live in the graph's buffers until the next replay, so callers
copy them out. This works with or without ``torch.compile`` (no Triton needed).
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import Tensor
from torch.utils._python_dispatch import is_traceable_wrapper_subclass


class FrameGraph:
    def __init__(self, fn: Callable[..., Sequence[Tensor]], args: Sequence[Tensor],
                 pool=None):
        """Capture ``fn(*args)``. ``fn`` must not sync with the host or allocate on the CPU.
        ``pool`` (``torch.cuda.graph_pool_handle()``): a memory pool shared with other graphs
        that never replay at the same time (a prefill per length bucket)."""
        self.inputs = [a.clone() for a in args]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up (and any lazy init) off the capture stream
            for _ in range(2):
                fn(*self.inputs)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool):
            self.outputs = list(fn(*self.inputs))
        # Check once: the replay must give exactly what the function gives on the same input.
        direct = [t.clone() for t in fn(*self.inputs)]
        self.graph.replay()
        if not all(torch.equal(a, b) for a, b in zip(direct, self.outputs)):
            raise RuntimeError("CUDA graph replay differs from the captured function")

    def __call__(self, *args: Tensor) -> list[Tensor]:
        for buffer, value in zip(self.inputs, args):
            buffer.copy_(value)
        self.graph.replay()
        return self.outputs

    def release(self) -> None:
        """Free the graph and its memory pool now (rather than when the last reference goes)."""
        self.graph.reset()
        self.inputs, self.outputs = [], []


def tensor_addresses(module: torch.nn.Module) -> tuple[int, ...]:
    """The storage address of every parameter and buffer (of the plain tensors inside a tensor
    subclass, e.g. a torchao quantized weight): what a captured CUDA graph reads."""
    def addresses(t: Tensor):
        if t.is_mkldnn:  # oneDNN-packed (CPU, quant.packed): no data pointer, no CUDA graph
            return [id(t)]
        if not is_traceable_wrapper_subclass(t):
            return [t.data_ptr()]
        names, _ = t.__tensor_flatten__()
        return [a for name in names for a in addresses(getattr(t, name))]

    return tuple(a for t in [*module.parameters(), *module.buffers()] for a in addresses(t))
