"""quant/int_gemv.py and its layers on CUDA, checked without a GPU: every real S2-Pro Linear
shape through ``Int8Linear`` / ``Int4GemvLinear`` on FakeTensor ``cuda`` tensors, the int8 and
int4 Triton GEMVs (Triton's CPU interpreter, when Triton is installed) against the fp64 matmul
on the dequantized weights for every block shape, the kernel choice (``SAILFISH_INT_KERNEL``)
and the scoped Inductor options of our compile (``SAILFISH_COMPILE_TUNING``)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

import quant
from fish_core.engine import compile_choice
from fish_core.engine.config import ModelConfig
from quant import int_gemv, int_linear
from quant.convert import Converter, int_kernel
from quant.int_linear import Int4GemvLinear, Int8Linear

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests/fixtures"


def real_linear_shapes() -> set[tuple[int, int]]:
    from fish_core.loading.checkpoint import build_meta

    meta = build_meta(ModelConfig.from_file(REAL / "real-s2-config.json"), torch.bfloat16)
    return set(quant.linear_weights(meta).values())


def test_pack_unpack_round_trip_and_layout():
    g = torch.Generator().manual_seed(0)
    codes = torch.randint(0, 16, (8, 512), generator=g, dtype=torch.int32)
    packed = int_gemv.pack(codes)
    assert packed.shape == (8, 256) and packed.dtype == torch.uint8
    assert torch.equal(int_gemv.unpack(packed), codes)
    assert int(packed[3, 5]) == int(codes[3, 5]) | (int(codes[3, 256 + 5]) << 4)


def test_params_in_the_order_read_and_back():
    """``order_params`` puts the (scale, zero) of group g (low nibbles) beside that of group
    g + K / (2 GROUP) (high nibbles), rows in dim 1; ``unorder_params`` gives quantize_int4's
    layout back exactly; a layer built from either layout holds the same, and a joined pair
    of layers holds the joined rows."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(6, 4 * int_gemv.GROUP, generator=g)
    codes, params = int_linear.quantize_int4(w, torch.bfloat16)
    ordered = int_gemv.order_params(params)
    half = params.shape[0] // 2
    assert ordered.shape == (half, 6, 2, 2) and ordered.is_contiguous()
    for gp in range(half):
        for n in range(6):
            assert torch.equal(ordered[gp, n, 0], params[gp, n])
            assert torch.equal(ordered[gp, n, 1], params[gp + half, n])
    assert torch.equal(int_gemv.unorder_params(ordered), params)
    packed = int_gemv.pack(codes)
    a, b = Int4GemvLinear.holding(packed, params), Int4GemvLinear.holding(packed, ordered)
    assert torch.equal(a.scales_and_zeros, b.scales_and_zeros)
    assert (a.in_features, a.out_features) == (w.shape[1], w.shape[0])
    w_hat = ((codes.float() - 8) * params[..., 0].float().T.repeat_interleave(int_gemv.GROUP, 1)
             + params[..., 1].float().T.repeat_interleave(int_gemv.GROUP, 1))
    assert torch.equal(a.dequantized(torch.float32), w_hat)
    joined = quant.convert._join_int4_gemv(a, b)
    assert torch.equal(joined.dequantized(torch.float32), torch.cat([w_hat, w_hat]))


