"""Whether the decode step runs compiled: ``compile`` is ``"off"`` (``False``), ``"on"``
(``True``) or ``"auto"``.

On CUDA, compile wins (fused kernels, then one CUDA graph per frame). On a CPU it can lose
(an AVX-512 EPYC without AMX, medium config, bf16: 14.9 frames/s compiled against 17.9 eager).
What inductor makes of one decode frame (medium config, bf16, read from its generated code on
torch 2.13): 246 matrix products left to ATen/oneDNN exactly as eager runs them (so the big
kernels are the same), 36 attention calls, and 206 calls of 43 fused C++ kernels that open 359
OpenMP parallel regions per frame, unconditionally and over every thread
(``torch._inductor.config.cpp.threads = -1``), the RMSNorm means included as per-thread
partial sums over a 1024-wide row. Eager runs those small element-wise ops and reductions on
the calling thread (ATen parallelises only above 32768 elements). At batch 1 each of those
ops is microseconds of work, so on a CPU with many cores the fork/join of ~360 regions per
frame (tens of microseconds each when the threads span chiplets) can cost more than fusing
saves: the 11 ms per frame between the two EPYC figures is ~30 µs per region. That is the
likely cause, read from the code, not measured on an EPYC (none was at hand). On the shared
2-core machine it was read on, a profile of 8 frames under load showed the same shape: the
fused kernels took ~390 ms per frame where eager's small ops took ~160 ms (a region waits for
its slowest thread, and a thread the OS has not scheduled stalls it), while the matrix
products were alike; frame rates there swung 0.1-8 frames/s between runs, too noisy for a
ratio. Which side wins depends on the CPU, its core count, its load, the dtype and the model
size, so:

* ``"on"`` on a CPU compiles as asked and warns once that it may be slower, naming ``auto``;
* ``"auto"`` compiles on CUDA; on a CPU it times the compiled and the eager step on the first
  decode frame (after the compile, a few calls each, interleaved, the median compared) and
  keeps the faster (``Engine.compile_choice`` says which and why; it is also logged). The
  compile's own time is spent either way. The step is a function of its arguments plus the KV
  cache entries it writes at ``pos`` (the same ones on every call), so the frame the choice
  returns, and everything after it, is exactly what the chosen mode alone gives.
"""

from __future__ import annotations

import logging
import os
import statistics
import time
import warnings
from typing import Callable

MODES = ("off", "on", "auto")
# Inductor options of our own compile of the decode step, passed as ``torch.compile(options=)``:
# scoped to that compile, so the host's other compiles (ComfyUI, other packs) keep theirs.
# ``coordinate_descent_tuning`` is what makes Inductor decompose a one-row matmul into a fused
# multiply-and-sum (torch/_inductor/decomposition.py, ``mm``): a weight-only tensor's cast of its
# codes and its scale then fuse into one bandwidth-bound kernel, where torchao's int8 tensor
# otherwise casts its whole weight on every call. torchao sets these process-wide unless told
# not to (``set_inductor_config``), which quant.torchao_modes does, to leave the host alone.
TUNED_OPTIONS = {"coordinate_descent_tuning": True,
                 "coordinate_descent_check_all_directions": True,
                 "force_fuse_int_mm_with_mul": True}
TUNING = ("auto", "on", "off")
PROBE_CALLS = 3  # timed calls of each step (after one warm-up call each)
log = logging.getLogger("sailfish.engine")
_warned: set = set()


def compile_mode(value) -> str:
    """``compile`` as given (``True``/``False`` or a mode name) → ``"off"``, ``"on"`` or
    ``"auto"``; anything else is an error naming the field."""
    if value is None or value is False:
        return "off"
    if value is True:
        return "on"
    if isinstance(value, str) and value.strip().lower() in MODES:
        return value.strip().lower()
    raise ValueError(f"compile must be true, false or one of {', '.join(MODES)}, got {value!r}")


def compile_options(model) -> dict | None:
    """``TUNED_OPTIONS`` or None for the compile of ``model``'s decode step, as
    ``$SAILFISH_COMPILE_TUNING`` says: ``on``, ``off``, or ``auto`` (the default): on for a model
    holding tensor-subclass weights (torchao's quantized tensors rely on them), off otherwise
    (bf16 with them: measured by bench/gpu_first.py's stage bf16-compiled-tuned)."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    asked = os.environ.get("SAILFISH_COMPILE_TUNING") or "auto"
    if asked not in TUNING:
        raise ValueError(f"SAILFISH_COMPILE_TUNING must be one of {', '.join(TUNING)}, "
                         f"got {asked!r}")
    if asked == "auto":
        on = any(is_traceable_wrapper_subclass(p) for p in model.parameters())
    else:
        on = asked == "on"
    return dict(TUNED_OPTIONS) if on else None


def warn_cpu_compile(device, dtype) -> None:
    """Once per process and dtype: compile on a CPU may decode slower than eager."""
    if device.type != "cpu" or str(dtype) in _warned:
        return
    _warned.add(str(dtype))
    warnings.warn(
        f"torch.compile of the decode step on a CPU ({str(dtype).removeprefix('torch.')}) can be "
        "slower than eager (an AVX-512 EPYC decoded 14.9 frames/s compiled against 17.9 eager); "
        "compile='auto' (--compile auto) times both on the first frame and keeps the faster",
        stacklevel=3)


class MeasuredStep:
    """The ``auto`` step: on its first call (on a CPU) it times ``compiled`` against ``eager``
    on that frame, then hands ``on_choice(step or None, reason)`` the faster (``None``: eager)
    and returns that step's result."""

    def __init__(self, compiled: Callable, eager: Callable,
                 on_choice: Callable[[Callable | None, str], None], calls: int = PROBE_CALLS,
                 clock: Callable[[], float] = time.perf_counter):
        self.compiled, self.eager = compiled, eager
        self.on_choice = on_choice
        self.calls = calls
        self.clock = clock

    def __call__(self, engine, *args):
        if args[0].device.type != "cpu":
            self.on_choice(self.compiled, "compiled (not a CPU: compile is faster there)")
            return self.compiled(engine, *args)
        self.compiled(engine, *args)  # compiles
        self.eager(engine, *args)
        seconds = {self.compiled: [], self.eager: []}
        for i in range(self.calls):  # interleaved, the order alternating: noise hits both
            order = (self.compiled, self.eager) if i % 2 == 0 else (self.eager, self.compiled)
            for step in order:
                t0 = self.clock()
                step(engine, *args)
                seconds[step].append(self.clock() - t0)
        compiled_s = statistics.median(seconds[self.compiled])
        eager_s = statistics.median(seconds[self.eager])
        faster = self.compiled if compiled_s < eager_s else self.eager
        reason = (f"{'compiled' if faster is self.compiled else 'eager'}: a decode frame took "
                  f"{compiled_s * 1e3:.1f} ms compiled and {eager_s * 1e3:.1f} ms eager "
                  f"(median of {self.calls}) on this CPU")
        log.info("Sailfish: compile auto: %s", reason)
        self.on_choice(faster if faster is self.compiled else None, reason)
        return faster(engine, *args)
