"""``engine/fused.py``: one op per small piece of a layer, the reference's roundings.

On the CPU the ops run the ATen formula; these tests hold it to the formulas the model ran
before (bit for bit), hold a generation through the ops (as CUDA runs them) to one without,
and run the Triton kernels in Triton's interpreter against the formula."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fish_core.engine import fused
from fish_core.engine.layers import rope_rotations, rope_table
from fish_core.engine.rows import generate
from fish_core.engine.runner import Engine
from fish_core.loading.checkpoint import load_model
from fish_core.params import SamplingParams

ROOT = Path(__file__).resolve().parents[1]
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def old_rms_norm(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight


def old_rope(x, table):
    pairs = x.float().reshape(*x.shape[:-1], -1, 2)
    cos, sin = table[..., 0].unsqueeze(2), table[..., 1].unsqueeze(2)
    x0, x1 = pairs[..., 0], pairs[..., 1]
    rotated = torch.stack([x0 * cos - x1 * sin, x1 * cos + x0 * sin], dim=-1)
    return rotated.flatten(3).type_as(x)


def data(*shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * 3).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width", [16, 64, 2560])
def test_rms_norm_is_the_reference_formula_bit_for_bit(dtype, width):
    for seed in range(5):
        x, w = data(2, 3, width, dtype=dtype, seed=seed), data(width, dtype=dtype, seed=seed + 9)
        want = old_rms_norm(x, w, 1e-6)
        assert torch.equal(fused.rms_norm_reference(x, w, 1e-6), want)
        with fused.everywhere():
            assert torch.equal(fused.rms_norm(x, w, 1e-6), want)
            d = data(2, 3, width, dtype=dtype, seed=seed + 20)
            h, normed = fused.add_rms_norm(x, d, w, 1e-6)
            assert torch.equal(h, x + d) and torch.equal(normed, old_rms_norm(x + d, w, 1e-6))


@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_is_the_reference_rotation_bit_for_bit(dtype):
    """The rotation as one product and a sum of two equals the reference's stack of
    ``x0*cos - x1*sin`` and ``x1*cos + x0*sin`` in fp32, with QK-norm before it too."""
    S, H, Dh = 7, 5, 16
    table = rope_table(64, Dh, 1e6)[20:20 + S][None]
    rotation = rope_rotations(64, Dh, 1e6)[20:20 + S][None]
    assert torch.equal(rope_rotations(S, Dh, 1e6, start=20), rotation[0])
    x = data(2, S, H, Dh, dtype=dtype)
    with fused.everywhere():
        assert torch.equal(fused.qk_rope(x, None, None, rotation, H, 0.0), old_rope(x, table))
        qw, kw = data(Dh, dtype=dtype, seed=1), data(Dh, dtype=dtype, seed=2)
        normed = torch.cat([torch.nn.functional.rms_norm(x[:, :, :3], (Dh,), qw, 1e-6),
                            torch.nn.functional.rms_norm(x[:, :, 3:], (Dh,), kw, 1e-6)], 2)
        assert torch.equal(fused.qk_rope(x, qw, kw, rotation, 3, 1e-6), old_rope(normed, table))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_and_kv_store_equal_rope_then_the_cache_write(dtype):
    """``qk_rope_store`` (one kernel on CUDA) = QK-norm + RoPE, then the KV write by slots
    (per row) or from a static start."""
    B, S, H, Hkv, Dh, L = 2, 3, 4, 2, 16, 12
    qkv = data(B, S, H + 2 * Hkv, Dh, dtype=dtype)
    rotation = rope_rotations(L, Dh, 1e6)[torch.tensor([[3, 4, 5], [8, 9, 10]])]
    qw, kw = data(Dh, dtype=dtype, seed=1), data(Dh, dtype=dtype, seed=2)
    for slots, start in ((torch.tensor([[3, 4, 5], [8, 9, 10]]), 0), (None, 2)):
        caches = [torch.zeros(B, Hkv, L, Dh, dtype=dtype) for _ in range(4)]
        with fused.everywhere():
            q = fused.qk_rope_store(qkv, qw, kw, rotation, H, 1e-6, caches[0], caches[1],
                                    slots, start)
        qk = fused.qk_rope_reference(qkv[:, :, :H + Hkv], qw, kw, rotation, H, 1e-6)
        k, v = qk[:, :, H:].transpose(1, 2), qkv[:, :, H + Hkv:].transpose(1, 2)
        for b in range(B):
            at = slots[b] if slots is not None else torch.arange(start, start + S)
            caches[2][b][:, at], caches[3][b][:, at] = k[b], v[b]
        assert torch.equal(q, qk[:, :, :H])
        assert torch.equal(caches[0], caches[2]) and torch.equal(caches[1], caches[3])


def test_silu_mul_is_the_reference():
    a, b = data(3, 40, dtype=torch.bfloat16), data(3, 40, dtype=torch.bfloat16, seed=1)
    with fused.everywhere():
        assert torch.equal(fused.silu_mul(a, b), torch.nn.functional.silu(a) * b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_generation_through_the_ops_is_the_generation_without(ckpt_dir, dtype):
    """Greedy and seeded, the frames through the ops (CUDA's route) equal the plain ones (the
    route the parity tests hold to the goldens)."""
    engine = Engine(load_model(ckpt_dir, dtype=dtype))
    c = engine.config
    prompt = torch.zeros(1 + c.num_codebooks, 12, dtype=torch.long)
    prompt[0] = torch.arange(12) % c.semantic_start_token_id
    for params, seed in ((SamplingParams(max_new_tokens=6, temperature=0.01, top_k=1), 0),
                         (SamplingParams(max_new_tokens=6), 42)):
        plain = generate(engine, prompt, params, seed=seed, stop_on_eos=False)[0].columns
        with fused.everywhere():
            routed = generate(engine, prompt, params, seed=seed, stop_on_eos=False)[0].columns
        assert torch.equal(plain, routed)


def test_w13_joins_w1_and_w3_with_the_same_numbers(ckpt_dir):
    """``quant.join_rows`` for each kind the loader joins on CUDA: the joined layer holds both
    layers' rows (and scales), so it computes their outputs side by side; a model with joined
    SwiGLUs generates what the model without does."""
    import quant
    from fish_core.loading.checkpoint import join_feed_forwards

    g = torch.Generator().manual_seed(0)
    w1, w3 = torch.randn(48, 256, generator=g), torch.randn(48, 256, generator=g)
    x = torch.randn(2, 256, generator=g)
    plain = [torch.nn.Linear(256, 48, bias=False) for _ in range(2)]
    for layer, w in zip(plain, (w1, w3)):
        layer.weight = torch.nn.Parameter(w, requires_grad=False)
    kinds = {"linear": plain,
             "fp8": [quant.FP8Linear.from_weight(w) for w in (w1, w3)],
             "int8": [quant.Int8Linear.from_weight(w, torch.float32) for w in (w1, w3)],
             "int4": [quant.Int4GemvLinear.from_weight(w, torch.float32) for w in (w1, w3)]}
    for name, (a, b) in kinds.items():
        joined = quant.join_rows(a, b)
        assert type(joined) is type(a), name
        if name == "int4":  # its kernel runs on CUDA (or the interpreter): compare the weight
            assert torch.equal(joined.dequantized(torch.float32), torch.cat(
                [a.dequantized(torch.float32), b.dequantized(torch.float32)])), name
        else:
            assert torch.equal(joined(x), torch.cat([a(x), b(x)], -1)), name
    with torch.device("meta"):
        torch_linear = torch.nn.Linear(64, 48)  # a bias: not joined
    assert quant.join_rows(torch_linear, torch_linear) is None

    engine = Engine(load_model(ckpt_dir, dtype=torch.float32))
    c = engine.config
    prompt = torch.zeros(1 + c.num_codebooks, 12, dtype=torch.long)
    prompt[0] = torch.arange(12) % c.semantic_start_token_id
    params = SamplingParams(max_new_tokens=6)
    before = generate(engine, prompt, params, seed=42, stop_on_eos=False)[0].columns
    assert join_feed_forwards(engine.model) == c.text.n_layer + c.fast.n_layer
    engine.follow_model()
    assert torch.equal(generate(engine, prompt, params, seed=42, stop_on_eos=False)[0].columns,
                       before)


INTERPRETER_CHECK = r"""
import json, torch
import torch.nn.functional as F
from fish_core.engine import fused
from fish_core.engine.layers import rope_rotations
out = {}
def ulps(got, want):
    got, want = got.double(), want.double()
    return float((got - want).abs().max() / want.abs().max())