@pytest.mark.parametrize("rows", [1, int_gemv.MAX_ROWS, int_gemv.MAX_ROWS + 3])
def test_every_real_shape_runs_the_int_layers_on_fake_cuda(rows):
    """Decode rows go through the GEMV ops (their fake kernels check the arguments), prefill rows
    through the dequantized weight; every real Linear fits the int4 GEMV's K multiple."""
    shapes = real_linear_shapes()
    assert len(shapes) >= 4
    with FakeTensorMode():
        for n, k in sorted(shapes):
            assert int_linear.int4_gemv_fits((n, k))
            x = torch.empty(rows, 1, k, dtype=torch.bfloat16, device="cuda")
            int8 = Int8Linear.holding(torch.empty(n, k, dtype=torch.int8, device="cuda"),
                                      torch.empty(n, dtype=torch.bfloat16, device="cuda"))
            int4 = Int4GemvLinear.holding(
                torch.empty(n, k // 2, dtype=torch.uint8, device="cuda"),
                torch.empty(k // 128, n, 2, dtype=torch.bfloat16, device="cuda"))
            for layer in (int8, int4):
                y = layer(x)
                assert y.shape == (rows, 1, n) and y.dtype == torch.bfloat16
                assert y.device.type == "cuda"


def test_gemv_constraints_name_the_argument():
    with FakeTensorMode():
        x = torch.empty(1, 384, device="cuda")
        packed = torch.empty(64, 192, dtype=torch.uint8, device="cuda")
        params = torch.empty(3, 64, 2, device="cuda")
        with pytest.raises(int_gemv.GemvError, match="K = 2 × columns must be a multiple of 256"):
            int_gemv.int4_gemv(x, packed, params)
        codes = torch.empty(64, 32, dtype=torch.int8, device="cuda")
        with pytest.raises(int_gemv.GemvError, match="x: at most"):
            int_gemv.int8_gemv(torch.empty(int_gemv.MAX_ROWS + 1, 32, device="cuda"), codes,
                               torch.empty(64, device="cuda"))
        with pytest.raises(int_gemv.GemvError, match=r"scale must be a \[64\] float tensor"):
            int_gemv.int8_gemv(torch.empty(1, 32, device="cuda"), codes,
                               torch.empty(64, 1, device="cuda"))


def test_int_kernel_choice(monkeypatch):
    monkeypatch.delenv("SAILFISH_INT_KERNEL", raising=False)
    assert int_kernel("cpu") == "cpu" and int_kernel("cuda") == quant.convert.AUTO_INT_KERNEL
    monkeypatch.setenv("SAILFISH_INT_KERNEL", "triton")
    assert int_kernel("cuda") == "triton" and int_kernel("cpu") == "cpu"
    monkeypatch.setenv("SAILFISH_INT_KERNEL", "fast")
    with pytest.raises(quant.QuantizationError, match="SAILFISH_INT_KERNEL must be one of"):
        int_kernel("cuda")


def test_converter_builds_the_gemv_layers(monkeypatch):
    """The Triton kernel chosen (as SAILFISH_INT_KERNEL=triton on CUDA; here on the CPU's
    tensors, the choice patched): int4 weights become Int4GemvLinear (K a multiple of 256; else
    int8, as on the CPU) and int8 weights Int8Linear, holding int_linear's codes and parameters,
    and the planned bytes are what they hold."""
    monkeypatch.setattr(quant.convert, "int_kernel", lambda device: "triton")
    monkeypatch.setattr(quant.sizes, "int_kernel", lambda device: "triton")
    monkeypatch.setattr(int_gemv, "unavailable", lambda device: None)
    g = torch.Generator().manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 64, bias=False), nn.Linear(128, 32, bias=False))
    model = model.to(torch.bfloat16).requires_grad_(False)
    weights = [torch.randn(64, 512, generator=g), torch.randn(32, 128, generator=g)]
    names = ["0.weight", "1.weight"]
    converter = Converter("int4", "cpu", torch.bfloat16, names, pack=False)
    for name, layer, w in zip(names, model, weights):
        layer.weight = nn.Parameter(converter(name, w.bfloat16()), requires_grad=False)
    converter.finish(model)
    assert isinstance(model[0], Int4GemvLinear) and isinstance(model[1], Int8Linear)
    assert model[0].weight.shape == (64, 256) and model[0].weight.dtype == torch.uint8
    codes, params = int_linear.quantize_int4(weights[0].bfloat16(), torch.bfloat16)
    assert torch.equal(int_gemv.unpack(model[0].weight), codes)
    assert torch.equal(model[0].scales_and_zeros, int_gemv.order_params(params))
    assert torch.equal(int_gemv.unorder_params(model[0].scales_and_zeros), params)
    meta = nn.Sequential(nn.Linear(512, 64, bias=False, device="meta"),
                         nn.Linear(128, 32, bias=False, device="meta")).to(torch.bfloat16)
    assert quant.weight_bytes(model) == quant.planned_bytes(meta, "int4", device="cuda")


def test_triton_kernel_where_it_cannot_run_says_so(monkeypatch):
    monkeypatch.setenv("SAILFISH_INT_KERNEL", "triton")
    monkeypatch.setattr(int_gemv, "unavailable", lambda device: "no Triton here")
    with pytest.raises(quant.QuantizationError, match="SAILFISH_INT_KERNEL=torchao"):
        Converter("int8", "cuda", torch.bfloat16, [])


INTERPRETER_CHECK = r"""
import json, sys, torch
import torch.nn.functional as F
from quant import fp8_gemv, int_gemv, int_linear
n, k = json.loads(sys.argv[1])
g = torch.Generator().manual_seed(0)
w = torch.randn(n, k, generator=g) * torch.logspace(-3, 0, n)[:, None]
w[0] = 1.0 + 1e-4 * torch.randn(k, generator=g)  # zero / scale large: int4's folded offset
w[1, :int_gemv.GROUP] = 0.5  # a constant group
configs = [None] + [c for rows in fp8_gemv.CLASS_CONFIGS.values() for c in rows]
configs4 = [None] + [c for rows in int_gemv.INT4_CLASS_CONFIGS.values() for c in rows]
worst = {}

def relative(y, x, w_hat):
    ref = F.linear(x.double(), w_hat.double())  # fp64 matmul, dequantized weights
    slack = x.abs().double() @ w_hat.abs().double().T  # |x|·|ŵ|
    return float(((y.double() - ref).abs() / slack).max())

int8 = int_linear.Int8Linear.from_weight(w, torch.float32)
int4 = int_linear.Int4GemvLinear.from_weight(w, torch.float32)
for rows in (1, 3):
    x = torch.randn(rows, k, generator=g)
    for config in configs:
        y8 = int_gemv.int8_launch(x, int8.weight, int8.scale, config)
        worst[f"int8 {rows} {config}"] = relative(y8, x, int8.dequantized(torch.float64))
    for config in configs4:
        y4 = int_gemv.int4_launch(x, int4.weight, int4.scales_and_zeros, config)
        worst[f"int4 {rows} {config}"] = relative(y4, x, int4.dequantized(torch.float64))
# the layers: decode rows (GEMV) and prefill rows (dequantized weight), bf16 activations
x = torch.randn(2, int_gemv.MAX_ROWS + 1, k, generator=g).bfloat16()
layers = {"int8": (int8, int8._device_forward), "int4": (int4, int4)}
bf16 = {}
for name, (layer, forward) in layers.items():
    for part in (x[:1, :1], x):
        y = forward(part)
        ref = F.linear(part.double(), layer.dequantized(torch.float64))
        bf16[f"{name} {list(part.shape)}"] = [list(y.shape), str(y.dtype),
                                              float(((y.double() - ref).abs()
                                                     / ref.abs().max()).max())]
print(json.dumps({"worst": worst, "bf16": bf16}))
"""


def test_gemvs_equal_the_fp64_matmul_on_dequantized_weights(ckpt_dir):
    """Triton's interpreter runs both kernels with every block shape of both device classes.
    Sizes from the fixture: N = the FFN width, K = the model width rounded up to 256."""
    pytest.importorskip("triton")
    text = ModelConfig.from_file(ckpt_dir).text
    n, k = text.intermediate_size, -(-text.dim // 256) * 256
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, "-c", INTERPRETER_CHECK, json.dumps([n, k])], cwd=ROOT,
                         env=env, check=False, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout.splitlines()[-1])
    assert len(out["worst"]) == 2 * (2 + sum(map(len, int_gemv.fp8_gemv.CLASS_CONFIGS.values()))
                                     + sum(map(len, int_gemv.INT4_CLASS_CONFIGS.values())))
    for case, worst in out["worst"].items():
        assert worst <= 1e-5, case  # fp32 products and sums
    for case, (shape, dtype, err) in out["bf16"].items():
        assert shape[-1] == n and dtype == "torch.bfloat16", case
        assert err <= 2.0 ** -7, case  # one bf16 rounding of the output (and of x·w in prefill)


