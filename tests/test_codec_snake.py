"""The codec's Snake activation (``fish_core/codec/snake.py``): the eager formula on the CPU bit
for bit as before, one op routed like the engine's fused pieces, the Triton kernel within stated
tolerances of the formula (Triton's interpreter), the goldens with the kernel in the codec."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fish_core.codec.layers import Snake
from fish_core.codec.snake import snake_eager
from fish_core.engine import fused

ROOT = Path(__file__).resolve().parents[1]


def before(snake: Snake, x: torch.Tensor) -> torch.Tensor:
    """What ``Snake.forward`` ran before the op: the inverse recomputed every call."""
    inverse = (snake.alpha.float() + 1e-9).reciprocal().to(x.dtype)
    y = torch.sin(snake.alpha * x)
    y.pow_(2).mul_(inverse)
    return y.add_(x)


def interpreted(script: str, *args: str) -> dict:
    """``script``'s last line of JSON, run in a fresh process under Triton's interpreter."""
    pytest.importorskip("triton")
    run = subprocess.run([sys.executable, "-c", script, *args], cwd=ROOT, check=False,
                         env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True,
                         text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.splitlines()[-1])


def random_snake(channels: int, seed: int = 0) -> Snake:
    g = torch.Generator().manual_seed(seed)
    snake = Snake(channels).requires_grad_(False)
    snake.alpha.copy_(torch.rand(1, channels, 1, generator=g) * 2 + 0.05)
    return snake


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cpu_snake_is_the_eager_formula_bit_for_bit(dtype):
    """On the CPU: directly and through the op (``fused.everywhere``), exactly as before."""
    snake = random_snake(6).to(dtype)
    x = (torch.randn(2, 6, 300, generator=torch.Generator().manual_seed(1)) * 3).to(dtype)
    want = before(snake, x)
    with torch.no_grad():
        assert torch.equal(snake(x), want)
        with fused.everywhere():
            assert torch.equal(snake(x), want)
        strided = x.transpose(1, 2).contiguous().transpose(1, 2)  # a transformer's output
        assert torch.equal(snake(strided), want)


def test_inverse_computed_once_and_again_when_alpha_changes():
    snake = random_snake(4)
    first = snake.inverse_for(torch.float32)
    assert snake.inverse_for(torch.float32) is first  # no work per call
    x = torch.randn(1, 4, 50)
    with torch.no_grad():
        snake.alpha.mul_(3)  # in place through the parameter
        assert not torch.equal(snake.inverse_for(torch.float32), first)
        assert torch.equal(snake(x), before(snake, x))
        snake.half()  # cast: fp16 alpha, fp16 inverse
        assert snake.inverse_for(torch.float16).dtype == torch.float16
        assert torch.equal(snake(x.half()), before(snake, x.half()))
        snake.float()  # back: the fp16-rounded alpha's inverse, not the first one's
        assert torch.equal(snake(x), before(snake, x))
        snake.alpha = torch.nn.Parameter(torch.full((1, 4, 1), 0.5), requires_grad=False)
        assert torch.equal(snake.inverse_for(torch.float32), torch.full((1, 4, 1), 2.0))
        assert torch.equal(snake(x), before(snake, x))


def test_weights_made_in_inference_mode():
    """ComfyUI loads and runs models under ``torch.inference_mode``: their tensors have no
    version counter, and the inverse is still computed once and again on a new alpha."""
    x = torch.randn(1, 4, 50)
    with torch.inference_mode():
        snake = random_snake(4)
        assert snake.alpha.is_inference()
        first = snake.inverse_for(torch.float32)
        assert torch.equal(snake(x), before(snake, x))
        assert snake.inverse_for(torch.float32) is first
        snake.half()
        assert torch.equal(snake(x.half()), before(snake, x.half()))
    assert torch.equal(snake(x.half()), before(snake, x.half()))  # and outside the mode


INTERPRETER_CHECK = r"""
import json, torch
from fish_core.codec.snake import _snake, snake_eager
out = {}
g = torch.Generator().manual_seed(0)
for dtype in (torch.float32, torch.float16, torch.bfloat16):
    x = (torch.randn(2, 5, 3000, generator=g) * 3).to(dtype)
    alpha = (torch.rand(1, 5, 1, generator=g) * 2 + 0.05).to(dtype)
    inverse = (alpha.float() + 1e-9).reciprocal().to(dtype)
    exact = snake_eager(x.double(), alpha.double(), inverse.double())
    scale = float(exact.abs().max())
    for name, got in (("kernel", _snake(x, alpha, inverse)),
                      ("strided", _snake(x.transpose(1, 2).contiguous().transpose(1, 2),
                                         alpha, inverse)),
                      ("eager", snake_eager(x, alpha, inverse))):
        assert got.dtype == dtype and got.shape == x.shape
        out[f"{name} {dtype}"] = float((got.double() - exact).abs().max()) / scale
