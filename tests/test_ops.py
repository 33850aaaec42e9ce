"""quant.ops (and fish_core.engine.fused's own guard): the pack imported under a second
package name in the same process, as ComfyUI's ``custom_nodes`` name beside a top-level import,
defines none of its custom ops again; the first module's ops stay registered and callable."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import gc, sys, types
import torch
import quant
from quant import cpu_gemv, fp8_gemv, int_gemv
from fish_core.engine import fused

first = {"int8_gemv": cpu_gemv.int8_gemv, "fp8_gemv": fp8_gemv.fp8_gemv,
         "int8_triton_gemv": int_gemv.int8_gemv, "int4_triton_gemv": int_gemv.int4_gemv,
         "rms_norm": fused.rms_norm_op, "add_rms_norm": fused.add_rms_norm_op,
         "qk_rope": fused.qk_rope_op, "silu_mul": fused.silu_mul_op,
         "qk_rope_store": fused.qk_rope_store_op}
pack = types.ModuleType("pack")
pack.__path__ = [ROOT]
sys.modules["pack"] = pack
import pack.quant.cpu_gemv, pack.quant.fp8_gemv, pack.quant.int_gemv, pack.fish_core.engine.fused
again = {"int8_gemv": pack.quant.cpu_gemv.int8_gemv, "fp8_gemv": pack.quant.fp8_gemv.fp8_gemv,
         "int8_triton_gemv": pack.quant.int_gemv.int8_gemv,
         "int4_triton_gemv": pack.quant.int_gemv.int4_gemv,
         "rms_norm": pack.fish_core.engine.fused.rms_norm_op,
         "add_rms_norm": pack.fish_core.engine.fused.add_rms_norm_op,
         "qk_rope": pack.fish_core.engine.fused.qk_rope_op,
         "silu_mul": pack.fish_core.engine.fused.silu_mul_op,
         "qk_rope_store": pack.fish_core.engine.fused.qk_rope_store_op}
assert pack.quant.cpu_gemv is not cpu_gemv  # two copies of the module ...
for key in [k for k in sys.modules if k == "pack" or k.startswith("pack.")]:
    del sys.modules[key]
del pack
gc.collect()
for name, op in first.items():  # ... one op each, still the dispatcher's
    assert again[name] is op and getattr(torch.ops.sailfish, name) is op, name
x, weight = torch.randn(3, 16), torch.rand(16) + 0.5
expected = fused.rms_norm_reference(x, weight, 1e-6)
for _ in range(3):
    assert torch.equal(fused.rms_norm_op(x, weight, 1e-6), expected)
print("ok", len(first))
"""


def test_a_second_import_of_the_pack_defines_no_op_again():
    script = f"ROOT = {str(ROOT)!r}\nimport sys\nsys.path.insert(0, ROOT)\n" + SCRIPT
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["ok", "9"]