SPLIT_CHECK = r"""
import json, sys, torch
import torch.nn.functional as F
from quant import fp8_gemv, int_gemv, int_linear
n, ks = json.loads(sys.argv[1])
g = torch.Generator().manual_seed(3)
split = {kind: [c for rows in int_gemv.class_configs(kind).values() for c in rows if c[4] > 1]
         for kind in ("int8", "int4")}
worst, again = {}, {}

def relative(y, x, w_hat):
    ref = F.linear(x.double(), w_hat.double())
    return float(((y.double() - ref).abs() / (x.abs().double() @ w_hat.abs().double().T)).max())

for k in ks:
    w = torch.randn(n, k, generator=g) * torch.logspace(-3, 0, n)[:, None]
    x = torch.randn(3, k, generator=g)
    int8 = int_linear.Int8Linear.from_weight(w, torch.float32)
    int4 = int_linear.Int4GemvLinear.from_weight(w, torch.float32)
    runs = {"int8": (int_gemv.int8_launch, int8.weight, int8.scale, int8),
            "int4": (int_gemv.int4_launch, int4.weight, int4.scales_and_zeros, int4)}
    for kind, (launch, codes, params, layer) in runs.items():
        for config in split[kind]:
            for rows in (1, 3):
                y = launch(x[:rows], codes, params, config)
                case = f"{kind} {k} {rows} {config}"
                worst[case] = relative(y, x[:rows], layer.dequantized(torch.float64))
                again[case] = bool(torch.equal(y, launch(x[:rows], codes, params, config)))
left = int(sum(int(c.abs().sum()) for c in fp8_gemv._COUNTERS.values()))
print(json.dumps({"worst": worst, "again": again, "counters": left,
                  "splits": {kind: len(rows) for kind, rows in split.items()}}))
"""


