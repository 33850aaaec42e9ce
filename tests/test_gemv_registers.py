"""bench/gemv_registers.py: every configuration the autotuner may pick, split-K ones included,
compiled for sm_90 by Triton and assembled by the system's ``ptxas -v`` (skipped without Triton
or ptxas): none above 128 registers a thread, none spilling. The other architectures and K
values are the bench's full run (``python bench/gemv_registers.py``)."""

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))


@pytest.mark.slow
def test_every_config_within_128_registers_without_spills_on_sm_90(tmp_path):
    pytest.importorskip("triton")
    if not shutil.which("ptxas"):
        pytest.skip("no ptxas on this machine")
    import gemv_registers
    from quant import int_gemv

    report = gemv_registers.main(["--arch", "90", "--k", "2560", "--json",
                                  str(tmp_path / "regs.json")])
    configs = {name: gemv_registers.configs(name) for name in ("fp8", "fp8-bits", "int8", "int4")}
    assert report["total"] == sum(map(len, configs.values()))
    assert any(config[4] > 1 for config in int_gemv.fp8_gemv.CLASS_CONFIGS["datacenter"])
    assert any(row["config"][4] > 1 for row in report["rows"])  # split-K configurations too
    bad = [row for row in report["rows"] if not row["ok"]]
    assert not bad, bad
    assert all(row["registers"] <= gemv_registers.REGISTER_LIMIT for row in report["rows"])
