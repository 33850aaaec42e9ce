"""The CLI, run as users run it: a subprocess, offline, on the tiny checkpoint."""

import os
import re
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
    proc = run_cli("voice", "encode", ref, "--text", "A reference.", "--model", ckpt_dir, "-o",
                   voice)
    assert proc.returncode == 0, proc.stderr
    srt = tmp_path / "s.srt"
    srt.write_text("1\n00:00:00,200 --> 00:00:01,000\nHi.\n\n"
                   "2\n00:00:01,500 --> 00:00:02,000\nBye.\n")
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
    proc = run_cli("say", "hi", "--model", ckpt_dir, "-o", tmp_path / "x.m4a", "--max-new-tokens",
                   "2")
    assert proc.returncode == 2 and ".m4a" in proc.stderr and ".mp3" in proc.stderr
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
        hub.resolve("someone/other-model", models_dir=models, download=False)
    # no FP8 download is offered; the error says how to get FP8
    with pytest.raises(hub.ModelNotFound, match="--quantization fp8"):
        hub.resolve("s2-pro-fp8", models_dir=models, download=False)
    # a folder of the models dir is found by its name (an FP8 export, a community download)
    (models / "s2-pro-fp8").symlink_to(ckpt_dir, target_is_directory=True)
    assert hub.resolve("s2-pro-fp8", models_dir=models) == models / "s2-pro-fp8"


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
    monkeypatch.setattr(hub, "unreachable", lambda url: None)  # no network probe here
    path = hub.resolve("s2-pro", models_dir=tmp_path)
    assert path == tmp_path / "s2-pro"
    assert calls[0]["repo_id"] == "fishaudio/s2-pro"
    assert set(calls[0]["allow_patterns"]) >= {"config.json", "model-*.safetensors", "codec.pth"}
    assert "*.bin" not in calls[0]["allow_patterns"]


# ---------------------------------------------------------------- help and typos
def parsers(parser=None, seen=None):
    """Every parser of the CLI: the top level, each command and each voice sub-command."""
    import argparse

    parser = parser or cli.build_parser()
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from parsers(sub)


def test_every_help_shows_the_defaults():
    checked = 0
    for parser in parsers():
        text = " ".join(parser.format_help().split())  # the lines re-joined
        for action in parser._actions:
            if cli.shows_default(action):
                shown = " ".join(str(action.default).split())
                assert shown in text, f"{parser.prog} {action.option_strings}: no default"
                checked += 1
    assert checked > 50  # every command's sampling, model and server options


@pytest.mark.parametrize("argv, usage, hint", [
    (["sya", "hi"], "usage: sailfish [", "did you mean say?"),
    (["say", "hi", "-o", "x.wav", "--tempreature", "0.5"], "usage: sailfish say",
     "did you mean --temperature?"),
    (["say", "hi", "-o", "x.wav", "--max-new-tokns=5"], "usage: sailfish say",
     "did you mean --max-new-tokens?"),
    (["voice", "encdoe", "a.wav"], "usage: sailfish voice", "did you mean encode?"),
    (["voice", "encode", "a.wav", "--txt", "hi", "-o", "v.safetensors"],
     "usage: sailfish voice encode", "did you mean --text?"),
    (["serve", "--prot", "9000"], "usage: sailfish serve", "did you mean --port?"),
])
def test_a_typo_gets_its_commands_usage_and_a_suggestion(argv, usage, hint, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["sailfish"])
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and usage in err and hint in err, err


