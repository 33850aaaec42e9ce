"""The README runs as written, on the tiny checkpoint and offline: its Python blocks, the command
lines of "Try it in two minutes", "Quick start: command line", "Finished audio" and "Quick
start: HTTP", and the
computed figures of its requirements table.

Each block runs in a fresh folder holding the files it names (``me.wav``, ``dialogue.txt`` …),
with ``sailfish`` on ``PATH`` (``python -m fish_core``) and a models folder
(``SAILFISH_MODELS_DIR``) in which ``s2-pro`` is the fixture checkpoint, so ``--model s2-pro``
and ``Synthesizer.from_pretrained("s2-pro")`` load it without a download. The ``git clone``,
``venv`` and ``pip install`` lines are the packaging test's (tests/test_packaging.py); the HTTP
block's port is the only text changed (a free one for 8080)."""

from __future__ import annotations

import json
import math
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from conftest import fixtures_dir

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
TIMEOUT = 900


def sections() -> dict[str, str]:
    """``## heading`` → its text."""
    parts = re.split(r"^## (.+)$", README, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2]))


def blocks(section: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", sections()[section], re.DOTALL | re.MULTILINE)


def tone(path: Path, seconds: float, hz: float, rate: int = 44100) -> None:
    t = np.arange(int(seconds * rate)) / rate
    sf.write(path, 0.3 * np.sin(2 * math.pi * hz * t) * (0.6 + 0.4 * np.sin(6 * t)), rate)


@pytest.fixture
def workdir(tmp_path, tiny_synth):
    """A folder with the files the README's commands name, ``sailfish`` on PATH, and ``s2-pro``
    in the models folder being the fixture checkpoint."""
    work = tmp_path / "work"
    (work / "tests" / "fixtures").mkdir(parents=True)
    (work / "tests" / "fixtures" / "tiny-s2").symlink_to(fixtures_dir() / "tiny-s2")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "s2-pro").symlink_to(fixtures_dir() / "tiny-s2")
    # me.wav: shaped noise, in which the tiny Qwen3-ASR hears words (a clip given without
    # them is heard: the ASR is in the models folder, as the first-use download puts it)
    rng = np.random.default_rng(11)
    n = int(2.5 * 22050)
    envelope = np.sin(np.arange(n) / 22050 * 2 * np.pi * 1.1) > -0.2
    sf.write(work / "me.wav", (0.25 * rng.standard_normal(n) * envelope).astype(np.float32),
             22050)
    if (fixtures_dir() / "aligner" / "tiny-asr").is_dir():
        (tmp_path / "models" / "qwen3-asr-0.6b").symlink_to(fixtures_dir() / "aligner"
                                                              / "tiny-asr")
    for name, hz in (("alice", 220.0), ("bob", 130.0)):
        tone(tmp_path / f"{name}.wav", 1.0, hz)
        voice = tiny_synth.encode_voice(tmp_path / f"{name}.wav", f"I am {name}.", name=name)
        voice.save(work / f"{name}.safetensors")
    (work / "dialogue.txt").write_text("Alice: Hello Bob.\nBob: Hello Alice.\n")
    (work / "film.srt").write_text("1\n00:00:00,200 --> 00:00:01,000\nHello.\n\n"
                                   "2\n00:00:01,500 --> 00:00:02,500\nGoodbye.\n")
    (work / "story.txt").write_text("Once upon a time. The end.\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sailfish").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m fish_core "$@"\n')
    (bin_dir / "sailfish").chmod(0o755)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "SAILFISH_MODELS_DIR": str(tmp_path / "models"), "PYTHONPATH": str(ROOT),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    return work, env


def run_bash(script: str, work: Path, env: dict) -> None:
    proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=work, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, f"{script}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"


def audio(path: Path) -> float:
    """Seconds of audio in ``path`` (it must be a readable, non-empty audio file)."""
    info = sf.info(path)
    assert info.frames > 0, path
    return info.duration


def test_try_it_in_two_minutes(workdir):
    work, env = workdir
    commands = [line for block in blocks("Try it in two minutes", "bash")
                for line in block.splitlines() if line.startswith("sailfish ")]
    assert len(commands) == 2 and "--model tests/fixtures/tiny-s2" in commands[0]
    assert "noise" in sections()["Try it in two minutes"]  # it says what the tiny model gives
    run_bash("\n".join(commands), work, env)
    assert audio(work / "noise.wav") > 0 and audio(work / "hello.wav") > 0


def test_command_line_quick_start(workdir):
    work, env = workdir
    (block,) = blocks("Quick start: command line", "bash")
    run_bash(block, work, env)
    for name in ("hello.wav", "mine.mp3", "clip.wav", "talk.wav", "film.wav",
                 *(f"story-{k}.flac" for k in (1, 2, 3))):
        audio(work / name)
    assert audio(work / "film.wav") >= 2.0 and "-->" in (work / "generated.srt").read_text()
    from fish_core import Voice

    assert Voice.load(work / "me.safetensors").name == "me"


