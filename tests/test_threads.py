"""fish_core.engine.threads: the default never oversubscribes (physical cores of the affinity
mask, SMT siblings once, less the busy ones), what overrides it, and --threads / the Model
Loader's threads wired to it."""

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
    assert applied == ["3"]


def test_cli_bad_threads_is_a_clear_error(capsys, tmp_path):
    assert cli.main(["say", "hi", "-o", str(tmp_path / "x.wav"), "--threads", "many"]) == 2
    assert "threads must be a positive integer" in capsys.readouterr().err