# ---------------------------------------------------------------- mistakes, before any work
def test_a_clip_as_voice_says_how_to_use_it(ckpt_dir, tmp_path, capsys):
    clip = tmp_path / "me.wav"
    sf.write(clip, 0.3 * np.sin(np.arange(22050) / 10), 44100)
    # without its --voice-text a clip is heard by the speech recogniser: where that is not
    # here (offline), one error line before any model loads says how to give the text
    assert cli.main(["say", "hi", "--model", str(ckpt_dir), "-o", str(tmp_path / "x.wav"),
                     "--voice", str(clip), "--no-download", "--models-dir",
                     str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no --voice-text" in err and "--asr FOLDER" in err
    assert '--voice-text "the words spoken in it"' in err
    assert cli.main(["say", "hi", "--remote", "http://127.0.0.1:9", "-o",
                     str(tmp_path / "x.wav"), "--voice", str(clip)]) == 2  # no recogniser there
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is an audio clip, not a voice file" in err
    assert '--voice-text "the words spoken in me.wav"' in err and "voice encode" in err
    assert cli.main(["say", "hi", "--model", str(ckpt_dir), "-o", str(tmp_path / "x.wav"),
                     "--voice-text", "stray words"]) == 2
    assert "one --voice-text per audio clip" in capsys.readouterr().err
    assert cli.main(["say", "hi", "--model", str(ckpt_dir), "-o", str(tmp_path / "x.wav"),
                     "--voice", ""]) == 2  # an empty value is not the current folder
    assert "--voice: empty; expected a voice file" in capsys.readouterr().err


@pytest.mark.parametrize("content, says", [
    (None, "file not found"),
    (b"", r"is empty \(0 bytes\)"),
    (b"Just some notes, not a recording.", "is neither a voice file|is not audio: its content"),
    (b"ID3\x03\x00\x00\x00\x00\x00\x00" + bytes(range(256)) * 8,
     "starts like MP3 but cannot be decoded: it is corrupt"),
])
def test_an_unreadable_reference_is_one_line_saying_what_is_wrong(content, says, ckpt_dir,
                                                                  tmp_path, capsys):
    ref = tmp_path / "ref.mp3"
    if content is not None:
        ref.write_bytes(content)
    for flags in (["--voice", str(ref), "--voice-text", "words"],
                  ["--ref-audio", str(ref), "--ref-text", "words"]):
        assert cli.main(["say", "hi", "--model", str(ckpt_dir), "-o", str(tmp_path / "x.wav"),
                         *flags]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --") and err.count("\n") == 1 and re.search(says, err), err
        assert "does not exist" not in err and "Traceback" not in err


def test_a_busy_port_is_named_before_the_model_loads(ckpt_dir, capsys, monkeypatch):
    import socket

    from fish_core.serve import main as serve_main

    monkeypatch.setattr(serve_main, "serve", lambda args: pytest.fail("the model was loaded"))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert cli.main(["serve", "--model", str(ckpt_dir), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: --port {port}: 127.0.0.1:{port} is already in use (another server "
                   "is listening there); stop it or choose another port with --port\n")


def test_serve_prints_one_start_up_line(ckpt_dir, tmp_path, capsys, monkeypatch):
    from fish_core.serve import main as serve_main

    monkeypatch.setattr(serve_main, "serve", lambda args: "server stopped")
    monkeypatch.delenv("SAILFISH_SERVE_API_KEY", raising=False)
    base = ["serve", "--model", str(ckpt_dir), "--port", "0", "--voices", str(tmp_path)]
    assert cli.main(base) == 2  # port 0 is no port
    assert "--port must be 1 .. 65535" in capsys.readouterr().err
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base[base.index("0")] = str(port)
    assert cli.main(base) == 0
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"sailfish serve: http://127.0.0.1:{port}/v1 ")
    assert f"model {ckpt_dir} (loading now)" in line and "API key off" in line
    assert line.endswith(f"voices {tmp_path}")
    monkeypatch.setenv("SAILFISH_SERVE_API_KEY", "k-123")
    assert cli.main([*base, "--lazy"]) == 0
    (line,) = capsys.readouterr().err.splitlines()
    assert "API key on (from $SAILFISH_SERVE_API_KEY)" in line and "k-123" not in line
    assert "(loaded on the first request)" in line


def test_compile_auto_says_once_which_mode_it_kept(ckpt_dir, tiny_synth, tmp_path, capsys,
                                                   monkeypatch):
    """What ``--compile auto`` chose (Engine.compile_choice, set on the first frame) is printed
    once after the run; timing the two modes is the engine's test (test_compile_choice.py)."""
    monkeypatch.setattr(tiny_synth.runtime.engine, "compile_choice",
                        "auto: eager: a frame took less")
    monkeypatch.setattr(cli.inputs, "load_synth", lambda args: tiny_synth)
    args = ["say", "Hi.", "--model", str(ckpt_dir), "-o", str(tmp_path / "x.wav"),
            "--max-new-tokens", "3", "--seed", "1"]
    assert cli.main([*args, "--compile", "auto"]) == 0
    err = capsys.readouterr().err
    assert err.count("--compile auto kept eager: a frame took less\n") == 1
    assert cli.main(args) == 0 and "--compile" not in capsys.readouterr().err


# ---------------------------------------------------------------- what say writes
def test_takes_stdin_clip_voices_and_formats(ckpt_dir, sizes, tmp_path):
    """One run per feature, each compared with the plain run it must equal: take 1 of
    ``--takes 2`` is the single take of that seed, ``--text-file -`` reads stdin, a clip with
    ``--voice-text`` is the voice ``voice encode`` makes of it, and ``-o x.mp3`` writes an MP3
    as ``serve`` answers one."""
    clip = tmp_path / "me.wav"
    t = np.arange(int(0.6 * 44100)) / 44100
    sf.write(clip, 0.3 * np.sin(2 * np.pi * 190 * t), 44100)
    common = ["--model", ckpt_dir, "--max-new-tokens", "6", "--seed", "4", "--precision", "fp32"]
    text = "Takes and voices."
    proc = run_cli("voice", "encode", clip, "--text", "A reference.", "-o",
                   tmp_path / "me.safetensors", "--model", ckpt_dir, "--precision", "fp32")
    assert proc.returncode == 0, proc.stderr
    runs = {
        "single": ["say", text, "--voice", tmp_path / "me.safetensors"],
        "takes": ["say", text, "--voice", tmp_path / "me.safetensors", "--takes", "2"],
        "clip": ["say", text, "--voice", clip, "--voice-text", "A reference."],
        "stdin": ["say", "--text-file", "-", "--voice", tmp_path / "me.safetensors"],
    }
    for name, args in runs.items():
        proc = subprocess.run(
            [sys.executable, "-m", "fish_core", *map(str, args), *map(str, common),
             "-o", str(tmp_path / f"{name}.wav")], cwd=ROOT, input=text if name == "stdin" else "",
            env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
                 "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
    single = sf.read(tmp_path / "single.wav")[0]
    assert not (tmp_path / "takes.wav").exists()
    take1, take2 = (sf.read(tmp_path / f"takes-{k}.wav")[0] for k in (1, 2))
    assert np.array_equal(take1, single) and not np.array_equal(take2[:len(take1)],
                                                                take1[:len(take2)])
    assert np.array_equal(sf.read(tmp_path / "clip.wav")[0], single)
    assert np.array_equal(sf.read(tmp_path / "stdin.wav")[0], single)


@pytest.mark.parametrize("suffix", [".mp3", ".opus", ".ogg", ".flac", ".pcm", ".wav"])
def test_audio_outputs_in_every_format_serve_answers(suffix, tiny_synth, tmp_path):
    from fish_core.audio import formats
    from fish_core.outputs import check_audio_output, write_audio

    fmt = formats.SUFFIXES[suffix]
    if fmt not in formats.writable():
        pytest.skip(f"this libsndfile cannot write {fmt}")
    speech = tiny_synth.tts("Formats.", seed=1, max_new_tokens=4)
    path = check_audio_output(tmp_path / f"out{suffix}", "--out")
    write_audio(path, speech.waveform, speech.sample_rate)
    data = path.read_bytes()
    same = ((lambda a, b: a == b) if fmt != "opus" else
            (lambda a, b: len(a) == len(b) and a[:4] == b[:4]))  # Ogg: a random stream serial
    assert same(data, formats.encode(speech.waveform, speech.sample_rate, fmt))  # serve's bytes
    if fmt == "pcm":
        assert len(data) == 2 * speech.waveform.shape[0]
    else:
        info = sf.info(path)
        rate = formats.OPUS_RATE if fmt == "opus" else speech.sample_rate
        assert info.samplerate == rate and abs(info.duration - speech.duration) < 0.1
    assert same(speech.save(tmp_path / f"again{suffix}").read_bytes(), data)  # Speech.save


# ---------------------------------------------------------------- the first hour's edges
def run_piped(*args, stdin: str, cwd=ROOT):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "fish_core", *map(str, args)], cwd=cwd,
                          env=env, input=stdin, capture_output=True, text=True, timeout=300)


def test_version(capsys):
    from fish_core import __version__

    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out == f"Sailfish TTS {__version__}\n"


@pytest.fixture
def as_sailfish(monkeypatch):
    """Run as the ``sailfish`` command (under ``python -m pytest`` argv[0] is a __main__.py)."""
    monkeypatch.setattr(sys, "argv", ["/usr/bin/sailfish"])


def test_a_mistyped_flag_gets_a_short_usage_and_the_did_you_mean(capsys, as_sailfish):
    with pytest.raises(SystemExit) as stop:
        cli.main(["say", "hi", "-o", "x.wav", "--temprature", "0.5"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "usage: sailfish say [options] [text]   (sailfish say --help: every option)",
        "sailfish say: error: unrecognized arguments: --temprature 0.5 (did you mean "
        "--temperature?)"]
    with pytest.raises(SystemExit):
        cli.main(["sya", "hi"])
    usage, error = capsys.readouterr().err.splitlines()
    assert (usage.startswith("usage: sailfish [options] [command ...]") or
            usage.startswith("usage: sailfish [options] command ..."))
    assert "invalid choice: 'sya'" in error and "(did you mean say?)" in error


def test_sailfish_alone_prints_help(capsys, as_sailfish):
    with pytest.raises(SystemExit) as stop:
        cli.main([])
    out = capsys.readouterr().out
    assert stop.value.code == 0 and out.startswith("usage: sailfish")
    assert "say" in out and "book" in out and "plan" in out


def test_piped_text_needs_no_text_file(monkeypatch, tmp_path):
    proc = run_piped("plan", stdin="Piped in. Read without a flag.\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "batch 1: Piped in. Read without a flag.\n"
    # say reads it the same way (one function); nothing piped is still the clear error
    import io

    args = cli.build_parser().parse_args(["say", "-o", str(tmp_path / "x.wav")])

    class Piped(io.TextIOWrapper):
        def isatty(self):
            return False

    monkeypatch.setattr(sys, "stdin", Piped(io.BytesIO("Hello.".encode())))
    assert cli.read_text(args) == "Hello."
    monkeypatch.setattr(sys, "stdin", Piped(io.BytesIO(b"")))
    with pytest.raises(ValueError, match="say needs a text, --text-file"):
        cli.read_text(args)


def test_a_damaged_mp3_is_one_error_line_without_decoder_notes(ckpt_dir, tmp_path):
    bad = tmp_path / "me.mp3"
    bad.write_bytes(b"\xff\xfb\x90\x00" + bytes(3000))  # an MP3 frame header, then nothing
    proc = run_cli("say", "hi", "--voice", bad, "--voice-text", "Me.", "--model", ckpt_dir,
                   "-o", tmp_path / "x.wav")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"error: --voice: {bad} starts like MP3 but cannot be decoded: it is corrupt, truncated "
        "or in an encoding libsndfile does not read"]


@pytest.mark.parametrize("argv,note", [
    (["say", "hi", "-o", "x.wav"], "nothing was written"),
    (["book", "b.txt", "-o", "out"], "the chapters finished so far are in out; the same "
                                     "command resumes with the next one"),
    (["download"], "the files downloaded so far are kept; the same command resumes")])
def test_ctrl_c_is_its_own_line_and_says_what_was_written(argv, note, monkeypatch, capsys,
                                                          tmp_path):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.chdir(tmp_path)
    (tmp_path / "b.txt").write_text("A book.\n")
    monkeypatch.setattr(cli, "check_request", lambda args: None)
    monkeypatch.setitem(cli.COMMANDS, argv[0], interrupted)
    assert cli.main(argv) == 130
    assert capsys.readouterr().err == f"\nstopped (Ctrl-C): {note}\n"


def test_progress_bar_shows_percent_never_a_jumping_total():
    import io

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    bar = cli.Bar(file=Terminal())
    bar(1, 29)
    early = str(bar.bar)
    bar(16, 16)  # the guess corrected down at the end: the total is not shown, 100 % is
    late = str(bar.bar)
    bar.close()
    assert re.search(r"\d+/\d+", early + late) is None
    assert early.startswith("speaking:   3%|") and late.startswith("speaking: 100%|")
    piped = cli.Bar(file=io.StringIO())  # a log or a pipe: no bar at all
    assert piped.bar.disable
    piped.close()


def test_very_long_text_gets_a_hint_to_use_book(as_sailfish):
    assert cli.long_text_note("Short.") is None
    note = cli.long_text_note("A sentence of text. " * 13_000)
    assert note.startswith("note: 260,000 characters is about 289 minutes of speech")
    assert "sailfish book FILE -o FOLDER" in note


def test_plurals():
    assert [cli.plural(n, "chapter") for n in (0, 1, 2)] == ["0 chapters", "1 chapter",
                                                             "2 chapters"]
    assert cli.plural(1, "batch", "batches") == "1 batch"
    assert cli.plural(3, "batch", "batches") == "3 batches"


def test_book_says_one_chapter_and_draws_no_bar_into_a_log(ckpt_dir, tmp_path):
    book = tmp_path / "b.md"
    book.write_text("# One\n\nThe only chapter.\n")
    proc = run_cli("book", book, "-o", tmp_path / "out", "--model", ckpt_dir,
                   "--max-new-tokens", "6", "--seed", "1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"wrote {tmp_path / 'out'}: 1 chapter (1 spoken, 0 already")
    assert "%|" not in proc.stderr  # stderr is a pipe here: no bar lines in it


def every_parser(parser=None):
    parser = parser or cli.build_parser()
    yield parser
    for action in parser._actions:
        if action.choices and hasattr(action, "_name_parser_map"):
            for sub in dict.fromkeys(action.choices.values()):
                yield from every_parser(sub)


def test_every_option_is_described_and_help_has_no_rst():
    for parser in every_parser():
        text = parser.format_help()
        assert "``" not in text, parser.prog
        for action in parser._actions:
            if action.option_strings and action.help != "==SUPPRESS==":
                assert action.help, f"{parser.prog} {action.option_strings[0]} has no help"
    serve = next(p for p in every_parser() if p.prog.endswith(" serve")).format_help()
    for flag in ("--port", "--max-text-length", "--max-body-mb", "--max-references",
                 "--max-reference-seconds"):
        described = re.search(rf"^\s+{flag} \S+\s+(\S.*)$", serve, re.MULTILINE)
        assert described and not described.group(1).startswith("(default"), flag


def test_plan_help_says_dash_reads_stdin():
    plan = next(p for p in every_parser() if p.prog.endswith(" plan")).format_help()
    text = " ".join(plan.split())
    assert "--text-file FILE read the text from this file (- : stdin" in text
    assert "--script FILE a multi-speaker script file (- : stdin)" in text


def test_plan_into_head_ends_without_a_traceback(tmp_path):
    story = tmp_path / "story.txt"
    story.write_text("Sentence number one is here. " * 5000)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(["bash", "-c", f'"{sys.executable}" -m fish_core plan --text-file '
                           f'"{story}" | head -1'], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.stdout.startswith("batch 1: Sentence number one is here.")
    assert proc.stderr == ""  # no BrokenPipeError, not once, not twice


def closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once closed


def test_a_failed_download_is_one_error_line_with_the_way_on(tmp_path):
    """Offline without HF_HUB_OFFLINE (here: an endpoint that refuses at once; no network):
    one ``error:`` line naming --model FOLDER and the tiny checkpoint, none of the hub's
    retries."""
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env.update(HF_ENDPOINT=f"http://127.0.0.1:{closed_port()}", OMP_NUM_THREADS="1",
               PYTHONPATH=str(ROOT))
    env.pop("HF_HUB_OFFLINE", None)
    proc = subprocess.run([sys.executable, "-m", "fish_core", "say", "hi", "-o",
                           str(tmp_path / "x.wav"), "--models-dir", str(tmp_path / "models")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"error: could not download s2-pro (fishaudio/s2-pro) into "
                           f"{tmp_path / 'models' / 's2-pro'}: 127.0.0.1 cannot be reached")
    assert "--model FOLDER" in line and "--model tests/fixtures/tiny-s2" in line
    assert "HF_HUB_OFFLINE=1" in line


def test_a_download_is_announced_first(tmp_path, monkeypatch, capsys, ckpt_dir):
    import shutil

    import huggingface_hub

    fetched = []

    def fake_download(repo_id, revision, local_dir, allow_patterns):
        fetched.append((repo_id, revision))
        assert "downloading s2-pro" in capsys.readouterr().err  # said before it starts
        shutil.copytree(ckpt_dir, local_dir, dirs_exist_ok=True)
        return local_dir

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
    monkeypatch.setattr(hub, "unreachable", lambda url: None)
    target = tmp_path / "models"
    assert hub.resolve("s2-pro", models_dir=target) == target / "s2-pro"
    assert fetched == [("fishaudio/s2-pro", hub.VARIANTS["s2-pro"].revision)]
    assert hub.announce(hub.VARIANTS["s2-pro"], target / "s2-pro") == (
        f"downloading s2-pro (fishaudio/s2-pro at 1de9996b: official bf16 weights, 11.0 GB "
        f"(9.1 GB weights + 1.9 GB codec)) into {target / 's2-pro'}; Ctrl-C stops it (it "
        "resumes next time); --model FOLDER uses a checkpoint you already have")