def test_split_k_configs_equal_the_fp64_matmul(ckpt_dir):
    """Under Triton's interpreter, every int8 and int4 SPLIT_K > 1 configuration (1 and 3 rows):
    K = the largest BLOCK_K × SPLIT_K (every slice whole steps) and 256 columns more (short or
    empty last slices); the fp32 matmul on the dequantized weights, the same bits on a second
    call, every arrival counter back at zero. N = the fixture's model width plus 3."""
    pytest.importorskip("triton")
    n = ModelConfig.from_file(ckpt_dir).text.dim + 3
    split = {kind: [c for rows in int_gemv.class_configs(kind).values() for c in rows if c[4] > 1]
             for kind in ("int8", "int4")}
    assert all(split.values())
    k = max(c[1] * c[4] for rows in split.values() for c in rows)
    assert k % int_gemv.K_MULTIPLE == 0
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, "-c", SPLIT_CHECK,
                          json.dumps([n, [k, k + int_gemv.K_MULTIPLE]])], cwd=ROOT, env=env,
                         check=False, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout.splitlines()[-1])
    assert out["splits"] == {kind: len(rows) for kind, rows in split.items()}
    assert out["counters"] == 0
    assert len(out["worst"]) == 2 * 2 * sum(map(len, split.values()))
    for case, worst in out["worst"].items():
        assert worst <= 1e-5, case  # fp32 products and sums
    assert all(out["again"].values())


