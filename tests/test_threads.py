"""fish_core.engine.threads: the default never oversubscribes (physical cores of the affinity
mask, SMT siblings once, less the busy ones), what overrides it, and --threads / the Model
Loader's threads wired to it."""

import re

import pytest
import torch

from fish_core import cli
from fish_core.engine import threads


def fake_sysfs(tmp_path, cores):
    """``cores``: {cpu: (package, core)} as /sys/devices/system/cpu/cpuN/topology holds it."""
    for cpu, (package, core) in cores.items():
        topology = tmp_path / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "physical_package_id").write_text(f"{package}\n")
        (topology / "core_id").write_text(f"{core}\n")
    return tmp_path


def test_physical_cores_count_smt_siblings_once(tmp_path):
    # 2 packages x 2 cores x 2 hyper-threads
    sysfs = fake_sysfs(tmp_path, {cpu: (cpu // 4, (cpu // 2) % 2) for cpu in range(8)})
    assert threads.physical_cores(list(range(8)), sysfs) == 4
    assert threads.physical_cores([0, 1], sysfs) == 1  # two threads of one core
    assert threads.physical_cores([0, 2, 4], sysfs) == 3
    # no topology (another OS, a container without sysfs): every logical CPU counts
    assert threads.physical_cores([0, 1, 2], tmp_path / "none") == 3


@pytest.mark.parametrize("cores,busy,expected", [
    (2, 0.0, 2), (2, 0.4, 2), (2, 0.6, 1), (2, 1.0, 1), (2, 4.5, 1),  # a busy 2-core: 1
    (8, 0.2, 8), (8, 2.6, 5), (8, 30.0, 1), (1, 0.0, 1)])
def test_default_is_the_free_physical_cores_at_least_one(cores, busy, expected):
    assert threads.default_threads(cores, busy) == expected


def test_parse_threads_names_the_field():
    assert ([threads.parse_threads(v) for v in (None, 0, "auto", "", " 3 ", 4)] ==
            [None, None, None, None, 3, 4])
    for bad in (-1, "x", 1.5, True, "2.0"):
        with pytest.raises(ValueError, match="threads must be a positive integer"):
            threads.parse_threads(bad)


def test_choose_asked_then_environment_then_the_default(monkeypatch):
    monkeypatch.setattr(threads, "physical_cores", lambda *a: 4)
    monkeypatch.setattr(threads, "busy_cores", lambda: 1.0)
    assert threads.choose(None, {}) == (3, "4 physical cores, load 1.0")
    assert threads.choose(2, {"SAILFISH_THREADS": "3"}) == (2, "asked for")
    assert (threads.choose("auto", {"SAILFISH_THREADS": "3", "OMP_NUM_THREADS": "1"}) ==
            (3, "$SAILFISH_THREADS"))
    assert threads.choose(None, {"OMP_NUM_THREADS": "1"}) == (1, "$OMP_NUM_THREADS")


def test_apply_sets_torch_and_restores_nothing_else():
    before = torch.get_num_threads()
    try:
        assert threads.apply(1) == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_cli_threads_flag_on_every_model_command(monkeypatch):
    parse = cli.build_parser().parse_args
    for argv in (["say", "hi", "-o", "x.wav"], ["encode", "a.wav", "-o", "c.npy"],
                 ["decode", "c.npy", "-o", "a.wav"], ["serve"]):
        assert parse(argv + ["--threads", "2"]).threads == "2"
        assert parse(argv).threads is None
    applied = []
    monkeypatch.setattr(threads, "apply", lambda value: applied.append(value))
    monkeypatch.setitem(cli.COMMANDS, "say", lambda args: "done")
    assert cli.main(["say", "hi", "-o", "x.wav", "--threads", "3"]) == 0
    assert applied == [3]  # parsed and chosen (threads.choose), then applied


def test_cli_bad_threads_is_a_clear_error(capsys, tmp_path):
    assert cli.main(["say", "hi", "-o", str(tmp_path / "x.wav"), "--threads", "many"]) == 2
    assert "threads must be a positive integer" in capsys.readouterr().err


@pytest.fixture
def four_cores_one_busy(monkeypatch):
    """The policy on a 4-core machine with one core busy (3 threads), nothing set by the user."""
    monkeypatch.setattr(threads, "physical_cores", lambda *a: 4)
    monkeypatch.setattr(threads, "busy_cores", lambda: 1.0)
    monkeypatch.delenv("SAILFISH_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_python_session_and_cli_pick_the_same_threads(ckpt_dir, tmp_path, four_cores_one_busy,
                                                      monkeypatch, capsys):
    from fish_core import Synthesizer

    torch.set_num_threads(1)
    Synthesizer.from_pretrained(ckpt_dir, device="cpu", dtype="fp32")
    python_session = torch.get_num_threads()
    torch.set_num_threads(1)
    seen = []
    monkeypatch.setitem(cli.COMMANDS, "say",
                        lambda args: seen.append((torch.get_num_threads(), args.threads)) or "ok")
    assert cli.main(["say", "hi", "-o", str(tmp_path / "x.wav"), "--device", "cpu"]) == 0
    assert python_session == 3 and seen == [(3, 3)]  # the CLI hands its count to from_pretrained
    err = capsys.readouterr().err
    assert "3 CPU threads (auto: 4 physical cores, load 1.0; --threads N to choose)" in err
    # asked for: both take it, and the CLI says nothing about it
    Synthesizer.from_pretrained(ckpt_dir, device="cpu", dtype="fp32", threads=2)
    assert torch.get_num_threads() == 2
    with pytest.raises(ValueError, match="threads must be a positive integer"):
        Synthesizer.from_pretrained(ckpt_dir, device="cpu", threads="many")


def test_too_many_threads_warn_with_the_automatic_choice(four_cores_one_busy, monkeypatch,
                                                         caplog):
    assert threads.too_many(4) is None
    assert threads.too_many(64, cores=2) == (
        "warning: 64 CPU threads on 2 physical cores: more threads than free cores is far "
        "slower (each step waits on the slowest thread); the automatic choice here is "
        f"{threads.default_threads(2)} (threads auto, docs/cpu.md)")
    monkeypatch.setattr(threads, "WARNED", set())
    with caplog.at_level("WARNING", logger="sailfish.engine"):
        assert threads.apply(8) == 8 and threads.apply(8) == 8
    assert ([r.getMessage() for r in caplog.records if r.levelname == "WARNING"] ==
            [threads.too_many(8)])  # once


def test_cli_threads_64_on_few_cores_warns(tmp_path):
    import os
    import subprocess
    import sys

    from test_cli import ROOT

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "fish_core", "say", "hi", "-o",
                           str(tmp_path / "x.wav"), "--threads", "4096", "--models-dir",
                           str(tmp_path)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2  # no model there; the threads came first
    assert re.search(r"^warning: 4096 CPU threads on \d+ physical cores?: more threads than "
                     r"free cores is far slower .* the automatic choice here is \d+",
                     proc.stderr, re.MULTILINE), proc.stderr


def test_threads_false_leaves_torch_alone(ckpt_dir, four_cores_one_busy):
    """What the ComfyUI nodes pass: their loader's ``threads`` input already decided."""
    from fish_core import Synthesizer

    torch.set_num_threads(1)
    Synthesizer.from_pretrained(ckpt_dir, device="cpu", dtype="fp32", threads=False)
    assert torch.get_num_threads() == 1  # not the policy's 3