def test_finished_audio(workdir):
    work, env = workdir
    (work / "words.tsv").write_text("# word<TAB>respelling\nonce\twunce\n")
    (block,) = blocks("Finished audio", "bash")
    lines = block.strip().splitlines()
    takes = next(i for i, line in enumerate(lines) if "--takes 3" in line)
    run_bash("\n".join(lines[:takes + 1]), work, env)
    for name in ("intro.wav", "take-1.wav", "take-2.wav", "take-3.wav"):
        audio(work / name)
    # The take "you liked": what a random checkpoint happened to say may be too short for a
    # voice (under 0.5 s), so take 2 is replaced by a clip of a known length before casting.
    tone(work / "take-2.wav", 1.5, 200.0)
    run_bash("\n".join(lines[takes + 1:]), work, env)
    audio(work / "chapter1.wav")
    assert (work / "story" / "chapters.json").is_file()
    from fish_core import Voice

    assert Voice.load(work / "narrator.safetensors").clips


def test_python_quick_start(workdir):
    work, env = workdir
    (code,) = blocks("Quick start: Python", "python")
    proc = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True,
                          text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert re.fullmatch(r"\d+\.\d s of speech, seed 1\n", proc.stdout)
    audio(work / "hello.wav")
    assert sf.info(work / "mine.mp3").format == "MP3"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_http_quick_start(workdir):
    pytest.importorskip("openai", reason="the README's HTTP client is the openai SDK")
    work, env = workdir
    (commands,) = blocks("Quick start: HTTP", "bash")
    (code,) = blocks("Quick start: HTTP", "python")
    encode, serve = commands.strip().splitlines()
    assert serve.startswith("sailfish serve") and "8080" in code
    run_bash(encode, work, env)
    port = free_port()
    server = subprocess.Popen(["bash", "-c", f"exec {serve} --port {port}"], cwd=work, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if json.load(r).get("status") == "ok":
                        break
            except OSError:
                assert server.poll() is None, server.stderr.read()
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.5)
        proc = subprocess.run([sys.executable, "-c", code.replace("8080", str(port))], cwd=work,
                              env=env, capture_output=True, text=True, timeout=TIMEOUT)
        assert proc.returncode == 0, proc.stderr[-4000:]
    finally:
        server.terminate()
        server.wait(30)
    assert sf.info(work / "hello.mp3").format == "MP3"


def test_every_python_block_is_run_here():
    """A Python block added to the README without a test here fails this test."""
    found = re.findall(r"^```python$", README, flags=re.MULTILINE)
    assert (len(found) == len(blocks("Quick start: Python", "python")) +
            len(blocks("Quick start: HTTP", "python")))


# ---------------------------------------------------------------- the requirements table
GB = 1e9
KV_TOKENS = 4096  # the context the table counts the KV cache at


def computed_figures() -> dict[str, dict[str, float]]:
    """Each row's weights, GPU and CPU figures, computed as the README says: the real model's
    shapes (config and manifest) as each mode stores them, the codec, the KV cache at
    ``KV_TOKENS`` and, on a GPU, the CUDA-graph pool."""
    import torch

    import quant
    from fish_core.engine.config import ModelConfig
    from fish_core.loading.checkpoint import build_meta

    fixtures = ROOT / "tests" / "fixtures"
    manifest = json.loads((fixtures / "real-s2-manifest.json").read_text())
    config = ModelConfig.from_file(fixtures / "real-s2-config.json")
    codec_params = manifest["codec"]["n_params"]
    # on a GPU the codec encodes in fp32 and decodes in fp16 (engine.device.codec_dtypes_for):
    # the encode path is the encoder and the quantizer's way in (codec.model.set_precision)
    encode_path = ("encoder.", "quantizer.downsample", "quantizer.pre_module",
                   "quantizer.semantic_quantizer", "quantizer.quantizer")
    encode_params = sum(math.prod(t["shape"]) for t in manifest["codec"]["tensors"]
                        if t["key"].startswith(encode_path))
    codec_gpu = encode_params * 4 + (codec_params - encode_params) * 2
    rows = {"bf16": ("none", torch.bfloat16), "fp32": ("none", torch.float32),
            "`fp8`": ("fp8", torch.bfloat16), "`int8`": ("int8", torch.bfloat16),
            "`fp8-dynamic`": ("fp8-dynamic", torch.bfloat16), "`int4`": ("int4", torch.bfloat16),
            "`nvfp4`": ("nvfp4", torch.bfloat16)}
    text = config.text
    out = {}
    for row, (mode, dtype) in rows.items():
        size = torch.tensor([], dtype=dtype).element_size()
        model = build_meta(config, dtype)
        weights = quant.planned_bytes(model, mode)
        cpu_weights = quant.planned_bytes(model, "none" if mode == "fp8" else mode)  # dequantized
        kv = 2 * text.n_layer * text.n_local_heads * text.head_dim * size * KV_TOKENS
        out[row] = {"weights": weights / GB,
                    "gpu": (weights + codec_gpu + kv + (256 << 20)) / GB,
                    "cpu": (cpu_weights + codec_params * 4 + kv) / GB}
    assert round(manifest["llm"]["n_params"] * 2 / GB, 1) == round(out["bf16"]["weights"], 1)
    return out