def test_tuned_choices_name_each_kernels_winner(monkeypatch):
    """The autotuner's choices as a GPU run prints them: per kernel, its key and the winning
    configuration as the config lists spell it (int4's BLOCK_K back in columns)."""
    triton = pytest.importorskip("triton")
    assert set(int_gemv.tuned_choices()) == {"fp8", "int8", "int4"}
    fp8_key = (2560, 9728, False, 1, "torch.bfloat16")
    int4_key = (2560, 9728, 1, "torch.bfloat16")
    fp8 = triton.Config({"BLOCK_N": 8, "BLOCK_K": 512, "SPLIT_K": 4}, num_warps=4, num_stages=4)
    int4 = triton.Config({"BLOCK_N": 4, "BLOCK_K": 256, "SPLIT_K": 2}, num_warps=4, num_stages=4)
    monkeypatch.setattr(int_gemv.fp8_gemv._tuned_kernel, "cache", {fp8_key: fp8})
    monkeypatch.setattr(int_gemv._int4_tuned, "cache", {int4_key: int4})
    monkeypatch.setattr(int_gemv._int8_tuned, "cache", {})
    choices = int_gemv.tuned_choices()
    assert choices["fp8"] == [{"key": [2560, 9728, False, 1, "torch.bfloat16"],
                               "config": [8, 512, 4, 4, 4]}]
    assert choices["int4"] == [{"key": [2560, 9728, 1, "torch.bfloat16"],
                                "config": [4, 512, 4, 4, 2]}]
    assert choices["int8"] == []
    assert tuple(choices["int4"][0]["config"]) in int_gemv.INT4_CLASS_CONFIGS["datacenter"]


# ---------------------------------------------------------------------------- compile options
class Wrapped(torch.Tensor):
    """A tensor subclass standing in for torchao's quantized weights."""

    @staticmethod
    def __new__(cls, inner):
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype)

    def __init__(self, inner):
        self.inner = inner

    def __tensor_flatten__(self):
        return ["inner"], None

    @staticmethod
    def __tensor_unflatten__(inner_tensors, meta, outer_size, outer_stride):
        return Wrapped(inner_tensors["inner"])

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise NotImplementedError


def test_compile_options_scoped_to_our_compile(monkeypatch):
    plain = nn.Linear(4, 4)
    wrapped = nn.Linear(4, 4)
    wrapped._parameters["weight"] = Wrapped(torch.zeros(4, 4))  # as torchao's, held as is
    monkeypatch.delenv("SAILFISH_COMPILE_TUNING", raising=False)
    assert compile_choice.compile_options(plain) is None
    options = compile_choice.compile_options(wrapped)
    assert options == compile_choice.TUNED_OPTIONS and options["coordinate_descent_tuning"]
    monkeypatch.setenv("SAILFISH_COMPILE_TUNING", "on")
    assert compile_choice.compile_options(plain) == compile_choice.TUNED_OPTIONS
    monkeypatch.setenv("SAILFISH_COMPILE_TUNING", "off")
    assert compile_choice.compile_options(wrapped) is None
    monkeypatch.setenv("SAILFISH_COMPILE_TUNING", "max")
    with pytest.raises(ValueError, match="SAILFISH_COMPILE_TUNING must be one of"):
        compile_choice.compile_options(plain)
    # the process-wide Inductor config is never touched
    import torch._inductor.config as inductor

    assert inductor.coordinate_descent_tuning is False


def test_the_engine_compiles_with_the_options(monkeypatch, ckpt_dir):
    from fish_core.engine import runner
    from fish_core.loading.checkpoint import load_model

    seen = {}

    def fake_compile(fn, **kwargs):
        seen.update(kwargs)
        return fn

    monkeypatch.setattr(runner.torch, "compile", fake_compile)
    monkeypatch.setenv("SAILFISH_COMPILE_TUNING", "on")
    model = load_model(ckpt_dir, "cpu", torch.float32)
    runner.Engine(model, compile=True)
    assert seen == {"fullgraph": True, "options": compile_choice.TUNED_OPTIONS}
