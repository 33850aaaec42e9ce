"""quant: per-row FP8 numerics, FP8Linear paths, FP8 embedding tables, FP8 checkpoints (both key
styles), export round trip, torchao modes where they run on CPU, weight bytes per mode (real
S2-Pro shapes on the meta device), and clear errors for what cannot run."""

import contextlib
import json
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import quant
from fish_core.loading.checkpoint import (CheckpointError, assign, build_meta, iter_tensors,
                                          load_model, to_hf, to_internal)
from fish_core.engine.config import ModelConfig
from fish_core.loading.export import export_fp8
from fish_core.loading.fp8_checkpoint import is_fp8_checkpoint
from fish_core.engine.runner import Engine
from fish_core.engine.rows import generate
from fish_core.params import SamplingParams
from quant import fp8 as fp8mod
from quant import FP8Embedding, FP8Linear, QuantizationError, dequantize_rows, quantize_rows

ROOT = Path(__file__).resolve().parents[1]
TABLES = ("embeddings", "codebook_embeddings", "fast_embeddings")
REAL_CONFIG = ROOT / "tests/fixtures/real-s2-config.json"
NORMAL_REL = 2.0 ** -4  # half an ulp of a 3-bit mantissa, relative to the value
SUBNORMAL_ABS = 2.0 ** -10  # half the e4m3 subnormal spacing (2^-9), in units of the row scale
BF16_REL = 2.0 ** -8  # one bf16 rounding
# A Linear left in bf16 on the CPU: packed for oneDNN where that runs and pays (quant/packed.py).
PLAIN_BF16 = (nn.Linear, quant.PackedLinear)


def dense(t):
    return t.to_dense() if t.is_mkldnn else t


def greedy(n):
    return SamplingParams(temperature=0.7, top_p=0.7, top_k=1, max_new_tokens=n)


def weights(n=64, k=256, seed=0):
    """Rows of very different magnitudes, an all-zero row, and values deep in the subnormals."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g) * torch.logspace(-4, 1, n)[:, None]
    w[3] = 0
    w[5, :8] = torch.tensor([1.0, 1e-4, -1e-5, 3e-6, 0.0, -0.5, 0.25, 1e-7])
    return w


# ---------------------------------------------------------------------------- numerics
def test_per_row_quantization_error_within_the_e4m3_bound():
    w = weights()
    q, scale = quantize_rows(w)
    assert q.dtype == torch.float8_e4m3fn and q.shape == w.shape
    assert scale.dtype == torch.float32 and scale.shape == (w.shape[0], 1)
    assert torch.equal(scale[3], torch.ones(1))  # zero row: scale 1, codes 0
    assert not torch.isnan(q.float()).any()
    assert torch.equal(q.float().abs().amax(1)[w.abs().amax(1) > 0],
                       torch.full(((w.abs().amax(1) > 0).sum(),), 448.0))  # full range used
    err = (w - dequantize_rows(q, scale, torch.float32)).abs()
    bound = NORMAL_REL * w.abs() + SUBNORMAL_ABS * scale
    assert (err <= bound * (1 + 1e-6)).all()
    assert (err / bound).max() > 0.5  # the bound is tight, not vacuous
    # stored in bf16 (the "load" path): one more rounding of the dequantized value
    err16 = (w - dequantize_rows(q, scale, torch.bfloat16).float()).abs()
    assert (err16 <= (NORMAL_REL + 2 * BF16_REL) * w.abs() + 2 * SUBNORMAL_ABS * scale).all()


def test_fp8_linear_error_is_bounded_by_the_weight_bound():
    w, x = weights(96, 128), torch.randn(5, 128, generator=torch.Generator().manual_seed(1))
    layer = FP8Linear.from_weight(w)
    q, scale = layer.weight, layer.scale
    y = layer(x)
    w_hat = q.double() * scale.double()
    fp32_slack = 1e-5 * (x.abs().double() @ w_hat.abs().T)  # fp32 accumulation
    assert ((y.double() - F.linear(x.double(), w_hat)).abs() <= fp32_slack).all()
    # |x·(w - ŵ)| <= |x|·(2^-4|w| + 2^-10 s), elementwise
    bound = x.abs().double() @ (NORMAL_REL * w.abs() + SUBNORMAL_ABS * scale).double().T
    assert ((F.linear(x.double(),
                      w.double()) - y.double()).abs() <= bound * 1.001 + fp32_slack).all()
    assert layer.weight.element_size() == 1


class CudaScalarDivision(TorchDispatchMode):
    """Computes, as CUDA does, a tensor divided by a Python number or a 0-dim CPU tensor as a
    multiplication by the divisor's reciprocal rounded to the tensor's dtype (correctly rounded
    quotients only where that reciprocal is exact)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.div.Tensor and not (kwargs or {}).get("rounding_mode"):
            a, b = args
            cpu_scalar = not isinstance(b,
                                        torch.Tensor) or (b.dim() == 0 and b.device.type == "cpu")
            if cpu_scalar and a.is_floating_point():
                inverse = torch.tensor(1.0, dtype=a.dtype) / torch.tensor(float(b), dtype=a.dtype)
                return torch.ops.aten.mul.Tensor(a, inverse)
        return func(*args, **(kwargs or {}))