import fish_core.codec.snake as module
module.MAX_GRID_Y = 2  # a row longer than CUDA's grid allows: the eager formula, exactly
past = {"grid": bool(torch.equal(_snake(x, alpha, inverse), snake_eager(x, alpha, inverse)))}
print(json.dumps({**out, **past}))
"""


def test_triton_snake_within_rounding_of_the_formula():
    """The kernel in Triton's interpreter against the formula in fp64, errors relative to the
    largest output: in fp32 within a few fp32 roundings (the sine's and the products'), as eager
    fp32 is; in fp16 within a rounding of the dtype and never worse than eager (which rounds
    each of its four steps); in bf16 within two roundings (the interpreter casts fp32 to bf16
    by its own rule, not the GPU's round-to-nearest-even: test_fused's bound)."""
    out = interpreted(INTERPRETER_CHECK)
    assert out.pop("grid")  # past CUDA's grid: the eager formula
    assert len(out) == 9
    for dtype, tolerance in (("float32", 4 * 2.0 ** -24), ("float16", 2.0 ** -11),
                             ("bfloat16", 2.0 ** -6)):
        kernel, eager = out[f"kernel torch.{dtype}"], out[f"eager torch.{dtype}"]
        assert kernel <= tolerance, (dtype, kernel)
        assert out[f"strided torch.{dtype}"] == kernel
        if dtype != "bfloat16":
            assert kernel <= max(eager, 2.0 ** -24), (dtype, kernel, eager)


GOLDEN_CHECK = r"""
import json, sys, torch
from pathlib import Path
from safetensors.torch import load_file
from fish_core.codec import layers, snake
from fish_core.codec.model import Codec
from fish_core.engine import fused
calls = [0]
kernel = snake._snake_kernel
class Counted:
    def __getitem__(self, grid):
        calls[0] += 1
        return kernel[grid]
snake._snake_kernel = Counted()
fixtures = Path(sys.argv[1])
codec = Codec.from_file(fixtures / "tiny-s2")
gold = load_file(str(fixtures / "golden" / "codec.safetensors"))
with fused.everywhere():  # every Snake through the op: the Triton kernel, interpreted
    wave = codec.decode(gold["codes"])[0, 0]
    decoded = calls[0]
    codes = codec.encode(gold["wave"])[0]
snakes = sum(isinstance(m, layers.Snake) for m in codec.decoder.modules())
print(json.dumps({"decode_error": float((wave - gold["decode"]).abs().max()),
                  "decoder_snakes": snakes,
                  "codes_equal": torch.equal(codes, gold["codes"]),
                  "decode_kernels": decoded, "kernels": calls[0]}))
"""


def test_codec_goldens_with_the_triton_snake(fixtures, golden_dir):
    """The whole fixture codec with every Snake in the Triton kernel (interpreted): encode
    gives the golden codes exactly, decode the golden waveform within test_codec's 1e-4."""
    out = interpreted(GOLDEN_CHECK, str(fixtures))
    assert out["decode_kernels"] >= out["decoder_snakes"] > 0  # once a Snake a chunk at least
    assert out["kernels"] > out["decode_kernels"]  # and in the encoder
    assert out["codes_equal"]
    assert out["decode_error"] <= 1e-4


def test_snake_eager_is_in_place_on_its_own_buffer():
    x = torch.randn(1, 3, 20)
    alpha = torch.rand(1, 3, 1) + 0.5
    copy = x.clone()
    snake_eager(x, alpha, 1 / alpha)
    assert torch.equal(x, copy)  # the input is never written


SECOND_IMPORT = r"""
import sys, types
import torch
from fish_core.codec import snake
pack = types.ModuleType("pack")
pack.__path__ = [sys.argv[1]]
sys.modules["pack"] = pack
import pack.fish_core.codec.snake as again
assert again is not snake and again.snake_op is snake.snake_op is torch.ops.sailfish.snake
x, alpha = torch.randn(1, 2, 9), torch.rand(1, 2, 1) + 0.5
assert torch.equal(again.snake_op(x, alpha, 1 / alpha), snake.snake_eager(x, alpha, 1 / alpha))
print("ok")
"""


def test_a_second_import_of_the_pack_defines_the_op_once():
    """ComfyUI imports the pack under its folder's name beside the top-level one: the op is
    defined once, both copies call it (``tests/test_ops.py`` for the other ops)."""
    run = subprocess.run([sys.executable, "-c", SECOND_IMPORT, str(ROOT)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["ok"]
