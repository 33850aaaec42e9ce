"""bf16 Linear weights in oneDNN's blocked layout, for the CPU (``PackedLinear``).

``F.linear`` with a bf16 weight on the CPU hands the weight to oneDNN as a plain matrix, and
oneDNN reorders it into its blocked layout on every call: at batch 1 (decode) that is a read and
a write of the whole weight before the product reads it again, ~12 GB/s of weights on the 2-core
EPYC here. Reordered once, at load (``torch.ops.mkldnn._reorder_linear_weight``), and multiplied
by ``torch.ops.mkldnn._linear_pointwise``, the same oneDNN kernel reads each weight once: ~25-30
GB/s, the machine's read bandwidth, and the same result bit for bit (``tests/test_packed.py``;
``bench/bench_cpu.py --kernels`` measures both). This is what torch.compile's CPU backend does
to Linear weights when it may freeze them; eager decoding gets it here.

Only bf16 (fp32 products differ from ``F.linear``'s in the last bits; fp32 is for parity), only
weights of at least ``MIN_WEIGHTS`` elements, only where oneDNN runs (``available``, probed
once). The packed weight is an MKLDNN tensor: no data
pointer, no ``.to(dtype)``, and inductor cannot lower it, so a compiled decode step falls back
to eager decoding on such a model (on a CPU, eager with packed weights is the faster of the two:
docs/cpu.md). ``dense()`` gives the plain weight back (``quant.quantize_model`` uses it).
``SAILFISH_CPU_PACK=0`` turns packing off.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import Tensor, nn

DTYPES = (torch.bfloat16,)
# Smaller weights stay plain: a packed product costs ~10 µs however small (measured: plain wins
# below ~32K weights, packed from ~64K up; 2.6x at 1024 x 1024).
MIN_WEIGHTS = 65536
ENV = "SAILFISH_CPU_PACK"  # "0": leave bf16 Linear weights plain (an escape hatch, and benches)
COMPILE_REFUSED = ("bf16 weights packed for oneDNN (quant.packed) do not compile; on a CPU the "
                   "eager step with them is the faster one")
_available: dict[str, bool] = {}


def reorder(weight: Tensor) -> Tensor:
    """A plain ``[N, K]`` weight → the same in oneDNN's layout for batch-1 products."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), 1)


def linear(x: Tensor, packed: Tensor) -> Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")


def worth_it(shape) -> bool:
    """Whether a ``[N, K]`` weight is large enough for packing to pay."""
    return shape[0] * shape[1] >= MIN_WEIGHTS


def enabled() -> bool:
    """Whether packing is wanted (``$SAILFISH_CPU_PACK`` is not "0")."""
    return os.environ.get(ENV, "1").strip() != "0"


def available(dtype: torch.dtype = torch.bfloat16) -> bool:
    """Whether weights of ``dtype`` can be packed here: oneDNN present, the dtype one of
    ``DTYPES``, and a packed product equal to ``F.linear``'s (probed once per dtype)."""
    if dtype not in DTYPES:
        return False
    key = str(dtype)
    if key not in _available:
        try:
            gen = torch.Generator().manual_seed(0)
            w = torch.randn(48, 64, generator=gen).to(dtype)
            x = torch.randn(3, 64, generator=gen).to(dtype)
            _available[key] = (torch.backends.mkldnn.is_available() and
                               torch.equal(linear(x, reorder(w)), F.linear(x, w)))
        except (RuntimeError, AttributeError, NotImplementedError):
            _available[key] = False
    return _available[key]


class PackedLinear(nn.Module):
    """A bias-free Linear whose ``weight [N, K]`` is held in oneDNN's layout (module doc)."""

    def __init__(self, weight: Tensor):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.weight = nn.Parameter(weight, requires_grad=False)

    @classmethod
    def from_weight(cls, weight: Tensor) -> "PackedLinear":
        return cls(reorder(weight))

    def dense(self) -> Tensor:
        """The plain ``[N, K]`` weight."""
        return self.weight.to_dense()

    def forward(self, x: Tensor) -> Tensor:
        if torch.compiler.is_compiling():
            raise NotImplementedError(COMPILE_REFUSED)
        return linear(x, self.weight)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, oneDNN layout"
