"""Registers and spills of every Triton GEMV configuration, per GPU architecture, without a GPU.

    python bench/gemv_registers.py                      # sm_80, sm_86, sm_89, sm_90; K = 9728
    python bench/gemv_registers.py --arch 90 --k 2560,9728 --json regs.json

Each kernel (``fp8`` with Triton's e4m3 conversion where the architecture has it, ``fp8-bits``
with our bit decode, ``int8``, ``int4``) is compiled by Triton for the architecture (its PTX),
then assembled by the system's ``ptxas -v`` (the PTX ``.version`` lowered to what that ptxas
reads), which prints the registers a thread uses and the bytes it spills. A memory-bound GEMV
needs many warps resident to keep bytes in flight: more than 128 registers a thread halves
them, and a spill adds local-memory traffic to every K step. Every configuration the autotuner
may pick is listed (``int_gemv.class_configs``: both device classes, split-K ones included:
``[BLOCK_N, BLOCK_K, warps, stages, SPLIT_K]``) with ``ok`` when it neither spills nor uses more
than ``--limit`` registers.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ARCHS = (80, 86, 89, 90)
REGISTER_LIMIT = 128


def kernels() -> dict:
    """name → (jit function, signature, constexprs but the config's, lowest architecture)."""
    from quant import fp8_gemv, int_gemv

    x = {"x_ptr": "*bf16", "y_ptr": "*bf16", "part_ptr": "*fp32", "count_ptr": "*i32",
         "N": "i32", "ROWS": "i32", "K": "constexpr", "BLOCK_N": "constexpr",
         "BLOCK_K": "constexpr", "SPLIT_K": "constexpr"}
    fp8 = {**x, "q_ptr": "*fp8e4nv", "scale_ptr": "*fp32", "BITS": "constexpr"}
    fp8_bits = {**fp8, "q_ptr": "*u8"}
    int8 = {**x, "q_ptr": "*i8", "s_ptr": "*fp32"}
    int4 = {**x, "p_ptr": "*u8", "sz_ptr": "*bf16", "GROUP_SIZE": "constexpr"}
    return {"fp8": (fp8_gemv._gemv_kernel, fp8, {"BITS": False}, 89),
            "fp8-bits": (fp8_gemv._gemv_kernel, fp8_bits, {"BITS": True}, 80),
            "int8": (int_gemv._int8_kernel, int8, {}, 80),
            "int4": (int_gemv._int4_kernel, int4, {"GROUP_SIZE": int_gemv.GROUP}, 80)}


def ptx_for(fn, signature: dict, constexprs: dict, arch: int, warps: int, stages: int) -> str:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    params = fn.arg_names
    src = ASTSource(fn=fn, signature={p: signature[p] for p in params},
                    constexprs={k: v for k, v in constexprs.items()})
    compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32),
                              options={"num_warps": warps, "num_stages": stages})
    return compiled.asm["ptx"]


def ptxas_report(ptx: str, arch: int, ptxas: str) -> dict:
    """Registers and spill bytes from ``ptxas -v`` (PTX version lowered to what it reads)."""
    version = subprocess.run([ptxas, "--version"], capture_output=True, text=True).stdout
    have = re.search(r"release (\d+)\.(\d+)", version)
    ptx_version = {(12, 8): "8.7", (12, 9): "8.8", (13, 0): "9.0"}.get(
        (int(have[1]), int(have[2])) if have else (0, 0), "8.7")
    ptx = re.sub(r"^\.version \S+", f".version {ptx_version}", ptx, count=1, flags=re.M)
    target = f"sm_{arch}a" if arch == 90 else f"sm_{arch}"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.ptx"
        path.write_text(ptx)
        run = subprocess.run([ptxas, "-v", f"-arch={target}", str(path), "-o", "/dev/null"],
                             capture_output=True, text=True)
    text = run.stdout + run.stderr
    if run.returncode:
        return {"error": text.strip().splitlines()[-1][:200]}
    regs = re.search(r"Used (\d+) registers", text)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", text)
    return {"registers": int(regs[1]),
            "spill_stores": int(spills[1]) if spills else 0,
            "spill_loads": int(spills[2]) if spills else 0}


def configs(kernel: str) -> list[tuple[str, tuple]]:
    """(device class, (BLOCK_N, BLOCK_K, warps, stages, SPLIT_K)) of every configuration the
    autotuner may pick for ``kernel``, split ones included."""
    from quant import int_gemv

    seen, out = set(), []
    for cls, rows in int_gemv.class_configs("int4" if kernel == "int4" else "int8").items():
        for row in rows:
            if row not in seen:
                seen.add(row)
                out.append((cls, row))
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default=",".join(map(str, ARCHS)))
    ap.add_argument("--k", default="9728", help="K values (the constexpr the kernel unrolls)")
    ap.add_argument("--kernels", default="fp8,fp8-bits,int8,int4")
    ap.add_argument("--limit", type=int, default=REGISTER_LIMIT)
    ap.add_argument("--ptxas", default=shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    table = kernels()
    rows = []
    for name in args.kernels.split(","):
        fn, signature, fixed, lowest = table[name]
        for arch in map(int, args.arch.split(",")):
            if arch < lowest:
                continue
            for k in map(int, args.k.split(",")):
                for cls, (bn, bk, warps, stages, split) in configs(name):
                    block_k = bk // 2 if name == "int4" else bk  # int4 counts bytes
                    row = {"kernel": name, "arch": f"sm_{arch}", "K": k, "class": cls,
                           "config": [bn, bk, warps, stages, split]}
                    try:
                        ptx = ptx_for(fn, signature, {**fixed, "K": k, "BLOCK_N": bn,
                                                      "BLOCK_K": block_k, "SPLIT_K": split},
                                      arch, warps, stages)
                        row.update(ptxas_report(ptx, arch, args.ptxas))
                    except Exception as e:  # noqa: BLE001 - reported in the row
                        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
                    row["ok"] = ("registers" in row and row["registers"] <= args.limit
                                 and not row["spill_stores"] and not row["spill_loads"])
                    rows.append(row)
                    print(f"{name:9} {row['arch']} K={k:<5} {str(row['config']):21} "
                          + (f"{row['registers']:3} regs  spill {row['spill_stores']}/"
                             f"{row['spill_loads']} B  {'ok' if row['ok'] else 'OVER'}"
                             if "registers" in row else row.get("error", "")), flush=True)
    report = {"limit": args.limit, "rows": rows,
              "ok": sum(r["ok"] for r in rows), "total": len(rows)}
    print(f"{report['ok']} of {report['total']} configurations within {args.limit} registers "
          "and without spills")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return report


if __name__ == "__main__":
    main()