def bf16_weight(n=4096, k=2560, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (0.02 * torch.randn(n, k, generator=g)).to(torch.bfloat16)


@pytest.mark.parametrize("cuda_division", [False, True])
def test_quantize_rows_equals_the_float64_formula_on_every_device(cuda_division):
    """Scales and codes are the formula computed in float64 (the quotients correctly rounded to
    fp32, then to e4m3), bit for bit, also where a Python-number divisor becomes a reciprocal
    multiplication (CUDA: before, 768 of 4096 scales of such a weight were 1 ulp off)."""
    w = bf16_weight(1024, 2560)
    with CudaScalarDivision() if cuda_division else contextlib.nullcontext():
        q, scale = quantize_rows(w)
    w64 = w.double()
    amax = w64.abs().amax(dim=-1, keepdim=True)
    ref_scale = (amax / 448).float()  # an fp32 quotient computed in fp64: correctly rounded
    assert torch.equal(scale, ref_scale), int((scale != ref_scale).sum())
    quotient = (w64 / ref_scale.double()).float()  # likewise
    ref_q = quotient.clamp(-448, 448).to(torch.float8_e4m3fn)
    assert torch.equal(q.view(torch.uint8), ref_q.view(torch.uint8)), int(
        (q.view(torch.uint8) != ref_q.view(torch.uint8)).sum())


def test_the_cuda_division_stand_in_does_round_differently():
    """The stand-in is not a no-op: a Python-number divisor gives other fp32 scales under it."""
    amax = bf16_weight(1024, 2560).float().abs().amax(dim=-1, keepdim=True)
    with CudaScalarDivision():
        emulated = amax / 448.0
    assert (emulated != amax / 448.0).any()


def test_quantize_rows_in_chunks_equals_one_pass(monkeypatch):
    w = weights(100, 64)
    q, scale = quantize_rows(w)
    monkeypatch.setattr(fp8mod, "CHUNK_ROWS", 7)
    qc, scalec = quantize_rows(w)
    assert torch.equal(qc.view(torch.uint8), q.view(torch.uint8)) and torch.equal(scalec, scale)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_fp8_embedding_gathers_the_dequantized_rows(dtype):
    w = weights(96, 128).to(dtype)
    table = FP8Embedding.from_weight(w)
    reference = dequantize_rows(*quantize_rows(w), dtype)  # [96, 128], as FP8Linear rounds
    ids = torch.randint(0, 96, (2, 3, 5), generator=torch.Generator().manual_seed(3))
    out = table(ids)
    assert out.dtype == dtype and out.shape == (2, 3, 5, 128)
    assert torch.equal(out, reference[ids])  # any leading dims, as nn.Embedding
    assert torch.equal(table(ids[0, 0]), reference[ids[0, 0]])
    assert table.weight.dtype == torch.float8_e4m3fn and table.scale.shape == (96, 1)
    assert quant.weight_bytes(table) == 96 * 128 + 96 * 4
    bound = NORMAL_REL * w.float().abs() + SUBNORMAL_ABS * table.scale
    assert ((table(torch.arange(96)).float() - w.float()).abs()
            <= bound * (1 + 1e-6) + 2 * BF16_REL * w.float().abs()).all()


def test_paths_load_and_dequant_are_bitwise_equal_and_scaled_mm_is_close():
    g = torch.Generator().manual_seed(2)
    w = (torch.randn(256, 512, generator=g) * 0.02).to(torch.bfloat16)
    x = torch.randn(3, 7, 512, generator=g).to(torch.bfloat16)
    dequant = FP8Linear.from_weight(w, "dequant")
    loaded = nn.Linear(512, 256, bias=False).to(torch.bfloat16)
    loaded.weight.data = fp8mod.fake_quantize(w)
    assert torch.equal(dequant(x), loaded(x))
    w8a8 = FP8Linear.from_weight(w, "scaled_mm")
    ref = F.linear(x.float(), w.float())
    rel = lambda y: float((y.float() - ref).norm() / ref.norm())  # noqa: E731
    assert rel(dequant(x)) < 0.04 and rel(w8a8(x)) < 0.06
    assert w8a8(x).shape == (3, 7, 256)


def test_scaled_mm_falls_back_to_dequant_where_shapes_do_not_fit():
    model = nn.Sequential(nn.Linear(40, 24, bias=False), nn.Linear(32, 48, bias=False))
    converter = quant.Converter("fp8", "cpu", torch.float32, ["0.weight", "1.weight"], "scaled_mm")
    for name in ("0.weight", "1.weight"):
        assign(model, name, converter(name, model.get_parameter(name).detach()))
    converter.finish(model)
    assert (model[0].path, model[1].path) == ("dequant", "scaled_mm")  # K, N multiples of 16


def test_unknown_path_and_mode_are_rejected():
    with pytest.raises(QuantizationError, match="fp8 path must be one of"):
        fp8mod.resolve_path("fast", torch.device("cpu"))
    with pytest.raises(QuantizationError, match="unknown quantization 'int3'.*fp8"):
        load_model(ROOT / "tests/fixtures/tiny-s2", "cpu", torch.bfloat16, "int3")


def test_fp8_on_a_device_without_float8_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(fp8mod._float8_ok, "cpu", False)
    with pytest.raises(QuantizationError, match="cannot hold or cast.*'load'"):
        fp8mod.resolve_path("dequant", torch.device("cpu"))
    assert fp8mod.resolve_path("auto", torch.device("cpu")) == "load"  # still runs, in bf16


def test_env_var_picks_the_path(monkeypatch):
    monkeypatch.setenv("SAILFISH_FP8_PATH", "dequant")
    assert fp8mod.resolve_path(None, torch.device("cpu")) == "dequant"
    assert fp8mod.resolve_path("fastest", torch.device("cpu")) == "load"  # no CUDA: auto


# ---------------------------------------------------------------------------- models
@pytest.fixture(scope="module")
def bf16_model(ckpt_dir):
    return load_model(ckpt_dir, dtype=torch.bfloat16)


@pytest.fixture(scope="module")
def prompt(clone_prompt):
    return clone_prompt


def test_quantize_model_replaces_every_linear_but_the_skipped(ckpt_dir):
    model = quant.quantize_model(load_model(ckpt_dir), "fp8", skip=("fast_output",),
                                 fp8_path="dequant", quantize_embeddings=False)
    fp8 = [n for n, m in model.named_modules() if isinstance(m, FP8Linear)]
    c = model.config
    assert len(fp8) == 5 * (c.text.n_layer + c.fast.n_layer)
    assert type(model.fast_output) in PLAIN_BF16
    assert model.fast_output.weight.dtype == torch.bfloat16
    assert model.embeddings.weight.dtype == torch.bfloat16  # quantize_embeddings=False
    assert not any(isinstance(m, nn.Linear) for n, m in model.named_modules()
                   if n.startswith(("layers.", "fast_layers.")))


@pytest.mark.parametrize("mode", quant.MODES)
def test_embedding_tables_follow_the_mode_default_and_skip(ckpt_dir, mode):
    model = build_meta(ModelConfig.from_file(ckpt_dir))
    default = quant.EMBEDDINGS_BY_MODE[mode]
    assert (quant.embedding_targets(model, mode, None) ==
            ([f"{t}.weight" for t in TABLES] if default else []))
    assert (quant.embedding_targets(model, mode, True, skip=("fast_*",)) ==
            ["embeddings.weight", "codebook_embeddings.weight"])
    assert quant.embedding_targets(model, mode, False) == []


def test_fp8_embeddings_generate_and_the_engine_head_is_their_rows(ckpt_dir, bf16_model, prompt):
    model = quant.quantize_model(load_model(ckpt_dir), "fp8", skip=("fast_embeddings",),
                                 quantize_embeddings=True)
    assert isinstance(model.embeddings, FP8Embedding)
    assert isinstance(model.codebook_embeddings, FP8Embedding)
    assert type(model.fast_embeddings) is nn.Embedding  # skipped
    reference = dequantize_rows(*quantize_rows(bf16_model.embeddings.weight), torch.bfloat16)
    engine = Engine(model)
    run = generate(engine, prompt, greedy(12), seed=0, stop_on_eos=False)[0]
    assert run.columns.shape == (1 + model.config.num_codebooks, 12)
    assert torch.equal(engine.head, reference[engine.allowed_ids])
    with torch.inference_mode():  # the full tied head (vocab_logits) reads the same rows
        hidden = torch.randn(2, model.config.text.dim, dtype=torch.bfloat16)
        assert torch.equal(model.vocab_logits(hidden), F.linear(hidden, reference))
        ids = prompt[None]
        assert torch.equal(model.embeddings(ids[:, 0]), reference[ids[:, 0]])


def test_engine_follows_embeddings_quantized_under_it(ckpt_dir, prompt):
    model = load_model(ckpt_dir)
    engine = Engine(model)
    before = generate(engine, prompt, greedy(4), seed=0)[0]
    plain_head = engine.head.clone()
    quant.quantize_model(model, "none", quantize_embeddings=True)  # embeddings only
    after = generate(engine, prompt, greedy(4), seed=0)[0]
    assert isinstance(model.embeddings, FP8Embedding)
    assert torch.equal(engine.head, model.head_rows(engine.allowed_ids))
    assert not torch.equal(engine.head, plain_head)
    assert after.columns.shape[1] >= 1 and before.columns.shape[1] >= 1


@pytest.mark.parametrize("embeddings", [False, True])
def test_streamed_fp8_load_equals_quantizing_after_load(ckpt_dir, embeddings):
    streamed = load_model(ckpt_dir, "cpu", torch.bfloat16, "fp8", fp8_path="dequant",
                                quantize_embeddings=embeddings)
    after = quant.quantize_model(load_model(ckpt_dir), "fp8", fp8_path="dequant",
                                 quantize_embeddings=embeddings)
    a, b = streamed.state_dict(), after.state_dict()
    assert a.keys() == b.keys() and any(k.endswith(".scale") for k in a)
    assert ("embeddings.scale" in a) == embeddings
    assert all(torch.equal(a[k].float(), b[k].float()) for k in a)


def write_fp8_checkpoint(src: Path, dst: Path, names: str) -> Path:
    """A community-style FP8 checkpoint of ``src``: one model.safetensors, ``_buf.*`` junk."""
    dst.mkdir()
    (dst / "config.json").write_bytes((src / "config.json").read_bytes())
    linears = set(quant.linear_weights(load_model(src)))
    key = to_hf if names == "hf" else str
    out = {"_buf.freqs_cis": torch.randn(16, 8, 2), "_buf.causal_mask": torch.ones(4, 4).bool()}
    for stored, tensor in iter_tensors(src):
        name = to_internal(stored)
        if name in linears:
            out[key(name)], out[key(name) + ".scale"] = quantize_rows(tensor)
        else:
            out[key(name)] = tensor
    save_file(out, str(dst / "model.safetensors"))
    return dst


@pytest.fixture(scope="module")
def fp8_dirs(ckpt_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("fp8")
    return {names: write_fp8_checkpoint(ckpt_dir, root / f"s2-{names}", names)
            for names in ("internal", "hf")}


def test_fp8_checkpoint_is_detected_by_dtype(ckpt_dir, fp8_dirs):
    assert not is_fp8_checkpoint(ckpt_dir)
    assert all(is_fp8_checkpoint(d) for d in fp8_dirs.values())  # names lack "fp8"


def test_fp8_checkpoints_in_both_key_styles_load_and_generate(fp8_dirs, bf16_model, prompt,
                                                              sizes):
    stored = {to_internal(k): v for k, v in load_file(str(fp8_dirs["hf"] / "model.safetensors"))
              .items()}
    runs = {}
    for names, folder in fp8_dirs.items():
        model = load_model(folder, "cpu", torch.bfloat16, None, fp8_path="dequant")
        layers = {n: m for n, m in model.named_modules() if isinstance(m, FP8Linear)}
        assert len(layers) == 5 * (sizes.n_layer + sizes.fast_n_layer) + 1  # + fast_output
        for n, m in layers.items():
            assert torch.equal(m.weight.view(torch.uint8), stored[n + ".weight"].view(torch.uint8))
            assert torch.equal(m.scale, stored[n + ".weight.scale"])
        runs[names] = generate(Engine(model), prompt, greedy(24), seed=0)[0].columns
    # the CPU default: dequantized once at load, plain Linear layers, same numbers
    loaded = load_model(fp8_dirs["internal"], "cpu", torch.bfloat16)
    assert not any(isinstance(m, FP8Linear) for m in loaded.modules())
    runs["load"] = generate(Engine(loaded), prompt, greedy(24), seed=0)[0].columns
    assert torch.equal(runs["internal"], runs["hf"]) and torch.equal(runs["internal"], runs["load"])


def test_fp8_against_bf16_logits_and_greedy_agreement(fp8_dirs, bf16_model, prompt):
    """The tiny random model's logits are nearly flat, so greedy runs part ways within a few
    frames under any perturbation (bf16 itself vs fp32 too); the logit error is what is bounded."""
    fp8_model = load_model(fp8_dirs["hf"], "cpu", torch.bfloat16)
    T = prompt.shape[1]
    with torch.inference_mode():
        pos = torch.arange(T)[None]
        ref = bf16_model.vocab_logits(bf16_model.slow_forward(prompt[None], pos, None)).float()
        out = fp8_model.vocab_logits(fp8_model.slow_forward(prompt[None], pos, None)).float()
    rel = float((out - ref).norm() / ref.norm())
    assert rel < 0.1, rel
    a = generate(Engine(bf16_model), prompt, greedy(32), seed=0, stop_on_eos=False)[0].columns
    b = generate(Engine(fp8_model), prompt, greedy(32), seed=0, stop_on_eos=False)[0].columns
    identical = int((a == b).all(0).int().cumprod(0).sum())
    print(f"\nfp8 vs bf16 on tiny-s2: slow logits rel err {rel:.4f}, "
          f"greedy frames identical {identical}/32")


# ---------------------------------------------------------------------------- bad checkpoints
def broken(fp8_dir, tmp_path, edit) -> Path:
    folder = tmp_path / "broken"
    folder.mkdir(parents=True)
    (folder / "config.json").write_bytes((fp8_dir / "config.json").read_bytes())
    tensors = load_file(str(fp8_dir / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


def test_corrupted_fp8_checkpoint_gives_one_error_listing_everything(fp8_dirs, sizes, tmp_path):
    wqkv = "layers.0.attention.wqkv.weight"
    last = f"layers.{sizes.n_layer - 1}.attention.wo.weight"
    rows = None

    def edit(t):
        nonlocal rows
        rows = t[wqkv + ".scale"].shape[0] - 1
        t[wqkv + ".scale"] = t[wqkv + ".scale"][:-1]  # wrong scale shape
        del t[last + ".scale"]  # missing scale
        t["fast_norm.weight"] = t["fast_norm.weight"].to(torch.float8_e4m3fn)  # fp8 non-Linear
        t["norm.weight.scale"] = torch.ones(sizes.dim, 1)  # unexpected
        del t["fast_layers.0.feed_forward.w1.weight"]  # missing weight

    folder = broken(fp8_dirs["internal"], tmp_path, edit)
    with pytest.raises(CheckpointError) as e:
        load_model(folder, "cpu", torch.bfloat16)
    msg = str(e.value)
    assert f"{wqkv}.scale: ({rows}, 1)" in msg
    assert f"text_model.model.{last}.scale" in msg
    assert "fast_norm.weight: float8_e4m3fn, but only Linear weights" in msg
    assert "norm.weight.scale" in msg and "unexpected" in msg
    assert "audio_decoder.layers.0.feed_forward.w1.weight" in msg


def test_fp8_embedding_tables_load_but_fp8_norms_do_not(fp8_dirs, tmp_path):
    def fp8_tables(t):
        for table in TABLES:
            t[f"{table}.weight"], t[f"{table}.weight.scale"] = quantize_rows(t[f"{table}.weight"])

    folder = broken(fp8_dirs["internal"], tmp_path / "a", fp8_tables)
    model = load_model(folder, "cpu", torch.bfloat16)
    assert all(isinstance(getattr(model, t), FP8Embedding) for t in TABLES)  # kept as stored
    plain = load_model(folder, "cpu", torch.bfloat16, quantize_embeddings=False)
    assert not any(isinstance(m, FP8Embedding) for m in plain.modules())
    assert torch.equal(plain.embeddings.weight, model.embeddings(torch.arange(
        model.config.text.vocab_size)))

    def bad(t):
        fp8_tables(t)
        del t["codebook_embeddings.weight.scale"]
        t["norm.weight"], t["norm.weight.scale"] = quantize_rows(t["norm.weight"][None])
        t["norm.weight"] = t["norm.weight"][0]

    folder = broken(fp8_dirs["internal"], tmp_path / "b", bad)
    with pytest.raises(CheckpointError) as e:
        load_model(folder, "cpu", torch.bfloat16)
    msg = str(e.value)
    assert "norm.weight: float8_e4m3fn, but only Linear weights and embedding tables" in msg
    assert "audio_decoder.codebook_embeddings.weight.scale" in msg  # missing
    assert "unexpected (1): norm.weight.scale" in msg


def test_scale_for_a_bf16_weight_and_nan_scales_are_errors(fp8_dirs, sizes, tmp_path):
    w1 = f"fast_layers.{sizes.fast_n_layer - 1}.feed_forward.w1.weight"

    def edit(t):
        t["fast_output.weight"] = dequantize_rows(t["fast_output.weight"],
                                                  t["fast_output.weight.scale"], torch.bfloat16)
        t[w1 + ".scale"] = torch.full_like(t[w1 + ".scale"], float("nan"))

    folder = broken(fp8_dirs["internal"], tmp_path, edit)
    with pytest.raises(CheckpointError) as e:
        load_model(folder, "cpu", torch.bfloat16)
    assert f"{w1}.scale: holds inf or NaN" in str(e.value)
    assert "fast_output.weight.scale (its weight is not FP8)" in str(e.value)


def test_mixed_checkpoint_with_a_bf16_head_loads(fp8_dirs, tmp_path):
    def edit(t):
        t["fast_output.weight"] = dequantize_rows(t.pop("fast_output.weight"),
                                                  t.pop("fast_output.weight.scale"),
                                                  torch.bfloat16)

    folder = broken(fp8_dirs["internal"], tmp_path, edit)
    model = load_model(folder, "cpu", torch.bfloat16, "fp8", fp8_path="dequant")
    assert isinstance(model.fast_output, FP8Linear)  # quantized on load, as asked
    model = load_model(folder, "cpu", torch.bfloat16, None, fp8_path="dequant")
    assert type(model.fast_output) in PLAIN_BF16  # stays as stored


# ---------------------------------------------------------------------------- export
def test_export_round_trip(ckpt_dir, sizes, tmp_path):
    dst = tmp_path / "exported"
    info = export_fp8(ckpt_dir, dst, skip=("fast_output",))
    assert info["num_quantized_layers"] == 5 * (sizes.n_layer + sizes.fast_n_layer)
    assert info["skipped_layers"] == ["fast_output"]
    for name in ("config.json", "tokenizer.json", "codec.pth", "quantization_info.json",
                 "model.safetensors"):
        assert (dst / name).is_file(), name
    assert (json.loads((dst / "quantization_info.json").read_text())["method"] ==
            "per_row_symmetric_fp8")
    stored = load_file(str(dst / "model.safetensors"))
    assert all(k.startswith(("text_model.model.", "audio_decoder.")) for k in stored)
    original = {to_internal(k): v for k, v in iter_tensors(ckpt_dir)}
    model = load_model(dst, "cpu", torch.bfloat16, None, fp8_path="dequant")
    state = model.state_dict()
    for name, tensor in original.items():
        if name.endswith(".weight") and isinstance(model.get_submodule(name[:-7]), FP8Linear):
            q, scale = quantize_rows(tensor)
            assert torch.equal(state[name].view(torch.uint8), q.view(torch.uint8)), name
            assert torch.equal(state[name[:-7] + ".scale"], scale), name
            assert torch.equal(stored[to_hf(name)].view(torch.uint8), q.view(torch.uint8))
        else:
            assert torch.equal(dense(state[name]), tensor.to(torch.bfloat16)), name
    with pytest.raises(QuantizationError, match="already an FP8 checkpoint"):
        export_fp8(dst, tmp_path / "again")


def test_export_with_fp8_embeddings_round_trip(ckpt_dir, tmp_path):
    dst = tmp_path / "exported"
    info = export_fp8(ckpt_dir, dst, skip=("fast_embeddings",), embeddings=True)
    assert info["fp8_embeddings"] == ["codebook_embeddings", "embeddings"]
    stored = load_file(str(dst / "model.safetensors"))
    original = {to_internal(k): v for k, v in iter_tensors(ckpt_dir)}
    for table in ("embeddings", "codebook_embeddings"):
        q, scale = quantize_rows(original[f"{table}.weight"])
        key = to_hf(f"{table}.weight")
        assert torch.equal(stored[key].view(torch.uint8), q.view(torch.uint8))
        assert torch.equal(stored[key + ".scale"], scale)
    assert stored[to_hf("fast_embeddings.weight")].dtype == torch.bfloat16
    model = load_model(dst, "cpu", torch.bfloat16, None, fp8_path="dequant")
    assert isinstance(model.embeddings, FP8Embedding) and isinstance(model.layers[0].attention.wqkv,
                                                                      FP8Linear)
    assert type(model.fast_embeddings) is nn.Embedding
    state = model.state_dict()
    assert torch.equal(state["embeddings.weight"].view(torch.uint8),
                       stored[to_hf("embeddings.weight")].view(torch.uint8))
    assert torch.equal(state["embeddings.scale"], stored[to_hf("embeddings.weight") + ".scale"])
    # streaming a bf16 checkpoint through the converter gives the same model
    direct = load_model(ckpt_dir, "cpu", torch.bfloat16, "fp8", fp8_path="dequant",
                              skip=("fast_embeddings",), quantize_embeddings=True).state_dict()
    assert state.keys() == direct.keys()
    assert all(torch.equal(state[k].float(), direct[k].float()) for k in state)


def test_export_cli_with_shards(ckpt_dir, tmp_path):
    dst = tmp_path / "cli"
    bf16_bytes = json.loads((ckpt_dir / "model.safetensors.index.json").read_text())["metadata"][
        "total_size"]
    shard_mb = f"{bf16_bytes / 3 / 1e6:.3f}"  # the FP8 export is about half: 2 shards or more
    subprocess.run([sys.executable, "-m", "fish_core.loading.export", str(ckpt_dir), str(dst),
                    "--names", "internal", "--shard-mb", shard_mb, "--fp8-embeddings"], cwd=ROOT,
                   check=True, capture_output=True)
    shards = sorted(p.name for p in dst.glob("*.safetensors"))
    assert len(shards) > 1 and (dst / "model.safetensors.index.json").is_file()
    a = load_model(dst, "cpu", torch.bfloat16, None, fp8_path="dequant").state_dict()
    b = load_model(ckpt_dir, "cpu", torch.bfloat16, "fp8", fp8_path="dequant",
                         quantize_embeddings=True).state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k].float(), b[k].float()) for k in a)


# ---------------------------------------------------------------------------- torchao
def test_torchao_missing_is_a_clear_error(without_torchao):
    with pytest.raises(QuantizationError, match="torchao is not installed: pip install torchao"):
        quant.torchao_modes.import_torchao()


def test_gpu_only_torchao_modes_explain_what_they_need(ckpt_dir):
    with pytest.raises(QuantizationError, match=r"compute capability >= 8\.9"):
        load_model(ckpt_dir, "cpu", torch.bfloat16, "fp8-dynamic")
    with pytest.raises(QuantizationError, match="int4 weight-only needs CUDA .* or the CPU"):
        quant.torchao_modes.check("int4", torch.device("meta"), torch.bfloat16)


@pytest.mark.parametrize("mode", ["nvfp4"])  # int8/int4 on the CPU: tests/test_int_linear.py
def test_torchao_modes_that_run_on_cpu(ckpt_dir, fp8_dirs, bf16_model, prompt, mode):
    pytest.importorskip("torchao", reason="torchao is not installed (optional)")
    model = load_model(ckpt_dir, "cpu", torch.bfloat16, mode)
    assert quant.weight_bytes(model) < quant.weight_bytes(bf16_model)
    weight = model.layers[0].attention.wqkv.weight
    assert type(weight).__module__.startswith("torchao")
    x = torch.randn(2, bf16_model.config.text.dim, dtype=torch.bfloat16)
    ref = bf16_model.layers[0].attention.wqkv(x).float()
    rel = float((model.layers[0].attention.wqkv(x).float() - ref).norm() / ref.norm())
    assert rel < {"int8": 0.02, "nvfp4": 0.2}[mode], rel
    assert generate(Engine(model), prompt, greedy(8), seed=0)[0].columns.shape[1] >= 1
    # an FP8 checkpoint is dequantized, then quantized again
    again = load_model(fp8_dirs["hf"], "cpu", torch.bfloat16, mode)
    assert type(again.layers[0].attention.wqkv.weight).__module__.startswith("torchao")


def test_torchao_modes_leave_the_inductor_config_alone():
    """Inside ComfyUI a process-wide inductor change would reach every other pack's compiles."""
    pytest.importorskip("torchao", reason="torchao is not installed (optional)")
    inductor = torch._inductor.config
    before = {k: getattr(inductor, k) for k in ("coordinate_descent_tuning",
                                                 "coordinate_descent_check_all_directions",
                                                 "force_fuse_int_mm_with_mul")}
    tm = quant.torchao_modes
    for mode in tm.MODES:
        config = tm.config_for(mode)
        assert getattr(config, "set_inductor_config", False) is False, mode
    for mode in ("int8", "nvfp4"):  # the modes that quantize on the CPU
        tm.quantize_weight(torch.randn(32, 64, dtype=torch.bfloat16), tm.config_for(mode))
    assert {k: getattr(inductor, k) for k in before} == before


# ---------------------------------------------------------------------------- weight bytes
@pytest.mark.parametrize("mode", ["none", "fp8", "int8", "int4", "nvfp4"])
def test_planned_bytes_are_what_loading_holds(ckpt_dir, mode):
    if mode == "nvfp4":
        pytest.importorskip("torchao", reason="torchao is not installed (optional)")
    meta = build_meta(ModelConfig.from_file(ckpt_dir))
    for embeddings in (False, True):
        model = load_model(ckpt_dir, "cpu", torch.bfloat16, mode, fp8_path="dequant",
                                 quantize_embeddings=embeddings)
        assert quant.weight_bytes(model) == quant.planned_bytes(meta, mode, (), embeddings,
                                                                device="cpu")


def test_torchao_storage_formulas_match_torchao():
    """int4 cannot quantize on CPU, but torchao builds its tile-packed tensor on the meta device
    once the CUDA capability query is answered; int8, nvfp4 and fp8-dynamic's tensor on CPU."""
    pytest.importorskip("torchao", reason="torchao is not installed (optional)")
    from torchao.quantization import PerRow
    from torchao.quantization.quantize_.workflows.float8.float8_tensor import Float8Tensor

    tm = quant.torchao_modes
    real = set(quant.linear_weights(build_meta(ModelConfig.from_file(REAL_CONFIG))).values())
    with mock.patch("torch.cuda.get_device_capability", return_value=(8, 0)):
        for shape in sorted(real | {(48, 128), (200, 384)}):
            w = torch.empty(shape, dtype=torch.bfloat16, device="meta")
            q = tm.quantize_weight(w, tm.config_for("int4"))
            assert quant.tensor_bytes(q) == tm.stored_bytes("int4", shape), shape
    for shape in [(48, 32), (256, 512), (144, 80)]:
        w = torch.randn(shape, dtype=torch.bfloat16)
        for mode in ("int8", "nvfp4"):
            q = tm.quantize_weight(w, tm.config_for(mode))
            assert quant.tensor_bytes(q) == tm.stored_bytes(mode, shape), (mode, shape)
        q = Float8Tensor.from_hp(w, granularity=PerRow())
        assert quant.tensor_bytes(q) == tm.stored_bytes("fp8-dynamic", shape), shape


def test_s2_pro_fits_6_gb_in_fp8_and_3_gb_in_4_bit():
    """The real config on the meta device: nothing is allocated. Modes at their defaults; int4
    holds the fast AR in int8 (``quant.convert.MIXED``), which torchao's padded CUDA layout
    puts a little over 3 GB."""
    meta = build_meta(ModelConfig.from_file(REAL_CONFIG))
    planned = {mode: quant.planned_bytes(meta, mode) for mode in quant.MODES}
    cpu = {mode: quant.planned_bytes(meta, mode, device="cpu") for mode in quant.MODES}
    print("\nS2-Pro weight bytes:", {m: round(b / 1e9, 3) for m, b in planned.items()},
          "CPU:", {m: round(b / 1e9, 3) for m, b in cpu.items()})
    assert planned["none"] == cpu["none"] == sum(p.numel() * 2 for p in meta.parameters())
    assert cpu["int4"] <= 3.0e9 and planned["int4"] <= 3.2e9 and planned["nvfp4"] <= 3.0e9
    assert planned["fp8"] <= 6.0e9 and planned["int8"] <= 6.0e9 and cpu["int8"] <= 6.0e9
    assert quant.planned_bytes(meta, "fp8", quantize_embeddings=False) <= 6.0e9
    assert quant.planned_bytes(meta, "int4", quantize_embeddings=False, device="cpu") > 3.0e9
    assert all(p.device.type == "meta" for p in meta.parameters())


# ---------------------------------------------------------------------------- compile
@pytest.mark.slow  # torch.compile: minutes on a CPU; the quick subset leaves it out
def test_compiled_decode_with_fp8_layers_matches_eager(fp8_dirs, prompt):
    """torch.compile(fullgraph=True) of the frame step through FP8Linear (dequant path) and
    FP8Embedding. Activations in fp32: in bf16, fused kernels round differently from eager ones
    and greedy codes of a random tiny model part on near ties, whatever the layers."""
    model = load_model(fp8_dirs["hf"], "cpu", torch.float32, None, fp8_path="dequant",
                             quantize_embeddings=True)
    assert isinstance(model.fast_embeddings, FP8Embedding)
    eager = generate(Engine(model), prompt, greedy(24), seed=0, stop_on_eos=False)[0]
    engine = Engine(model, compile=True)
    compiled = generate(engine, prompt, greedy(24), seed=0, stop_on_eos=False)[0]
    assert engine.compiled, "compile failed and the engine fell back to eager"
    assert torch.equal(compiled.columns, eager.columns)