def test_requirements_table_matches_the_computation():
    table = [line for line in sections()["Requirements"].splitlines()
             if line.startswith("| ") and not line.startswith("| precision")]
    figures = computed_figures()
    checked = 0
    for line in table:
        cells = [c.strip() for c in line.strip("|").split("|")]
        row = next((name for name in figures if cells[0].startswith(name)), None)
        assert row is not None, f"a row the test does not compute: {cells[0]}"
        want = figures[row]
        assert cells[1] == f"{want['weights']:.1f} GB", (row, cells[1])
        for cell, key in ((cells[2], "gpu"), (cells[3], "cpu")):
            if "computed" in cell:  # measured figures replace these; they are not recomputed
                assert cell.startswith(f"{want[key]:.1f} GB"), (row, key, cell, want[key])
                checked += 1
    assert checked >= 10


def test_the_test_commands_are_real():
    """The README's test command is what CI runs, and its quick subset names existing files."""
    full, quick = blocks("Tests", "bash")
    assert full.strip().endswith("&& bash tests/run_all.sh")
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash tests/run_all.sh" in ci
    # the same packages: what the README's reader installs is what CI tests with
    steps = [step.strip() for step in full.split("&&")]
    readme_setup = next(s for s in steps if s.startswith("pip install")).split()[2:]
    ci_setup = re.search(r"pip install (.*?)\n\s*#", ci, re.DOTALL).group(1)
    ci_setup = [w for w in ci_setup.replace("\\", " ").split() if not w.startswith("--")]
    assert sorted(readme_setup) == sorted(ci_setup)
    # both in a fresh virtual environment, as a contributor sets one up
    assert steps[0] == "python3 -m venv .venv" and "python3 -m venv" in ci
    files = re.findall(r"tests/\S+\.py", quick)
    assert files and all((ROOT / f).is_file() for f in files)


def test_the_tiny_switch_runs_the_quick_starts(workdir, tmp_path):
    """The README's one switch (a models folder in which ``s2-pro`` is the tiny checkpoint)
    makes the quick starts load it: here without the test's own SAILFISH_MODELS_DIR, so
    without the switch the first command would need the download HF_HUB_OFFLINE refuses."""
    work, env = workdir
    (switch,) = [b for b in blocks("Try it in two minutes", "bash") if "SAILFISH_MODELS_DIR" in b]
    (block,) = blocks("Quick start: command line", "bash")
    first = block.splitlines()[0]
    env = {k: v for k, v in env.items() if k != "SAILFISH_MODELS_DIR"}
    env["HOME"] = str(tmp_path / "home")
    run_bash(f"{switch}\n{first}", work, env)
    audio(work / "hello.wav")
    assert (tmp_path / "home" / "sailfish-tiny" / "s2-pro" / "config.json").is_file()


def test_the_command_list_is_every_command():
    from fish_core import cli

    text = " ".join(README.split())
    listed = re.search(r"`sailfish --help` lists the commands \(([^)]*)\)", text).group(1)
    assert sorted(re.findall(r"`([a-z]+)`", listed)) == sorted(cli.COMMANDS)


def test_the_product_page_says_what_a_visitor_needs():
    """The pitch's claims and the licence consequence, where a visitor reads them."""
    top = README.split("## Try it in two minutes")[0]
    assert "**Listen:**" in top and "https://huggingface.co/fishaudio/s2-pro" in top
    assert "non-commercial" in top and "MIT" in top
    figures = computed_figures()  # the pitch's figures are the table's
    fp8, int4 = (f"{figures[row]['gpu']:.1f} GB" for row in ("`fp8`", "`int4`"))
    assert f"in {fp8} of GPU memory (FP8; {int4} in int4)" in top
    license_ = sections()["License"]
    assert "commercial use of the weights needs a licence from Fish Audio" in license_
    assert ("the same audio bit for bit at the same thread count and device" in
            " ".join(sections()["Quick start: command line"].split()))
