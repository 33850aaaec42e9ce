"""``compile``: off, on (a warning on a CPU: it can be slower there) or auto (on a CPU, the
faster of the compiled and the eager step, timed on the first frame; the frames are exactly
those of the chosen mode alone)."""

import shutil

import pytest
import torch

from fish_core import cli
from fish_core.engine import compile_choice
from fish_core.engine.compile_choice import MeasuredStep, compile_mode
from fish_core.engine.runner import Engine
from fish_core.engine.rows import generate
from fish_core.loading.checkpoint import load_model
from fish_core.params import SamplingParams


@pytest.fixture(scope="module")
def model(ckpt_dir):
    return load_model(ckpt_dir, dtype=torch.float32)


def greedy(max_new_tokens):
    return SamplingParams(temperature=0.7, top_p=0.7, top_k=1, max_new_tokens=max_new_tokens)


def test_modes_and_their_names():
    assert ([compile_mode(v) for v in (False, None, True, "auto", " On ", "off")] ==
            ["off", "off", "on", "auto", "on", "off"])
    for bad in ("fast", 1, "yes"):
        with pytest.raises(ValueError, match="compile must be"):
            compile_mode(bad)
    parse = cli.build_parser().parse_args
    assert parse(["say", "hi", "-o", "x.wav"]).compile == "off"
    assert parse(["say", "hi", "-o", "x.wav", "--compile"]).compile == "on"
    assert parse(["say", "hi", "-o", "x.wav", "--compile", "auto"]).compile == "auto"


def test_compile_on_a_cpu_warns_once(model, monkeypatch):
    monkeypatch.setattr(compile_choice, "_warned", set())
    with pytest.warns(UserWarning, match="can be slower than eager.*--compile auto"):
        Engine(model, compile=True)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Engine(model, compile=True)  # once per process and dtype
        Engine(model, compile="auto")  # auto says what it chose instead
        Engine(model)


class FakeClock:
    """Each step advances it by the cost its name says (no real time is measured)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.mark.parametrize("compiled_ms,eager_ms,expected", [(5, 9, "compiled"), (9, 5, "eager")])
def test_auto_keeps_the_faster_step(compiled_ms, eager_ms, expected):
    clock, calls, chosen = FakeClock(), [], {}

    def step(name, ms):
        def run(engine, column):
            calls.append(name)
            clock.now += ms / 1e3
            return name, column
        return run

    compiled, eager = step("compiled", compiled_ms), step("eager", eager_ms)
    auto = MeasuredStep(compiled, eager, lambda s, why: chosen.update(step=s, why=why),
                        calls=3, clock=clock)
    assert auto(None, torch.zeros(1)) == (expected, torch.zeros(1))
    assert chosen["step"] is (compiled if expected == "compiled" else None)
    assert chosen["why"].startswith(expected) and f"{compiled_ms:.1f} ms compiled" in chosen["why"]
    assert (calls.count("compiled") == calls.count("eager") + (expected == "compiled") -
            (expected == "eager"))


@pytest.mark.slow  # torch.compile: minutes on a CPU; the quick subset leaves it out
@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                    reason="torch.compile on CPU needs a C++ compiler")
def test_auto_decodes_exactly_as_the_chosen_mode(model, golden, tmp_path):
    """Whichever it keeps, the frames are the golden ones (fp32), one compile, no recompile."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    prompts, gen = golden.tensors("prompts"), golden.tensors("generation")
    auto = Engine(model, compile="auto", compile_cache=tmp_path / "inductor")
    graphs = counters["stats"]["unique_graphs"]
    result = generate(auto, prompts["b_clone.batch0.prompt"], greedy(21))[0]
    assert torch.equal(result.columns, gen["b_clone.batch0.raw_new_columns"])
    assert counters["stats"]["unique_graphs"] - graphs <= 1
    assert auto.compile_choice.startswith(("auto: compiled", "auto: eager"))
    assert auto.compiled == auto.compile_choice.startswith("auto: compiled")
    meta = golden.json("generation")["sampled_b_seed42"]
    params = SamplingParams(meta["temperature"], meta["top_p"], meta["top_k"],
                            meta["max_new_tokens"])
    with torch._dynamo.config.patch(error_on_recompile=True):
        sampled = generate(auto, prompts["b_clone.batch0.prompt"], params, seed=meta["seed"])[0]
    assert torch.equal(sampled.columns, gen["sampled_b_seed42.raw_new_columns"])
    assert not auto.fallbacks
