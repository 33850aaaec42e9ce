"""quant.packed: bf16 Linear weights packed for oneDNN on the CPU give exactly F.linear's
results, the loader packs every bf16 Linear on the CPU (and nothing in fp32), reads them from
the file rather than through its memory map, and a compile request decodes eagerly, the same."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import quant
from fish_core.engine.runner import Engine
from fish_core.engine.rows import generate
from fish_core.loading import shards
from fish_core.loading.checkpoint import load_model
from fish_core.params import SamplingParams
from quant.packed import PackedLinear

pytestmark = pytest.mark.skipif(not quant.packed.available(torch.bfloat16),
                                reason="oneDNN cannot pack bf16 weights on this machine")


def greedy(n):
    return SamplingParams(temperature=0.7, top_p=0.7, top_k=1, max_new_tokens=n)


@pytest.mark.parametrize("shape", [(64, 48), (1536, 1024), (40, 72)])
def test_packed_products_equal_f_linear_bit_for_bit(shape):
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)
    layer = PackedLinear.from_weight(w)
    assert layer.weight.is_mkldnn and torch.equal(layer.dense(), w)
    for lead in [(1,), (3,), (2, 5), (1, 300)]:  # decode rows, a batch, a prompt
        x = torch.randn(*lead, shape[1], generator=g).to(torch.bfloat16)
        assert torch.equal(layer(x), F.linear(x, w)), lead
    assert quant.weight_bytes(layer) == w.numel() * 2


def test_only_bf16_on_the_cpu_is_packed():
    assert quant.packs("cpu", torch.bfloat16)
    assert not quant.packs("cpu", torch.float32) and not quant.packs("cpu", torch.float16)
    assert not quant.packs("meta", torch.bfloat16)


def test_small_weights_stay_plain():
    assert quant.packed.worth_it((256, 256)) and not quant.packed.worth_it((64, 64))
    converter = quant.Converter("none", "cpu", torch.bfloat16, ["a.weight", "b.weight"])
    small, large = torch.zeros(64, 64, dtype=torch.bfloat16), torch.zeros(256, 256).bfloat16()
    assert converter("a.weight", small) is small and not converter.converts("a.weight", (64, 64))
    assert converter("b.weight", large).is_mkldnn and converter.converts("b.weight", (256, 256))


def test_the_loader_packs_bf16_linears_from_file_reads(ckpt_dir, monkeypatch):
    monkeypatch.setattr(quant.packed, "MIN_WEIGHTS", 0)  # the fixture's weights are tiny
    fp32 = load_model(ckpt_dir, "cpu", torch.float32)
    mapped = {}
    real = shards.iter_tensors

    def spy(folder, keep_mapped=None):
        for name, tensor in real(folder, keep_mapped):
            mapped[name] = keep_mapped(name, "BF16", tuple(tensor.shape)) if keep_mapped else True
            yield name, tensor

    monkeypatch.setattr("fish_core.loading.checkpoint.iter_tensors", spy)
    model = load_model(ckpt_dir, "cpu", torch.bfloat16)
    linears = quant.linear_weights(model)
    assert linears and all(type(model.get_submodule(n[:-7])) is PackedLinear for n in linears)
    assert all(type(fp32.get_submodule(n[:-7])) is nn.Linear for n in linears)
    from fish_core.loading.tensor_names import to_hf

    # packed weights are copied from the file, never left as views of its map; norms stay views
    assert not any(mapped[to_hf(n)] for n in linears)
    assert mapped[to_hf("norm.weight")]
    with torch.inference_mode():
        for n in linears:
            x = torch.randn(2, linears[n][1], dtype=torch.bfloat16)
            dense = fp32.get_submodule(n[:-7]).weight.to(torch.bfloat16)
            assert torch.equal(model.get_submodule(n[:-7])(x), F.linear(x, dense)), n


def test_packed_model_generates_like_the_plain_one(ckpt_dir, clone_prompt, monkeypatch):
    monkeypatch.setattr(quant.packed, "MIN_WEIGHTS", 0)
    packed = load_model(ckpt_dir, "cpu", torch.bfloat16)
    unpacked = load_model(ckpt_dir, "cpu", torch.float32).to(torch.bfloat16)
    a = generate(Engine(packed), clone_prompt, greedy(12), seed=0, stop_on_eos=False)[0]
    b = generate(Engine(unpacked), clone_prompt, greedy(12), seed=0, stop_on_eos=False)[0]
    assert torch.equal(a.columns, b.columns)


def test_quantizing_a_packed_model_reads_its_dense_weights(ckpt_dir, monkeypatch):
    monkeypatch.setattr(quant.packed, "MIN_WEIGHTS", 0)
    reference = quant.quantize_model(load_model(ckpt_dir, "cpu", torch.float32).to(torch.bfloat16),
                                     "int8")
    model = quant.quantize_model(load_model(ckpt_dir, "cpu", torch.bfloat16), "int8")
    assert isinstance(model.layers[0].attention.wqkv, quant.Int8Linear)
    assert torch.equal(model.layers[0].attention.wqkv.weight,
                       reference.layers[0].attention.wqkv.weight)


def test_compile_on_a_packed_model_decodes_eagerly_the_same(ckpt_dir, clone_prompt,
                                                            monkeypatch):
    monkeypatch.setattr(quant.packed, "MIN_WEIGHTS", 0)
    model = load_model(ckpt_dir, "cpu", torch.bfloat16)
    eager = generate(Engine(model), clone_prompt, greedy(6), seed=0, stop_on_eos=False)[0]
    # said plainly, before any compile is tried (not dynamo's "Unsupported: Observed exception")
    with pytest.warns(UserWarning, match="bf16 weights packed for oneDNN do not compile; on a "
                                         "CPU the eager step with them is the faster one"):
        engine = Engine(model, compile=True)
    out = generate(engine, clone_prompt, greedy(6), seed=0, stop_on_eos=False)[0]
    assert not engine.compiled and len(engine.fallbacks) == 1
    assert torch.equal(out.columns, eager.columns)
    auto = Engine(model, compile="auto")  # --compile auto keeps eager, and says why
    assert not auto.compiled
    assert auto.compile_choice == ("auto: eager: bf16 weights packed for oneDNN do not compile; "
                                   "on a CPU the eager step with them is the faster one")


def test_bench_decode_compiled_mode_on_packed_weights_decodes_eagerly(ckpt_dir, monkeypatch,
                                                                      tmp_path):
    """``bench/bench_decode.py --modes compiled`` with bf16 on a CPU: the packed weights do
    not compile, so the compiled mode reports an eager run and why, instead of crashing."""
    import json
    from pathlib import Path

    monkeypatch.setattr(quant.packed, "MIN_WEIGHTS", 0)
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "bench"))
    import bench_decode

    out = tmp_path / "report.json"
    with pytest.warns(UserWarning, match="packed for oneDNN do not compile"):
        bench_decode.main(["--model", str(ckpt_dir), "--device", "cpu", "--dtype", "bfloat16",
                           "--modes", "compiled", "--frames", "3", "--repeats", "1",
                           "--prompt-len", "16", "--json", str(out)])
    entry = json.loads(out.read_text())["modes"]["compiled"]
    assert entry["compiled"] is False and "do not compile" in entry["fallbacks"][0]
    assert entry["decode_frames_per_s"] > 0