for dtype in (torch.float32, torch.bfloat16):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(3, 2, 100, generator=g) * 3).to(dtype)
    d = torch.randn(3, 2, 100, generator=g).to(dtype)
    w = torch.randn(100, generator=g).to(dtype)
    out[f"rms_norm {dtype}"] = ulps(fused._rms_norm(x, w, 1e-6),
                                    fused.rms_norm_reference(x, w, 1e-6))
    h, n = fused._add_rms_norm(x, d, w, 1e-6)
    out[f"add {dtype}"] = ulps(h, x + d)
    out[f"add_rms_norm {dtype}"] = ulps(n, fused.rms_norm_reference(x + d, w, 1e-6))
    qkv = (torch.randn(2, 3, 8, 16, generator=g) * 2).to(dtype)
    qk = qkv[:, :, :6]
    rot = rope_rotations(40, 16, 1e6)[torch.tensor([[3, 4, 5], [30, 31, 32]])]
    out[f"rope {dtype}"] = ulps(fused._qk_rope(qk, None, None, rot, 4, 0.0),
                                fused.qk_rope_reference(qk, None, None, rot, 4, 0.0))
    qw, kw = torch.randn(16, generator=g).to(dtype), torch.randn(16, generator=g).to(dtype)
    out[f"qk_rope {dtype}"] = ulps(fused._qk_rope(qk, qw, kw, rot[:1], 4, 1e-6),
                                   fused.qk_rope_reference(qk, qw, kw, rot[:1], 4, 1e-6))
    for norm, slots, start in ((True, torch.tensor([[5, 9, 2], [0, 1, 7]]), 0),
                               (False, None, 4)):
        want, got = [torch.zeros(2, 2, 12, 16, dtype=dtype) for _ in range(4)], None
        ws = (qw, kw) if norm else (None, None)
        q = fused.qk_rope_store_reference(qkv, *ws, rot, 4, 1e-6, want[0], want[1], slots,
                                          start)
        got = fused._qk_rope_store(qkv, *ws, rot, 4, 1e-6, want[2], want[3], slots, start)
        out[f"store q {norm} {dtype}"] = ulps(got, q)
        out[f"store k {norm} {dtype}"] = ulps(want[2], want[0])
        out[f"store v {norm} {dtype}"] = ulps(want[3], want[1])
    a, b = torch.randn(3, 1500, generator=g).to(dtype), torch.randn(3, 1500, generator=g).to(dtype)
    out[f"silu_mul {dtype}"] = ulps(fused._silu_mul(a, b), fused.silu_mul_reference(a, b))
    y = torch.randn(2, 3, 3000, generator=g).to(dtype)  # w13's output: strided halves
    a, b = y[..., :1500], y[..., 1500:]
    out[f"silu_mul w13 {dtype}"] = ulps(fused._silu_mul(a, b), fused.silu_mul_reference(a, b))
print(json.dumps(out))
"""


def test_triton_kernels_keep_the_reference_roundings():
    """Each kernel in Triton's interpreter against the ATen formula: in fp32 exact for the
    residual add and RoPE, within fp32 rounding where the sum of squares (norms) or ``exp``
    (SiLU) is computed in another order or by another library; in bf16 within a rounding or
    two of the dtype (the interpreter casts fp32 to bf16 by its own rule, not the GPU's
    round-to-nearest-even)."""
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, "-c", INTERPRETER_CHECK], cwd=ROOT, env=env,
                         check=False, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout.splitlines()[-1])
    assert len(out) == 26
    for case, err in out.items():
        if "bfloat16" in case:
            assert err <= 2.0 ** -6, (case, err)
        elif case.startswith(("add ", "rope ", "store v")) or (
                case.startswith(("store q False", "store k False"))):
            assert err == 0.0, case
        else:
            assert err <= 1e-6, (case, err)
