"""The CLI, run as users run it: a subprocess, offline, on the tiny checkpoint."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from fish_core import cli
from fish_core.loading import hub
from fish_core.params import GenerationError

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args, env_extra=None, cwd=ROOT):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", **(env_extra or {})}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "fish_core", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_say_writes_a_playable_file_offline(ckpt_dir, sizes, tmp_path):
    out = tmp_path / "hello.wav"
    proc = run_cli("say", "Hello from the command line.", "--model", ckpt_dir, "-o", out,
                   "--max-new-tokens", "8", "--seed", "1", "--precision", "fp32")
    assert proc.returncode == 0, proc.stderr
    data, sr = sf.read(out)
    assert sr == sizes.sample_rate and data.ndim == 1 and len(data) > 0
    assert len(data) % sizes.frame_length == 0
    assert "wrote" in proc.stdout


def test_voice_srt_codes_encode_decode(ckpt_dir, sizes, tmp_path):
    ref = tmp_path / "ref.flac"
    t = np.arange(22050) / 44100
    sf.write(ref, 0.3 * np.sin(2 * np.pi * 200 * t), 44100)
    voice = tmp_path / "me.safetensors"
    proc = run_cli("voice", "encode", ref, "--text", "A reference.", "--model", ckpt_dir, "-o", voice)
    assert proc.returncode == 0, proc.stderr
    srt = tmp_path / "s.srt"
    srt.write_text("1\n00:00:00,200 --> 00:00:01,000\nHi.\n\n2\n00:00:01,500 --> 00:00:02,000\nBye.\n")
    proc = run_cli("srt", srt, "--voice", voice, "--model", ckpt_dir, "-o", tmp_path / "s.wav",
                   "--srt-out", tmp_path / "out.srt", "--max-new-tokens", "6", "--seed", "2")
    assert proc.returncode == 0, proc.stderr
    assert sf.info(tmp_path / "s.wav").duration >= 2.0
    assert "-->" in (tmp_path / "out.srt").read_text()
    proc = run_cli("codes", "Codes only.", "--model", ckpt_dir, "-o", tmp_path / "c.npy",
                   "--max-new-tokens", "5", "--seed", "3")
    assert proc.returncode == 0, proc.stderr
    codes = np.load(tmp_path / "c.npy")
    assert codes.shape[0] == sizes.num_codebooks and 1 <= codes.shape[1] <= 5
    proc = run_cli("decode", tmp_path / "c.npy", "--model", ckpt_dir, "-o", tmp_path / "c.flac")
    assert proc.returncode == 0, proc.stderr
    assert sf.info(tmp_path / "c.flac").frames == codes.shape[1] * sizes.frame_length
    proc = run_cli("encode", ref, "--model", ckpt_dir, "-o", tmp_path / "r.safetensors")
    assert proc.returncode == 0, proc.stderr


def test_missing_model_offline_is_a_friendly_error(tmp_path):
    proc = run_cli("say", "hi", "-o", tmp_path / "x.wav", "--models-dir", tmp_path / "models")
    assert proc.returncode == 2
    assert "HF_HUB_OFFLINE" in proc.stderr and "Traceback" not in proc.stderr


def test_debug_shows_the_traceback_of_an_expected_error(tmp_path):
    asked = ["hi", "-o", tmp_path / "x.wav", "--models-dir", tmp_path / "models"]
    for args in (["--debug", "say", *asked], ["say", "--debug", *asked]):  # before or after
        proc = run_cli(*args)
        assert proc.returncode == 2
        assert "Traceback" in proc.stderr and "ModelNotFound" in proc.stderr
        last = proc.stderr.splitlines()[-1]
        assert last.startswith("error: ") and "HF_HUB_OFFLINE" in last


def fail_with(error: Exception):
    def command(args):
        raise error

    return command


def test_expected_errors_are_one_line_in_process(monkeypatch, capsys):
    monkeypatch.setitem(cli.COMMANDS, "download", fail_with(GenerationError("top_k must be ...")))
    assert cli.main(["download"]) == 2
    assert capsys.readouterr().err == "error: top_k must be ...\n"
    assert cli.main(["--debug", "download"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and err.endswith("error: top_k must be ...\n")


@pytest.mark.parametrize("error", [RuntimeError("CUDA out of memory"), KeyError("weights"),
                                   AssertionError("a bug")])
def test_unexpected_errors_keep_their_traceback(monkeypatch, error):
    monkeypatch.setitem(cli.COMMANDS, "download", fail_with(error))
    with pytest.raises(type(error)):  # out of main, so Python prints the whole traceback
        cli.main(["download"])


def test_bad_argument_is_named(ckpt_dir, tmp_path):
    proc = run_cli("say", "hi", "--model", ckpt_dir, "-o", tmp_path / "x.mp3", "--max-new-tokens", "2")
    assert proc.returncode == 2 and ".mp3" in proc.stderr
    proc = run_cli("say", "hi", "--model", ckpt_dir, "-o", tmp_path / "x.wav", "--temperature", "5")
    assert proc.returncode == 2 and "temperature" in proc.stderr


def test_resolve_local_variant_and_repo(ckpt_dir, tmp_path, monkeypatch):
    assert hub.resolve(ckpt_dir) == ckpt_dir
    with pytest.raises(hub.ModelNotFound, match="not an S2 checkpoint"):
        hub.resolve(tmp_path)
    with pytest.raises(hub.ModelNotFound, match="not a known variant"):
        hub.resolve("no-such-thing")
    # an already downloaded variant is found in the models dir without any network
    models = tmp_path / "models"
    (models / "s2-pro").mkdir(parents=True)
    for f in ("config.json", "tokenizer.json", "codec.pth"):
        (models / "s2-pro" / f).write_bytes((ckpt_dir / f).read_bytes())
    assert hub.resolve("s2-pro", models_dir=models) == models / "s2-pro"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(hub.ModelNotFound, match="HF_HUB_OFFLINE"):
        hub.resolve("someone/other-model", models_dir=models)
    with pytest.raises(hub.ModelNotFound, match="downloading is off"):
        hub.resolve("s2-pro-fp8", models_dir=models, download=False)


def test_download_asks_only_for_the_variant_files(tmp_path, monkeypatch):
    """The download is real code: check what it would ask huggingface_hub for."""
    import huggingface_hub

    calls = []

    def fake_snapshot_download(**kwargs):
        calls.append(kwargs)
        target = Path(kwargs["local_dir"])
        target.mkdir(parents=True)
        for f in ("config.json", "tokenizer.json", "codec.pth"):
            (target / f).write_text("{}")
        return str(target)

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    path = hub.resolve("s2-pro", models_dir=tmp_path)
    assert path == tmp_path / "s2-pro"
    assert calls[0]["repo_id"] == "fishaudio/s2-pro"
    assert set(calls[0]["allow_patterns"]) >= {"config.json", "model-*.safetensors", "codec.pth"}
    assert "*.bin" not in calls[0]["allow_patterns"]
