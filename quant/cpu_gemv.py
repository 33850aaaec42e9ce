"""Our own int8 GEMV for the CPU (AVX-512 VNNI), built on first use; torch's kernel otherwise.

Why (a gap measured, not assumed): at batch 1 a decode step reads every weight once, so int8
weights should decode about twice as fast as bf16 ones. Through ``torch._weight_int8pack_mm``
they do not: at the real size on the 2-core EPYC here, one thread, int8 decoded 1.9-2.0 frames/s
reading 14-15 GB/s, while bf16 packed for oneDNN decoded 2.1 reading 31 GB/s
(``bench/bench_realsize.py``). Torch's kernel converts every code to fp32 and multiplies in
fp32: three vector instructions per 16 weights, so it is bound by its arithmetic, not by memory.
A plain AVX-512 fp32 kernel of ours did no better (5.7 against 6.7 G weights/s, dropped). (The
same approach for int4, nibbles unpacked in registers, measured only ~1.1x torch's int4 kernel,
39.5 against 36.1 G weights/s: not worth a second weight layout, so int4 keeps torch's. A second
try, 4-bit codes times int8 activations in ``vpdpbusd``, was 1.6-2.2x torch's kernel with the
weights in the L3 cache but 0.95-1.33x reading them from memory, as a decode step does: same
verdict.)

What this one does: the activations are rounded once per call to int16 with one scale per 128
columns (``x ≈ s_g · q``, |error| ≤ s_g / 2 = max|x_g| / 65534, far below bf16's own rounding
of the activations for all but values over 128x smaller than their block's largest), then each
sign-extended int8 code meets its int16 activation in ``vpdpwssd`` (32 products summed into 16
int32 lanes per instruction; a block's sum stays below 2^31), one fp32 multiply-add per block
and row, and the row scale at the end: about two instructions per 32 weights. The weight rows are
read one after another, one sequential stream (26-27 GB/s on one core here, against 15-18 GB/s
reading 4 or 8 rows side by side, and 14-16 GB/s for torch's kernel), each against every
activation row (up to ``MAX_ROWS``, kept in the cache), the output rows split over torch's
threads (``at::parallel_for``). ``y[m, n] = scale[n] · Σ_g s_g · Σ_{k∈g} q_x[m, k] · w[n, k]``.
It takes fp32 or bf16 activations and row scales and returns the activations' dtype (the bf16
result is the fp32 one rounded, bit for bit), so a bf16 step makes no cast around a call, and an
eager step calls the extension's function itself (``module()``), not the op: a decode frame
makes hundreds of these calls, and the casts and the op's dispatch were ~18 µs of each
(46 against 28 µs a call on a 1024 x 1024 weight, one thread).

Built with ``torch.utils.cpp_extension.load_inline`` (a C++ compiler and ninja, as torch.compile
on a CPU also needs) into torch's extension cache (``$TORCH_EXTENSIONS_DIR``, by default
``~/.cache/torch_extensions``), once per machine and torch version, when the first int8 model is
loaded on the CPU (never at import), and registered as the op ``sailfish::int8_gemv`` (so a
compiled decode step calls it too). Where it is not tried (not Linux x86-64, no ninja, no
compiler), cannot be built, or the CPU lacks AVX-512 VNNI, ``available()`` is False
(``unavailable()`` says why, ``prepare()`` warns once) and ``Int8Linear`` keeps torch's kernel.
``SAILFISH_CPU_KERNELS=0`` turns it off.
"""

from __future__ import annotations

import logging
import os
import platform
import shutil
import sys
import warnings

from torch import Tensor

from .ops import custom_op

ENV = "SAILFISH_CPU_KERNELS"
log = logging.getLogger("sailfish.quant")
BLOCK = 128  # activation columns per int16 scale; K must be a multiple
MAX_ROWS = 4  # activation rows per call (decode of a small batch)
NAME = "sailfish_cpu_gemv_v5"

SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <algorithm>
#include <cmath>

static constexpr int64_t BLOCK = 128;

bool supported() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vnni");
}

// The activations x [M, K] (fp32 or bf16) as int16 codes q, one scale s per 128 columns
// (x ~ s * q).
struct Activations {
  torch::Tensor codes, scales;  // own q and s
  const int16_t* q;
  const float* s;
  int64_t M, K, G;
};

template <typename T>
static void quantize_blocks(const T* xp, int16_t* qp, float* sp, int64_t blocks) {
  for (int64_t i = 0; i < blocks; ++i) {
    float blk[BLOCK];
    float amax = 0.f;
    for (int64_t j = 0; j < BLOCK; ++j) {
      blk[j] = static_cast<float>(xp[i * BLOCK + j]);
      amax = std::max(amax, std::fabs(blk[j]));
    }
    const float s = amax > 0.f ? amax / 32767.f : 1.f;
    sp[i] = s;
    const float inv = 1.f / s;
    for (int64_t j = 0; j < BLOCK; ++j)
      qp[i * BLOCK + j] = static_cast<int16_t>(std::nearbyint(blk[j] * inv));
  }
}

static Activations quantize_x(const torch::Tensor& x) {
  Activations a;
  a.M = x.size(0); a.K = x.size(1); a.G = a.K / BLOCK;
  a.codes = torch::empty({a.M, a.K}, x.options().dtype(torch::kInt16));
  a.scales = torch::empty({a.M, a.G}, x.options().dtype(torch::kFloat32));
  int16_t* qp = a.codes.data_ptr<int16_t>();
  float* sp = a.scales.data_ptr<float>();
  if (x.scalar_type() == torch::kBFloat16)
    quantize_blocks(x.data_ptr<at::BFloat16>(), qp, sp, a.M * a.G);
  else
    quantize_blocks(x.data_ptr<float>(), qp, sp, a.M * a.G);
  a.q = qp;
  a.s = sp;
  return a;
}

#define TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma")))

// Four int32 partial sums of a 128-column block: codes w0..w3 (32 int16 each) against the
// block's activations of row m.
TARGET static inline __m512i block_dot(const int16_t* xm, __m512i w0, __m512i w1, __m512i w2,
                                       __m512i w3) {
  __m512i a0 = _mm512_dpwssd_epi32(_mm512_setzero_si512(), w0,
                                   _mm512_loadu_si512(reinterpret_cast<const void*>(xm)));
  __m512i a1 = _mm512_dpwssd_epi32(_mm512_setzero_si512(), w1,
                                   _mm512_loadu_si512(reinterpret_cast<const void*>(xm + 32)));
  a0 = _mm512_dpwssd_epi32(a0, w2, _mm512_loadu_si512(reinterpret_cast<const void*>(xm + 64)));
  a1 = _mm512_dpwssd_epi32(a1, w3, _mm512_loadu_si512(reinterpret_cast<const void*>(xm + 96)));
  return _mm512_add_epi32(a0, a1);
}

// One int8 weight row [K] against the M activation rows; out[m] = sum_k w[k] * x[m, k].
template <int M>
TARGET static void row_int8(const Activations& a, const int8_t* wr, float* out) {
  __m512 accf[M];
  for (int m = 0; m < M; ++m) accf[m] = _mm512_setzero_ps();
  for (int64_t g = 0; g < a.G; ++g) {
    const int8_t* wg = wr + g * BLOCK;
    __m512i w[4];
    for (int j = 0; j < 4; ++j)
      w[j] = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wg + 32 * j)));
    for (int m = 0; m < M; ++m)
      accf[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(block_dot(a.q + m * a.K + g * BLOCK, w[0], w[1], w[2], w[3])),
                                _mm512_set1_ps(a.s[m * a.G + g]), accf[m]);
  }
  for (int m = 0; m < M; ++m) out[m] = _mm512_reduce_add_ps(accf[m]);
}

