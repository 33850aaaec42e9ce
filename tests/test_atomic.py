"""Nothing lost on a full disk (``audio/atomic.py`` and its writers): a write that fails leaves
the old file as it was and no temporary or truncated spare file, and says in one line which file
and why. The disk is made full two ways: ``os.fsync``/the write raising ENOSPC or EDQUOT in
process, and a real process under a file-size limit (RLIMIT_FSIZE), as the CLI runs."""

import errno
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fish_core.audio import atomic
from fish_core.audio.atomic import WriteError, write_bytes, write_file
from fish_core.outputs import OutputError, write_or_keep

ROOT = Path(__file__).resolve().parents[1]


def stray(folder: Path, keep: set[str]) -> list[str]:
    """Files in ``folder`` other than ``keep``: temporary files, spare copies."""
    return sorted(p.name for p in folder.iterdir() if p.name not in keep)


def full_disk(code=errno.ENOSPC):
    """An ``os.fsync`` that finds the disk full (after the data was handed to the kernel)."""
    def fsync(fd):
        raise OSError(code, os.strerror(code))
    return fsync


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "out.wav"
    target.write_bytes(b"the old, whole file")

    def half_then_full(f):
        f.write(b"half of the new")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(WriteError) as caught:
        write_file(target, half_then_full)
    assert str(caught.value) == f"cannot write {target}: no space left on the device"
    assert caught.value.full and caught.value.errno == errno.ENOSPC
    assert target.read_bytes() == b"the old, whole file"
    assert stray(tmp_path, {"out.wav"}) == []
    write_bytes(target, b"new")  # a write that succeeds replaces it, keeping no temporary
    assert target.read_bytes() == b"new" and stray(tmp_path, {"out.wav"}) == []


@pytest.mark.skipif(not hasattr(errno, "EDQUOT"), reason="no EDQUOT on this platform")
def test_a_quota_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(atomic.os, "fsync", full_disk(errno.EDQUOT))
    with pytest.raises(WriteError, match="disk quota is exceeded") as caught:
        write_bytes(tmp_path / "a.json", b"{}")
    assert caught.value.full and stray(tmp_path, set()) == []


def test_a_new_file_gets_the_usual_permissions_and_a_link_stays_a_link(tmp_path):
    mask = os.umask(0o022)
    os.umask(mask)
    new = write_bytes(tmp_path / "new.txt", b"x")
    assert new.stat().st_mode & 0o777 == 0o666 & ~mask
    real = tmp_path / "real.txt"
    real.write_bytes(b"old")
    real.chmod(0o640)
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    write_bytes(link, b"new")
    assert link.is_symlink() and real.read_bytes() == b"new"
    assert real.stat().st_mode & 0o777 == 0o640


def test_spare_copies_only_when_whole(tmp_path, monkeypatch):
    """The target's disk is full: a spare copy is written elsewhere, whole, and said where; when
    every disk is full no spare copy (whole or truncated) is left anywhere."""
    work, temp = tmp_path / "work", tmp_path / "temp"
    work.mkdir()
    temp.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr("tempfile.tempdir", str(temp))
    target = tmp_path / "disk" / "x.wav"
    target.parent.mkdir()
    target.write_bytes(b"old")

    def write_on(folders):
        def write(path):
            def body(f):
                f.write(b"spoken")
                if path.parent in folders:
                    raise OSError(errno.ENOSPC, "No space left on device")
            write_file(path, body)
        return write

    note = write_or_keep(write_on({target.parent}), target, "audio")
    assert note.startswith(f"cannot write {target}: no space left on the device; the audio is "
                           f"kept whole in {work}")
    spare, = work.iterdir()
    assert spare.read_bytes() == b"spoken" and target.read_bytes() == b"old"
    spare.unlink()
    with pytest.raises(OutputError, match="no space left on the device .*nothing was saved"):
        write_or_keep(write_on({target.parent, work, temp}), target, "audio")
    assert target.read_bytes() == b"old"
    assert [stray(f, set()) for f in (work, temp)] == [[], []]
    assert stray(target.parent, {"x.wav"}) == []


def test_every_writer_keeps_the_old_file_on_a_full_disk(tmp_path, monkeypatch):
    """Audio in every format, voices, codes, captions: the same promise."""
    from fish_core.audio.files import save_audio
    from fish_core.audio.formats import write
    from fish_core.cli.commands import save_codes
    from fish_core.speech.voices import Voice
    from fish_core.text.prompt import Reference

    wave = 0.1 * torch.sin(torch.arange(4410) / 7.0)
    voice = Voice("me", [Reference("Hi.", torch.zeros(2, 3, dtype=torch.long))])
    writers = {"a.wav": lambda p: write(p, wave, 44100),
               "b.flac": lambda p: save_audio(p, wave, 44100),
               "c.safetensors": voice.save,
               "d.npy": lambda p: save_codes(p, torch.zeros(2, 3, dtype=torch.long)),
               "e.safetensors": lambda p: save_codes(p, torch.zeros(2, 3, dtype=torch.long))}
    for name in writers:
        (tmp_path / name).write_bytes(b"old " + name.encode())
    monkeypatch.setattr(atomic.os, "fsync", full_disk())
    for name, writer in writers.items():
        with pytest.raises(WriteError, match="no space left on the device"):
            writer(tmp_path / name)
        assert (tmp_path / name).read_bytes() == b"old " + name.encode()
    assert stray(tmp_path, set(writers)) == []


