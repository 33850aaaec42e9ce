"""bench/gpu_first.py, dry-run on the CPU with the tiny config: every stage runs in its own
process and reports, a stage forced to raise is recorded as an error while the next still runs,
stages that cannot fit the budget are skipped with a reason, and the JSON is complete."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(tmp_path, *extra):
    out = tmp_path / "gpu_first.json"
    cmd = [sys.executable, str(ROOT / "bench/gpu_first.py"), "--device", "cpu", "--config", "tiny",
           "--json", str(out), *extra]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(out.read_text()), done.stdout


def test_dry_run_reports_every_stage_even_after_one_fails(tmp_path):
    report, stdout = run(tmp_path, "--stages", "preflight,split-k,bf16-eager,fp8-dequant",
                         "--fail-stage", "bf16-eager", "--budget", "800")
    stages = report["stages"]
    assert list(stages) == ["preflight", "split-k", "bf16-eager", "fp8-dequant"]
    assert stages["split-k"]["result"]["skipped"].startswith("CUDA only")

    pre = stages["preflight"]
    assert pre["status"] == "ok", pre
    assert pre["result"]["torch"] and pre["result"]["copy_GB_per_s"] > 0
    assert set(pre["result"]["packages"]) >= {"triton", "torchao", "soundfile", "soxr"}
    assert report["bandwidth_GB_per_s"] == pre["result"]["copy_GB_per_s"]

    failed = stages["bf16-eager"]
    assert failed["status"] == "error" and "forced failure of stage bf16-eager" in failed["error"]

    fp8 = stages["fp8-dequant"]
    assert fp8["status"] == "ok", fp8
    row = fp8["result"]
    assert row["frames_per_s"] > 0 and row["bytes_per_frame"] > 0
    assert 0 < row["fraction_of_bound"]
    assert row["fp8_path"] == "dequant" and list(row["fp8_layer_paths"]) == ["dequant"]
    assert row["compiled"] is False and row["cuda_graph"] is False  # what really ran, on CPU
    assert isinstance(row["fallbacks"], list) and isinstance(row["warnings"], list)
    assert set(row["tuned"]) <= {"fp8", "int8", "int4"}  # the GEMVs' choices (none here)
    assert "| fp8-dequant | ok |" in stdout and "| bf16-eager | error |" in stdout
    assert 0 < row["process_to_first_frame_s"] <= row["process_to_first_decode_step_s"]

    # the diagnosis: one frame under the profiler (ops on the CPU dry run), and what each
    # distinct Linear really called (here the per-call dequantize, then the matmul)
    frame = row["diagnosis"]["frame"]
    assert frame["kernels_per_frame"] > 0 and frame["wall_us_per_frame"] > 0
    assert 0 < len(frame["top"]) <= 15
    assert all(0 <= t["share"] <= 1 and t["calls"] >= 1 for t in frame["top"])
    assert abs(frame["gemv_us"] + frame["other_us"] - frame["device_us_per_frame"]) < 1
    linears = row["diagnosis"]["linears"]
    assert {layer["class"] for layer in linears} == {"FP8Linear"}
    assert sum(layer["layers"] for layer in linears) == sum(row["fp8_layer_paths"].values())
    for layer in linears:
        assert layer["path"] == "dequant" and "aten::_to_copy" in layer["kernels"]
        assert "aten::mm" in layer["kernels"]
    assert "| fp8-dequant | " in stdout.split("GEMV share")[1]


def test_stages_past_the_budget_are_skipped_with_a_reason(tmp_path):
    report, stdout = run(tmp_path, "--stages", "codec,bf16-compiled", "--budget", "1")
    for name in ("codec", "bf16-compiled"):
        entry = report["stages"][name]
        assert entry["status"] == "skipped" and entry["reason"].startswith("budget:")
    # nothing measured, nothing decided: the defaults' table says so
    assert all(d["decided"] is None for d in report["decisions"].values())
    assert "| compile | off | undecided |" in stdout


def test_serving_stage_dry_run(tmp_path):
    report, stdout = run(tmp_path, "--stages", "serving", "--budget", "600")
    entry = report["stages"]["serving"]
    assert entry["status"] == "ok", entry
    row = entry["result"]
    assert row["alone"]["frames_per_s"] > 0 and row["together"]["frames_per_s"] > 0
    assert row["throughput_ratio"] > 0 and row["ttfa_ratio"] > 0
    assert row["join_prefix_computed_s"] > 0 and row["join_prefix_reused_s"] > 0
    assert row["prefix_hits"] == 1  # the second join reused the voice prefix
    assert "| serving | ok |" in stdout


def test_realsize_load_stage_dry_run(tmp_path):
    """The stand-in written in the real layout and loaded per precision, each in its own
    process: load seconds, the load's added peak over the weights' bytes."""
    report, stdout = run(tmp_path, "--stages", "realsize-load", "--budget", "600")
    entry = report["stages"]["realsize-load"]
    assert entry["status"] == "ok", entry
    row = entry["result"]
    assert row["checkpoint_GB"] > 0 and row["write_s"] >= 0
    assert list(row["loads"]) == ["bf16", "int8", "int4"]
    for precision, load in row["loads"].items():
        assert "error" not in load, (precision, load)
        assert load["precision"] == precision and load["load_s"] > 0 and load["weight_bytes"] > 0
        assert load["load_added_over_weights"] > 0
    assert row["loads"]["int4"]["weight_bytes"] < row["loads"]["bf16"]["weight_bytes"]
    assert "| realsize-load | ok |" in stdout


def test_ttfa_and_codec_precision_stages_dry_run(tmp_path):
    """Time to first audio by prompt length and first-chunk size, split into its parts, and the
    codec per precision against fp32 (the CPU dry run: short audio, no compile)."""
    from fish_core.engine.device import CODEC_FAST_SNR_DB
    from fish_core.params import FIRST_FRAMES

    report, stdout = run(tmp_path, "--stages", "ttfa,codec,codec-fast", "--budget", "800")
    ttfa = report["stages"]["ttfa"]
    assert ttfa["status"] == "ok", ttfa
    row = ttfa["result"]
    prefill = row["prefill_first_frame_s"]
    assert prefill and all(t > 0 for t in prefill.values())
    assert row["first_frame_graphs"] == 0  # no CUDA graph on the CPU
    # the same prefills padded to their buckets (graphed per bucket on CUDA: none here)
    assert row["prefill_buckets_default"] is False
    assert row["prefill_first_frame_bucketed_s"].keys() == prefill.keys()
    assert all(t > 0 for t in row["prefill_first_frame_bucketed_s"].values())
    assert row["prefill_captures"] == 0
    assert row["codec_first_chunk_graphs"] == 0 and row["codec_first_chunk_failures"] == {}
    assert row["join_profile"]["aten_ops"] > 0 and row["codec_decode_dtype"] == "float32"
    assert list(row["by_first_frames"]) == ["1", "2", "4", "8"]
    for parts in row["by_first_frames"].values():
        assert parts["ttfa_s"] > 0 and parts["prefill_and_frames_s"] > 0
        assert parts["codec_decode_s"] > 0
    assert row["first_frames_setting"] == FIRST_FRAMES
    assert row["ttfa_s"] == row["by_first_frames"][str(FIRST_FRAMES)]["ttfa_s"]

    # a stream's first chunk, eager against its graph (on the CPU the eager path both ways)
    first = report["stages"]["codec"]["result"]["first_chunk"]
    assert first["graphed_equals_eager"] and first["graphs"] == [] and first["failures"] == {}
    assert first["cudnn_benchmark_restored"] and first["first_chunk_ms"]["eager"] > 0

    codec = report["stages"]["codec-fast"]
    assert codec["status"] == "ok", codec
    precisions = codec["result"]["precisions"]
    assert list(precisions) == ["fp32", "fp16", "bf16"]  # compiled only on CUDA
    assert precisions["fp16"]["decode_snr_db"] >= CODEC_FAST_SNR_DB
    assert 0 <= precisions["bf16"]["encode_codes_equal"] <= 1
    assert all(p["encode_x_realtime"] > 0 and p["decode_x_realtime"] > 0
               for p in precisions.values())
    assert "| ttfa | ok |" in stdout and "| codec-fast | ok |" in stdout


def test_realsize_load_runs_only_when_named():
    sys.path.insert(0, str(ROOT / "bench"))
    import gpu_first

    defaults = [s.name for s in gpu_first.STAGES if s.default]
    assert "realsize-load" not in defaults and "ttfa" in defaults and "codec-fast" in defaults
    assert "realsize-load" in gpu_first.BY_NAME


def test_diagnosis_summary_counts_kernels_shares_and_gemv_time():
    sys.path.insert(0, str(ROOT / "bench"))
    import gpu_first

    events = [("void gemv_kernel<bf16>", 30.0), ("triton_red_fused_rms_norm_0", 10.0),
              ("void gemv_kernel<bf16>", 40.0), ("Memcpy DtoH", 5.0),
              ("ampere_bf16_s16816gemm_bf16_128x64", 15.0)]
    out = gpu_first.summarize(events, launches=1)
    assert out["kernels_per_frame"] == 5 and out["launch_calls_per_frame"] == 1
    assert out["device_us_per_frame"] == 100 and out["gemv_us"] == 85 and out["other_us"] == 15
    assert out["gemv_share"] == 0.85
    assert out["top"][0] == {"kernel": "void gemv_kernel<bf16>", "calls": 2, "us": 70.0,
                             "share": 0.7}
    assert [t["kernel"] for t in out["top"]][1:] == ["ampere_bf16_s16816gemm_bf16_128x64",
                                                     "triton_red_fused_rms_norm_0", "Memcpy DtoH"]
    many = gpu_first.summarize([(f"k{i}", 1.0) for i in range(40)], launches=40)
    assert len(many["top"]) == gpu_first.DIAGNOSIS_TOP == 15


def test_default_run_measures_the_quantized_and_warm_compiled_stages():
    sys.path.insert(0, str(ROOT / "bench"))
    import gpu_first

    names = [s.name for s in gpu_first.STAGES]
    for name in ("int8-gemv", "int4-gemv", "fp8-gemv-bits", "fp8-compiled", "int8-compiled",
                 "int4-compiled", "bf16-compiled-warm"):
        assert name in names
    assert names.index("bf16-compiled") < names.index("bf16-compiled-warm")
    assert gpu_first.BY_NAME["int8"].env == gpu_first.TORCHAO_INT
    assert gpu_first.BY_NAME["int8-gemv"].env == gpu_first.TRITON_INT


def test_parity_stage_replays_the_goldens_and_bf16_graph_times_a_streams_first_audio(
        tmp_path, fixtures):
    """The stage a GPU run starts with: the goldens on the device (here the CPU dry run, eager
    only): every greedy golden batch and the seeded run equal, the codec's codes equal. Then
    bf16-graph's TTFA is a stream's: ``FIRST_FRAMES`` frames, the codec in the device's
    default decode precision (fp16 on CUDA, fp32 here)."""
    from fish_core.params import FIRST_FRAMES

    report, stdout = run(tmp_path, "--stages", "parity,bf16-graph", "--budget", "600")
    graph = report["stages"]["bf16-graph"]["result"]
    assert graph["time_to_first_audio_s"] > 0 and graph["ttfa_frames"] == FIRST_FRAMES
    assert graph["ttfa_codec_dtype"] == "float32"
    entry = report["stages"]["parity"]
    assert entry["status"] == "ok", entry
    result = entry["result"]
    if not (fixtures / "golden").is_dir():
        assert result["skipped"] == "the fixture set has no goldens"
        return
    prompts = json.loads((fixtures / "golden/prompts.json").read_text())
    batches = sum(len(v["batches"]) for v in prompts.values()
                  if isinstance(v, dict) and "batches" in v)
    assert len(result["eager"]) == batches + 1 and "sampled_b_seed42" in result["eager"]
    assert result["eager-buckets"].keys() == result["eager"].keys()  # bucketed prefills too
    assert "graph" not in result  # CUDA graphs: on CUDA only
    assert result["all_equal"] and result["unequal"] == [], result
    assert result["codec"]["encode_codes_equal"] and result["codec"]["decode_max_abs_err"] < 1e-4
    assert '| parity | ok | {"all_equal": true, "unequal": []}' in stdout


def test_the_default_run_measures_in_the_issues_order():
    """parity, bf16 graph, our FP8/int8/int4 GEMVs in graph mode, TTFA, codec, serving, then
    the compiled stages (torchao's int8 compiled among them)."""
    sys.path.insert(0, str(ROOT / "bench"))
    import gpu_first

    names = [s.name for s in gpu_first.STAGES if s.default]
    first = ["preflight", "parity", "bf16-graph", "fp8-gemv", "int8-gemv", "int4-gemv", "ttfa",
             "codec", "serving"]
    assert names[:len(first)] == first
    compiled = [s.name for s in gpu_first.STAGES if s.mode == "compiled"]
    assert "int8-torchao-compiled" in compiled
    assert min(names.index(n) for n in compiled) > names.index("serving")
    assert gpu_first.BY_NAME["int8-torchao-compiled"].env == gpu_first.TORCHAO_INT


def test_the_run_writes_the_defaults_it_decides():
    """Issue 46, item 5: our int8/int4 GEMV becomes the CUDA default where it beats torchao in
    graph mode; compile goes on only with a warm second start within the limit AND a faster
    frame; a stage that did not run leaves its default undecided, with the reason."""
    sys.path.insert(0, str(ROOT / "bench"))
    import gpu_first
    from quant.convert import AUTO_INT_KERNEL

    def ok(**result):
        return {"status": "ok", "result": result}

    limit = gpu_first.WARM_START_LIMIT_S
    report = {"stages": {
        "bf16-graph": ok(frames_per_s=100.0), "bf16-compiled": ok(frames_per_s=130.0),
        "bf16-compiled-warm": ok(process_to_first_frame_s=limit + 1, frames_per_s=130.0),
        "int8-gemv": ok(frames_per_s=160.0), "int8": ok(frames_per_s=80.0),
        "int4-gemv": ok(frames_per_s=150.0),
        "int4": {"status": "skipped", "reason": "torchao does not import here"}}}
    d = gpu_first.decisions(report)
    assert d["int8"]["decided"] == "triton" and d["int8"]["speedup"] == 2.0
    assert d["int8"]["current"] == AUTO_INT_KERNEL
    assert d["int4"]["decided"] is None and "int4 did not run" in d["int4"]["reason"]
    assert d["compile"]["decided"] == "off" and d["compile"]["warm_start_ok"] is False
    assert d["compile"]["compiled_faster"] is True

    report["stages"]["bf16-compiled-warm"] = ok(process_to_first_frame_s=limit)
    report["stages"]["int8"] = ok(frames_per_s=170.0)
    d = gpu_first.decisions(report)
    assert d["compile"]["decided"] == "on" and d["int8"]["decided"] == "torchao"

    report["stages"]["bf16-compiled"] = ok(frames_per_s=90.0)  # quick, but slower than graph
    assert gpu_first.decisions(report)["compile"]["decided"] == "off"
    del report["stages"]["bf16-graph"]
    assert gpu_first.decisions(report)["compile"]["decided"] is None

    # bucketed prefills: on only if the goldens hold with them on CUDA and they are quicker
    assert d["prefill_buckets"]["decided"] is None  # no parity on CUDA, no ttfa
    report["stages"]["parity"] = ok(**{"graph-buckets": {"a": True, "sampled_b_seed42": True}})
    report["stages"]["ttfa"] = ok(prefill_first_frame_s={"64": 0.02, "256": 0.03},
                                  prefill_first_frame_bucketed_s={"64": 0.01, "256": 0.02})
    buckets = gpu_first.decisions(report)["prefill_buckets"]
    assert buckets["decided"] == "on" and buckets["bucketed_s"] < buckets["plain_s"]
    report["stages"]["parity"]["result"]["graph-buckets"]["a"] = False
    assert gpu_first.decisions(report)["prefill_buckets"]["decided"] == "off"