// y [M, N] in T: row(n, out) gives column n of every row, weight rows one after another (a
// single sequential stream per thread).
template <typename T, typename Row>
static void rows_out(int64_t M, int64_t N, T* yp, Row row) {
  at::parallel_for(0, N, 64, [&](int64_t n0, int64_t n1) {
    float out[4];
    for (int64_t n = n0; n < n1; ++n) {
      row(n, out);
      for (int64_t m = 0; m < M; ++m) yp[m * N + n] = static_cast<T>(out[m]);
    }
  });
}

static void check_x(const torch::Tensor& x, int64_t K) {
  TORCH_CHECK((x.dtype() == torch::kFloat32 || x.dtype() == torch::kBFloat16) && x.dim() == 2 &&
              x.is_contiguous(), "x must be a contiguous fp32 or bf16 [M, K]");
  TORCH_CHECK(x.size(1) == K && K % BLOCK == 0, "K must be the weight's, a multiple of 128");
  TORCH_CHECK(x.size(0) >= 1 && x.size(0) <= 4, "1 to 4 activation rows");
}

// y [M, N] = (x @ w^T) * scale in x's dtype: w [N, K] int8, scale [N] fp32 or bf16.
torch::Tensor int8_gemv(torch::Tensor x, torch::Tensor w, torch::Tensor scale) {
  TORCH_CHECK(w.dtype() == torch::kInt8 && w.is_contiguous() && scale.is_contiguous() &&
              (scale.dtype() == torch::kFloat32 || scale.dtype() == torch::kBFloat16) &&
              scale.numel() == w.size(0), "int8_gemv: w [N, K] int8, scale [N] fp32 or bf16");
  check_x(x, w.size(1));
  const Activations a = quantize_x(x);
  const int8_t* wp = w.data_ptr<int8_t>();
  const bool bf16_scale = scale.scalar_type() == torch::kBFloat16;
  const float* sf = bf16_scale ? nullptr : scale.data_ptr<float>();
  const at::BFloat16* sb = bf16_scale ? scale.data_ptr<at::BFloat16>() : nullptr;
  const int64_t K = a.K, N = w.size(0);
  auto row = [&](int64_t n, float* out) {
    switch (a.M) {
      case 1: row_int8<1>(a, wp + n * K, out); break;
      case 2: row_int8<2>(a, wp + n * K, out); break;
      case 3: row_int8<3>(a, wp + n * K, out); break;
      default: row_int8<4>(a, wp + n * K, out); break;
    }
    const float s = bf16_scale ? static_cast<float>(sb[n]) : sf[n];
    for (int64_t m = 0; m < a.M; ++m) out[m] *= s;
  };
  auto y = torch::empty({a.M, N}, x.options());
  if (y.scalar_type() == torch::kBFloat16)
    rows_out(a.M, N, y.data_ptr<at::BFloat16>(), row);
  else
    rows_out(a.M, N, y.data_ptr<float>(), row);
  return y;
}