def test_a_book_chapter_on_a_full_disk_names_its_file_and_the_reason(tmp_path, monkeypatch):
    from fish_core.cli.audiobook import render_book
    from fish_core.text.book import text_chapters

    class Speaker:  # speaks every chapter as a short tone, no model
        def tts(self, text, voice, **_):
            wave = 0.1 * torch.sin(torch.arange(4410) / 5.0)
            return SimpleNamespace(waveform=wave, sample_rate=44100, duration=0.1)

    book = text_chapters("Morning\n\nThe sun.\n\n\n\nNoon\n\nThe heat.")
    monkeypatch.setattr(atomic.os, "fsync", full_disk())
    with pytest.raises(WriteError) as caught:
        render_book(Speaker(), book, tmp_path / "out", seed=1)
    assert str(caught.value) == (f"cannot write {tmp_path / 'out' / '001 Morning.wav'}: no "
                                 "space left on the device")
    assert stray(tmp_path / "out", set()) == []


def limited(limit: int):
    """A child process under a file-size limit: a write past it fails with EFBIG (SIGXFSZ,
    which would kill it, ignored as a server's supervisor may set it)."""
    def start():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return start


def run_limited(args, cwd: Path, temp: Path, limit: int):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TMPDIR": str(temp),
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-m", "fish_core", *map(str, args)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300,
                          preexec_fn=limited(limit))


def test_cli_outputs_survive_a_file_size_limit(ckpt_dir, sizes, tmp_path):
    """``decode -o out.wav`` and ``voice encode -o me.safetensors`` over existing files, in a
    process that may write no file past a few KiB: each fails with one ``error:`` line naming
    the file and the reason, the old files are untouched, and no spare copy is left next to
    them, in the working folder or in TMPDIR."""
    import soundfile as sf

    work, temp, out = tmp_path / "work", tmp_path / "temp", tmp_path / "out"
    for folder in (work, temp, out):
        folder.mkdir()
    frames = 40  # the decoded audio is far larger than the limit
    codes = np.random.default_rng(0).integers(0, sizes.residual_codebook_size,
                                              (sizes.num_codebooks, frames))
    np.save(tmp_path / "codes.npy", codes)
    t = np.arange(10 * 44100) / 44100  # 10 s: a voice file of some KiB
    sf.write(tmp_path / "ref.wav", 0.3 * np.sin(2 * np.pi * 200 * t), 44100)
    limit = 1024
    assert frames * sizes.frame_length * 2 > limit
    assert 10 * sizes.sample_rate // sizes.frame_length * sizes.num_codebooks * 4 > limit
    old = {"out.wav": b"RIFF an old take", "me.safetensors": b"an old voice"}
    for name, data in old.items():
        (out / name).write_bytes(data)
    runs = [("decode", tmp_path / "codes.npy", "--model", ckpt_dir, "-o", out / "out.wav"),
            ("voice", "encode", tmp_path / "ref.wav", "--text", "A reference clip.", "--model",
             ckpt_dir, "-o", out / "me.safetensors")]
    for args, name in zip(runs, old):
        proc = run_limited(args, work, temp, limit)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: cannot write {out / name}: "
                                                       "the file is too large"), proc.stderr
        assert "nothing was saved" in lines[0]
    for name, data in old.items():
        assert (out / name).read_bytes() == data
    assert [stray(f, set()) for f in (work, temp)] == [[], []]
    assert stray(out, set(old)) == []


def test_voices_and_codes_never_rely_on_safetensors_own_file_writing(tmp_path, monkeypatch):
    """Voices and codes are serialised in memory and written through ``write_file`` (whatever
    the installed safetensors does with files), and read back whole."""
    import safetensors.torch

    from fish_core.cli.commands import save_codes
    from fish_core.speech.voices import Voice
    from fish_core.text.prompt import Reference

    def never(*args, **kwargs):
        raise AssertionError("safetensors' own file writing was used")

    monkeypatch.setattr(safetensors.torch, "save_file", never)
    codes = torch.arange(6, dtype=torch.long).reshape(2, 3)
    Voice("me", [Reference("Hi.", codes)]).save(tmp_path / "me.safetensors")
    assert torch.equal(Voice.load(tmp_path / "me.safetensors").clips[0].codes, codes)
    save_codes(tmp_path / "c.safetensors", codes)
    assert torch.equal(safetensors.torch.load_file(tmp_path / "c.safetensors")["codes"], codes)


def test_a_streamed_file_takes_its_name_only_when_whole(tmp_path):
    """``say --stream -o talk.wav``: the audio grows in ``talk.partial.wav`` (its WAV header
    keeping the length written); a whole answer replaces ``talk.wav``, a failed one keeps the
    partial name, playable, and ``talk.wav`` untouched."""
    import soundfile as sf

    from fish_core.audio.wav import StreamEncoder, wav_header
    from fish_core.outputs import StreamFile

    target = tmp_path / "talk.wav"
    target.write_bytes(b"an older answer")
    chunk = 0.1 * torch.sin(torch.arange(441) / 3.0)
    encode, failed = StreamEncoder("wav", 44100), StreamFile(target, 44100, wav_header)
    failed.write(encode(chunk), chunk.shape[0])
    failed.write(encode(chunk), chunk.shape[0])
    note = failed.abandon()
    partial = tmp_path / "talk.partial.wav"
    assert note == (f"{partial} holds the 0.02 s streamed before it (a partial answer); "
                    f"{target} was not written")
    assert target.read_bytes() == b"an older answer" and sf.info(partial).frames == 882
    encode, whole = StreamEncoder("wav", 44100), StreamFile(target, 44100, wav_header)
    whole.write(encode(chunk), chunk.shape[0])
    whole.finish()
    assert sf.info(target).frames == 441 and not partial.exists()
    assert stray(tmp_path, {"talk.wav"}) == []
