"""The engine runs without soundfile and soxr (the device machine has neither): importing
fish_core, loading a model with its codec and generating codes and audio need neither; reading or
writing a file and resampling say which package is missing."""

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import sys
    sys.modules["soundfile"] = None  # "import soundfile" now raises ImportError
    sys.modules["soxr"] = None

    import torch

    import fish_core.cli, fish_core.codec.model  # noqa: F401
    import fish_core.local.synthesizer, fish_core.speech.voices  # noqa: F401
    from fish_core.audio.files import AudioError, load_audio, prepare_audio, save_audio
    from fish_core.local.synthesizer import Synthesizer

    synth = Synthesizer.from_pretrained(sys.argv[1], device="cpu")
    speech = synth.tts("Hello there.", seed=1, max_new_tokens=4)
    assert speech.codes.shape[0] == synth.runtime.config.num_codebooks, speech.codes.shape
    assert speech.waveform.numel() > 0
    wave = 0.1 * torch.randn(synth.sample_rate)
    same_rate = prepare_audio(wave, synth.sample_rate, target_sr=synth.sample_rate)
    assert same_rate.shape == wave.shape  # no resampling needed

    for call, package in ((lambda: load_audio(sys.argv[1] + "/config.json"), "soundfile"),
                          (lambda: save_audio(sys.argv[2], wave, synth.sample_rate), "soundfile"),
                          (lambda: prepare_audio(wave, 16000, target_sr=synth.sample_rate),
                           "soxr")):
        try:
            call()
        except AudioError as e:
            assert f"needs the {package} package: pip install {package}" in str(e), str(e)
        else:
            raise AssertionError(f"no error without {package}")
    assert "soundfile" not in {m for m in sys.modules if sys.modules[m] is not None}
    print("ok")
""")


def test_engine_runs_without_soundfile_and_soxr(ckpt_dir, tmp_path):
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(ckpt_dir), str(tmp_path / "out.wav")],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().endswith("ok")