"""
DECLARATIONS = ("bool supported();\n"
                "torch::Tensor int8_gemv(torch::Tensor x, torch::Tensor w, torch::Tensor scale);")
FLAGS = ["-O3", "-fopenmp"]

_state: dict = {}
STALE_LOCK_S = 600  # a build takes 20-60 s: a lock older than this was left by a killed build


def _cannot_build() -> str | None:
    """Why no build is tried here (None: try): the kernel is x86-64 AVX-512 C++ for GCC/Clang
    on Linux, built by ninja."""
    from torch.utils.cpp_extension import is_ninja_available

    if os.environ.get(ENV, "1").strip() == "0":
        return f"turned off (${ENV}=0)"
    machine = platform.machine().lower()
    if not sys.platform.startswith("linux") or machine not in ("x86_64", "amd64"):
        return f"built only on Linux x86-64 (this is {sys.platform} {platform.machine()})"
    if not is_ninja_available():
        return "ninja is not installed (pip install ninja)"
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        return "no C++ compiler (c++ or $CXX) on the PATH"
    return None


def _clear_stale_lock() -> None:
    """torch's build lock, left behind by a build that was killed, would make every later load
    wait forever: one older than ``STALE_LOCK_S`` is removed."""
    import time

    from torch.utils.cpp_extension import _get_build_directory

    lock = os.path.join(_get_build_directory(NAME, verbose=False), "lock")
    try:
        if time.time() - os.path.getmtime(lock) > STALE_LOCK_S:
            os.remove(lock)
            log.info("Sailfish: removed a stale build lock of the int8 CPU kernel (%s)", lock)
    except OSError:
        pass  # no lock (the usual case), or another process removed it first


def _build():
    """The compiled module, or None (``_state["why"]`` says why); built once per process, never
    at import, into torch's extension cache (``$TORCH_EXTENSIONS_DIR``, by default
    ``~/.cache/torch_extensions``), never into the package's folder."""
    if "module" in _state:
        return _state["module"]
    module, why = None, None
    try:
        why = _cannot_build()
        if why is None:
            module, why = _compile()
    except Exception as e:  # noqa: BLE001 - a failed build, an unwritable cache, ...
        text = str(e).strip()
        first = text.splitlines()[0][:200] if text else ""
        module, why = None, f"could not be built ({type(e).__name__}: {first})"
    _state.update(module=module, why=why)
    return module


def _compile():
    """(the module, None), or (None, why) where this CPU cannot run it: compiled by
    ``load_inline`` (its warnings held back)."""
    from torch.utils.cpp_extension import load_inline

    _clear_stale_lock()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = load_inline(NAME, cpp_sources=[DECLARATIONS, SOURCE],
                             functions=["supported", "int8_gemv"],
                             extra_cflags=FLAGS,
                             extra_ldflags=["-fopenmp"], verbose=False)
    if not module.supported():
        return None, "this CPU has no AVX-512 VNNI"
    return module, None


def prepare() -> None:
    """Build (or load from torch's cache) the kernel now, saying so the first time on this
    process; a failure is recorded (``unavailable``) and warned once."""
    if "module" in _state:
        return
    if _cannot_build() is None:
        log.info("Sailfish: loading the int8 CPU kernel (built once per machine, ~20-60 s)")
    if _build() is None and not _state["why"].startswith("turned off"):
        warnings.warn(f"Sailfish's int8 CPU kernel is not used: {_state['why']}; int8 decodes "
                      "through torch's kernel (about half as fast)")


def unavailable() -> str | None:
    """Why the kernel does not run here (None: it does); builds it on the first call."""
    _build()
    return _state["why"]


def available() -> bool:
    return _build() is not None


def module():
    """The built extension (None where it does not run): its functions called directly, as
    an eager decode step does, skip the custom op's dispatch."""
    return _build()


def fits(x_rows: int, in_features: int) -> bool:
    """Whether the kernel takes ``x_rows`` activation rows of ``in_features`` columns."""
    return 0 < x_rows <= MAX_ROWS and in_features % BLOCK == 0


def _run(x: Tensor, weight: Tensor, scale: Tensor) -> Tensor:
    return _build().int8_gemv(x, weight, scale)


def _fake(x: Tensor, weight: Tensor, scale: Tensor) -> Tensor:
    return x.new_empty(x.shape[0], weight.shape[0])


# ``x [M, K]`` (fp32 or bf16, contiguous) times the int8 ``weight [N, K]``, row ``scale [N]``
# (fp32 or bf16) → ``[M, N]`` in x's dtype (module doc). Call only where ``available()`` and
# ``fits``; outside a compiled graph ``module().int8_gemv`` is the same function without the
# op's dispatch.
int8_gemv = custom_op("int8_gemv", _run, _fake)
