"""One kernel for each small piece of a layer: RMSNorm (with the residual add before it),
QK-norm + RoPE, SiLU·mul.

At batch 1 a decode frame is launch-bound: each of these pieces is 3-10 ATen kernels (a norm
is a cast, a square, a mean, an add, a rsqrt, a product, a cast and the weight), so the frame's
~70 layer passes ran ~4,500 kernels for ~370 matrix products. Each piece here is one op,
``torch.ops.sailfish.<name>``: a Triton kernel on CUDA (when Triton imports), the reference
formula in ATen elsewhere. The op is opaque to ``torch.compile`` (a fake implementation gives
its shapes), so a compiled frame calls the same kernel.

Numerics are the reference's roundings, step by step:

* ``rms_norm(x, w)``: ``(x32 * rsqrt(mean(x32²) + eps)).to(dtype) * w`` (the weight applied
  after the cast, rounded again: fish-speech's ``RMSNorm``); ``add_rms_norm`` first forms
  ``h = x + d`` rounded to the dtype, and returns ``h`` and its norm;
* ``qk_rope``: QK-norm as ``torch.nn.RMSNorm`` (weight inside, one rounding), then the pairs
  rotated in fp32 by the bf16-rounded table (``x0*cos - x1*sin``, ``x0*sin + x1*cos``: each
  product and the sum rounded in fp32, no fused multiply-add), cast back;
* ``silu_mul(a, b)``: ``silu(a)`` rounded to the dtype, times ``b``, rounded.

The Triton kernels keep those roundings (``mul_rn``/``add_rn`` where a compiler would fuse a
multiply-add); only the order of the norm's sum of squares differs from ATen's (as it differs
between any two devices). ``tests/test_fused.py`` checks them against the ATen formula under
``TRITON_INTERPRET=1``; on the CPU the ops run the ATen formula, bit for bit what the model ran
before them.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import Tensor

try:
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice
except ImportError:  # the ops run the ATen formula
    triton = tl = libdevice = None

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # Triton's CPU interpreter (tests)


def triton_runs(t: Tensor) -> bool:
    """Whether the Triton kernel runs on ``t``: CUDA with Triton, or the interpreter (tests)."""
    return triton is not None and (t.is_cuda or (INTERPRETED and t.device.type == "cpu"))


# ------------------------------------------------------------------ the reference formulas
def rms_norm_reference(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """fish-speech's RMSNorm: normalise in fp32, cast back, then scale by the weight.
    ``F.rms_norm`` of the fp32 input is bit-equal to ``x * rsqrt(mean(x²) + eps)``."""
    return F.rms_norm(x.float(), (x.shape[-1],), None, eps).type_as(x) * weight


def qk_rope_reference(qk: Tensor, q_weight: Tensor | None, k_weight: Tensor | None,
                      rotation: Tensor, heads: int, eps: float) -> Tensor:
    """``qk [B, S, H + Hkv, Dh]`` (q heads first): QK-norm (when weights are given) and RoPE by
    ``rotation [B or 1, S, Dh/2, 2, 2]``; returns a new ``[B, S, H + Hkv, Dh]``."""
    if q_weight is not None:
        D = qk.shape[-1]
        qk = torch.cat([F.rms_norm(qk[:, :, :heads], (D,), q_weight, eps),
                        F.rms_norm(qk[:, :, heads:], (D,), k_weight, eps)], dim=2)
    pairs = qk.unflatten(-1, (-1, 2)).unsqueeze(-1)  # [B, S, H, Dh/2, 2, 1]
    # fp32 always: the table's values are bf16-rounded, so a model cast whole to bf16 (its
    # buffers too) rotates exactly as one loaded in bf16; .float() is free on an fp32 table
    rotated = (pairs * rotation.float().unsqueeze(2)).sum(-2)
    return rotated.flatten(-2).to(qk.dtype)


def write_cache(k_cache: Tensor, v_cache: Tensor, slots: Tensor | None, start: int, k: Tensor,
                v: Tensor) -> None:
    """Store ``k, v [B, Hkv, S, Dh]`` at ``slots [B, S]`` (per row) or, without, at the static
    slots ``start .. start + S - 1``."""
    if slots is None:
        k_cache[:, :, start:start + k.shape[2]] = k
        v_cache[:, :, start:start + k.shape[2]] = v
        return
    index = slots[:, None, :, None].expand(k.shape)  # row b's tokens go to slots[b]
    k_cache.scatter_(2, index, k)
    v_cache.scatter_(2, index, v)


def qk_rope_store_reference(qkv: Tensor, q_weight: Tensor | None, k_weight: Tensor | None,
                            rotation: Tensor, heads: int, eps: float, k_cache: Tensor,
                            v_cache: Tensor, slots: Tensor | None, start: int) -> Tensor:
    """``qkv [B, S, H + 2 Hkv, Dh]``: QK-norm and RoPE of q and k, k and v stored in the
    caches (``write_cache``); returns q ``[B, S, H, Dh]``."""
    kv = (qkv.shape[2] - heads) // 2
    qk = qk_rope_reference(qkv[:, :, :heads + kv], q_weight, k_weight, rotation, heads, eps)
    write_cache(k_cache, v_cache, slots, start, qk[:, :, heads:].transpose(1, 2),
                qkv[:, :, heads + kv:].transpose(1, 2))
    return qk[:, :, :heads].contiguous()


def silu_mul_reference(a: Tensor, b: Tensor) -> Tensor:
    return F.silu(a) * b


# ------------------------------------------------------------------ Triton kernels
if triton is not None:
    @triton.jit
    def _norm_kernel(x_ptr, d_ptr, w_ptr, h_ptr, y_ptr, D, eps, HAS_ADD: tl.constexpr,
                     BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        live = cols < D
        x = tl.load(x_ptr + row * D + cols, mask=live, other=0.0)
        if HAS_ADD:  # h = x + d, rounded to the dtype
            d = tl.load(d_ptr + row * D + cols, mask=live, other=0.0)
            x = (x.to(tl.float32) + d.to(tl.float32)).to(x.dtype)
            tl.store(h_ptr + row * D + cols, x, mask=live)
        xf = x.to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(xf * xf, axis=0) / D + eps)
        normed = (xf * rstd).to(x.dtype).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=live, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * D + cols, (normed * w).to(y_ptr.dtype.element_ty), mask=live)

    @triton.jit
    def _mul(a, b, EXACT: tl.constexpr):
        if EXACT:  # no contraction into a fused multiply-add
            return libdevice.mul_rn(a, b)
        return a * b

    @triton.jit
    def _add(a, b, EXACT: tl.constexpr):
        if EXACT:
            return libdevice.add_rn(a, b)
        return a + b

    @triton.jit
    def _qk_rope_kernel(qk_ptr, stride_b, stride_s, stride_h, qw_ptr, kw_ptr, rot_ptr,
                        rot_stride_b, out_ptr, S, HEADS, QHEADS, eps, k_ptr, v_ptr, cache_b,
                        cache_h, cache_l, slots_ptr, start, HAS_NORM: tl.constexpr,
                        HALF: tl.constexpr, EXACT: tl.constexpr, STORE: tl.constexpr,
                        HAS_SLOTS: tl.constexpr):
        # One head of one position of one row. HEADS = H + Hkv rotated heads; with STORE the
        # Hkv value heads after them too, and k, v go to the caches (q alone to ``out``).
        pid = tl.program_id(0)
        ALL = HEADS
        if STORE:
            ALL = 2 * HEADS - QHEADS
        head = pid % ALL
        s = (pid // ALL) % S
        b = pid // (ALL * S)
        i = tl.arange(0, HALF)
        base = qk_ptr + b * stride_b + s * stride_s + head * stride_h
        x0 = tl.load(base + 2 * i)
        x1 = tl.load(base + 2 * i + 1)
        dtype = x0.dtype
        slot = start + s
        if HAS_SLOTS:
            slot = tl.load(slots_ptr + b * S + s)
        if head >= HEADS:  # a value head (STORE): stored as it is
            dst = v_ptr + b * cache_b + (head - HEADS) * cache_h + slot * cache_l
            tl.store(dst + 2 * i, x0)
            tl.store(dst + 2 * i + 1, x1)
        else:
            if HAS_NORM:
                f0, f1 = x0.to(tl.float32), x1.to(tl.float32)
                rstd = 1.0 / tl.sqrt((tl.sum(f0 * f0, axis=0) + tl.sum(f1 * f1, axis=0))
                                     / (2 * HALF) + eps)
                if head < QHEADS:
                    w0, w1 = tl.load(qw_ptr + 2 * i), tl.load(qw_ptr + 2 * i + 1)
                else:
                    w0, w1 = tl.load(kw_ptr + 2 * i), tl.load(kw_ptr + 2 * i + 1)
                x0 = (f0 * rstd * w0.to(tl.float32)).to(dtype)
                x1 = (f1 * rstd * w1.to(tl.float32)).to(dtype)
            f0, f1 = x0.to(tl.float32), x1.to(tl.float32)
            rot = rot_ptr + b * rot_stride_b + s * (HALF * 4) + 4 * i  # [[c, s], [-s, c]]
            c, sn = tl.load(rot), tl.load(rot + 1)
            neg = tl.load(rot + 2)
            y0 = _add(_mul(f0, c, EXACT), _mul(f1, neg, EXACT), EXACT).to(dtype)
            y1 = _add(_mul(f0, sn, EXACT), _mul(f1, c, EXACT), EXACT).to(dtype)
            if STORE and head >= QHEADS:
                dst = k_ptr + b * cache_b + (head - QHEADS) * cache_h + slot * cache_l
            else:
                dst = out_ptr + ((b * S + s) * ALL + head) * (2 * HALF)
                if STORE:
                    dst = out_ptr + ((b * S + s) * QHEADS + head) * (2 * HALF)
            tl.store(dst + 2 * i, y0)
            tl.store(dst + 2 * i + 1, y1)

    @triton.jit
    def _silu_mul_kernel(a_ptr, b_ptr, y_ptr, H, stride_a, stride_b, BLOCK: tl.constexpr):
        row = tl.program_id(1)  # rows of a and b may be strided (the halves of w13's output)
        cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        live = cols < H
        a = tl.load(a_ptr + row * stride_a + cols, mask=live, other=0.0)
        b = tl.load(b_ptr + row * stride_b + cols, mask=live, other=0.0)
        af = a.to(tl.float32)
        silu = (af / (1.0 + tl.exp(-af))).to(a.dtype).to(tl.float32)
        tl.store(y_ptr + row * H + cols, (silu * b.to(tl.float32)).to(a.dtype), mask=live)


def _norm_launch(x: Tensor, delta: Tensor | None, weight: Tensor, eps: float):
    D = x.shape[-1]
    x = x.contiguous()
    h = torch.empty_like(x) if delta is not None else x
    y = torch.empty(x.shape, dtype=torch.promote_types(x.dtype, weight.dtype), device=x.device)
    _norm_kernel[(x.numel() // D,)](x, x if delta is None else delta.contiguous(), weight, h, y,
                                    D, eps, HAS_ADD=delta is not None,
                                    BLOCK=triton.next_power_of_2(D))
    return h, y


# ------------------------------------------------------------------ the ops
def _rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    if triton_runs(x):
        return _norm_launch(x, None, weight, eps)[1]
    return rms_norm_reference(x, weight, eps)


def _add_rms_norm(x: Tensor, delta: Tensor, weight: Tensor, eps: float
                  ) -> tuple[Tensor, Tensor]:
    if triton_runs(x):
        return _norm_launch(x, delta, weight, eps)
    h = x + delta
    return h, rms_norm_reference(h, weight, eps)


def _rope_launch(qkv: Tensor, q_weight: Tensor | None, k_weight: Tensor | None,
                 rotation: Tensor, heads: int, rotated: int, eps: float, out: Tensor,
                 store: tuple | None) -> None:
    B, S, _, Dh = qkv.shape
    rotation = rotation.expand(B, *rotation.shape[1:]) if rotation.shape[0] == 1 else rotation
    if rotation.stride()[1:] != (Dh * 2, 4, 2, 1):
        rotation = rotation.contiguous()
    norm = q_weight is not None
    k_cache, v_cache, slots, start = store or (out, out, None, 0)
    programs = B * S * (qkv.shape[2] if store else rotated)
    _qk_rope_kernel[(programs,)](
        qkv, qkv.stride(0), qkv.stride(1), qkv.stride(2), q_weight if norm else qkv,
        k_weight if norm else qkv, rotation, rotation.stride(0), out, S, rotated, heads, eps,
        k_cache, v_cache, k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        out if slots is None else slots, start, HAS_NORM=norm, HALF=Dh // 2,
        EXACT=not INTERPRETED, STORE=store is not None, HAS_SLOTS=slots is not None)


def _kernel_takes(qkv: Tensor, *caches: Tensor) -> bool:
    return (triton_runs(qkv) and qkv.stride(-1) == 1
            and all(c.stride(-1) == 1 and c.stride() == caches[0].stride() for c in caches))


def _qk_rope(qk: Tensor, q_weight: Tensor | None, k_weight: Tensor | None, rotation: Tensor,
             heads: int, eps: float) -> Tensor:
    if not _kernel_takes(qk):
        return qk_rope_reference(qk, q_weight, k_weight, rotation, heads, eps)
    out = torch.empty(qk.shape, dtype=qk.dtype, device=qk.device)
    _rope_launch(qk, q_weight, k_weight, rotation, heads, qk.shape[2], eps, out, None)
    return out


def _qk_rope_store(qkv: Tensor, q_weight: Tensor | None, k_weight: Tensor | None,
                   rotation: Tensor, heads: int, eps: float, k_cache: Tensor, v_cache: Tensor,
                   slots: Tensor | None, start: int) -> Tensor:
    if not _kernel_takes(qkv, k_cache, v_cache):
        return qk_rope_store_reference(qkv, q_weight, k_weight, rotation, heads, eps, k_cache,
                                       v_cache, slots, start)
    B, S, _, Dh = qkv.shape
    kv = (qkv.shape[2] - heads) // 2
    out = torch.empty(B, S, heads, Dh, dtype=qkv.dtype, device=qkv.device)
    slots = None if slots is None else slots.contiguous()
    _rope_launch(qkv, q_weight, k_weight, rotation, heads, heads + kv, eps, out,
                 (k_cache, v_cache, slots, start))
    return out


def _silu_mul(a: Tensor, b: Tensor) -> Tensor:
    if not triton_runs(a):
        return silu_mul_reference(a, b)
    H = a.shape[-1]
    a2, b2 = _rows(a, H), _rows(b, H)  # [rows, H], each row's H values contiguous
    y = torch.empty(a.shape, dtype=a.dtype, device=a.device)
    block = min(1024, triton.next_power_of_2(H))
    _silu_mul_kernel[(triton.cdiv(H, block), a2.shape[0])](a2, b2, y, H, a2.stride(0),
                                                            b2.stride(0), BLOCK=block)
    return y


def _rows(t: Tensor, width: int) -> Tensor:
    """``t`` as ``[rows, width]`` rows of contiguous values (a view where the strides allow:
    the halves of a ``w13`` output are)."""
    if t.stride(-1) == 1:
        try:
            return t.view(-1, width)
        except RuntimeError:
            pass
    return t.contiguous().view(-1, width)


def _rms_norm_fake(x, weight, eps):
    return torch.empty(x.shape, dtype=torch.promote_types(x.dtype, weight.dtype),
                       device=x.device)


def _add_rms_norm_fake(x, delta, weight, eps):
    return torch.empty_like(x), _rms_norm_fake(x, weight, eps)


def _qk_rope_fake(qk, q_weight, k_weight, rotation, heads, eps):
    return torch.empty(qk.shape, dtype=qk.dtype, device=qk.device)


def _silu_mul_fake(a, b):
    return torch.empty(a.shape, dtype=a.dtype, device=a.device)


def _qk_rope_store_fake(qkv, q_weight, k_weight, rotation, heads, eps, k_cache, v_cache, slots,
                        start):
    return qkv.new_empty(qkv.shape[0], qkv.shape[1], heads, qkv.shape[3])


# name, the function, its fake (shapes for torch.compile), the arguments it writes
_OPS = (("rms_norm", _rms_norm, _rms_norm_fake, ()),
        ("add_rms_norm", _add_rms_norm, _add_rms_norm_fake, ()),
        ("qk_rope", _qk_rope, _qk_rope_fake, ()),
        ("silu_mul", _silu_mul, _silu_mul_fake, ()),
        ("qk_rope_store", _qk_rope_store, _qk_rope_store_fake, ("k_cache", "v_cache")))


def _register():
    """The ``torch.ops.sailfish`` ops, each defined once per process (the pack may be imported
    under two package names: ComfyUI's and the tests'; defining one again would leave the
    first copy's handle dangling). ``quant/ops.py`` does the same for quant's ops: the engine
    may not import quant."""
    ops = torch.ops.sailfish
    for name, function, fake, mutates in _OPS:
        try:
            getattr(ops, name)
        except (AttributeError, RuntimeError):
            op = torch.library.custom_op(f"sailfish::{name}", function, mutates_args=mutates)
            op.register_fake(fake)
    return ops.rms_norm, ops.add_rms_norm, ops.qk_rope, ops.silu_mul, ops.qk_rope_store


rms_norm_op, add_rms_norm_op, qk_rope_op, silu_mul_op, qk_rope_store_op = _register()

# ``SAILFISH_FUSED=all``: through the ops on every device (to run the parity tests that way)
_EVERYWHERE = [os.environ.get("SAILFISH_FUSED") == "all"]


class everywhere:
    """Route through the ops on every device (on the CPU they run the ATen formula): what the
    kernel counter (``bench/count_ops.py``) counts as CUDA runs it, and what tests check."""

    def __enter__(self):
        self.before, _EVERYWHERE[0] = _EVERYWHERE[0], True

    def __exit__(self, *exc):
        _EVERYWHERE[0] = self.before


def routed(t: Tensor) -> bool:
    """Whether ``t``'s pieces go through the ops: on CUDA (one kernel each), elsewhere only
    inside ``everywhere`` (on a CPU the ATen formula runs directly, without an op's call
    overhead; the same numbers)."""
    return t.is_cuda or _EVERYWHERE[0]


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    return rms_norm_op(x, weight, eps) if routed(x) else rms_norm_reference(x, weight, eps)


def add_rms_norm(x: Tensor, delta: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """``h = x + delta`` and ``rms_norm(h)``."""
    if routed(x):
        return add_rms_norm_op(x, delta, weight, eps)
    h = x + delta
    return h, rms_norm_reference(h, weight, eps)


def qk_rope(qk: Tensor, q_weight: Tensor | None, k_weight: Tensor | None, rotation: Tensor,
            heads: int, eps: float) -> Tensor:
    if routed(qk):
        return qk_rope_op(qk, q_weight, k_weight, rotation, heads, eps)
    return qk_rope_reference(qk, q_weight, k_weight, rotation, heads, eps)


def qk_rope_store(qkv: Tensor, q_weight: Tensor | None, k_weight: Tensor | None,
                  rotation: Tensor, heads: int, eps: float, k_cache: Tensor, v_cache: Tensor,
                  slots: Tensor | None, start: int = 0) -> Tensor:
    """``qk_rope`` of ``qkv [B, S, H + 2 Hkv, Dh]``'s q and k, k and v written into the caches
    (``write_cache``) in the same kernel; returns q ``[B, S, H, Dh]``."""
    if routed(qkv):
        return qk_rope_store_op(qkv, q_weight, k_weight, rotation, heads, eps, k_cache,
                                v_cache, slots, start)
    return qk_rope_store_reference(qkv, q_weight, k_weight, rotation, heads, eps, k_cache,
                                   v_cache, slots, start)


def silu_mul(a: Tensor, b: Tensor) -> Tensor:
    return silu_mul_op(a, b) if routed(a) else silu_mul_reference(a, b)
