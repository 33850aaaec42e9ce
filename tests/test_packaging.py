"""``pip install .`` and ``pip install -e .``: a wheel holding only ``fish_core`` and ``quant``,
the ``sailfish`` command equal to ``python -m fish_core``, installed code that works outside the
checkout (``quant`` reached as a top-level package), and pyproject metadata the ComfyUI registry
accepts (``comfy node validate`` itself when comfy-cli is installed).

Builds use the running Python's setuptools (``--no-build-isolation``: nothing is downloaded) on a
copy of the tracked files, as a fresh clone has them; a throwaway virtual environment sees the
running Python's packages (torch, numpy, setuptools …), whether that Python is a system one or
a virtual environment of its own (the README's set-up), never the base interpreter's, and gets
ours with ``--no-deps``."""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import fixtures_dir

ROOT = Path(__file__).resolve().parents[1]
tomllib = pytest.importorskip("tomllib", reason="Python 3.11+ reads pyproject.toml")
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def setuptools_ok() -> bool:
    try:
        import setuptools
    except ImportError:
        return False
    return tuple(int(p) for p in setuptools.__version__.split(".")[:2]) >= (77, 0)


needs_setuptools = pytest.mark.skipif(not setuptools_ok(),
                                      reason="building offline needs setuptools 77+ installed")


def clean_env() -> dict:
    """The environment without this checkout on the path: installed code only."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def run(*args, cwd, timeout=600) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in args], cwd=cwd, env=clean_env(), capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"{args}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """The tracked files (a fresh clone's content), with this checkout's changes."""
    src = tmp_path_factory.mktemp("clone") / "sailfish-tts"
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: the tracked files are unknown")
    for name in listed.stdout.splitlines():
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    return src


@pytest.fixture(scope="module")
def wheel(source, tmp_path_factory) -> Path:
    if not setuptools_ok():
        pytest.skip("building offline needs setuptools 77+ installed")
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", out,
        source, cwd=out)
    (found,) = out.glob("sailfish_tts-*.whl")
    return found


def running_site_dirs() -> list[str]:
    """The site folders the running Python imports from (a virtual environment's own, not its
    base interpreter's, unless it includes them), user site included where it is on."""
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        dirs.append(site.getusersitepackages())
    return [d for d in dirs if d in sys.path]


def venv(path: Path) -> Path:
    """A fresh environment that imports what the running Python imports (torch, this pip, this
    setuptools) and nothing of the base interpreter's: ``python -m venv`` from inside a virtual
    environment builds on the base interpreter, whose ``--system-site-packages`` may lack torch
    and hold an old setuptools (one that rejects the SPDX ``license = "MIT"``). A ``.pth`` adds
    the running Python's site folders (``site.addsitedir``: their own ``.pth`` files work)."""
    run(sys.executable, "-m", "venv", "--without-pip", path, cwd=path.parent)
    lib = next((path / "lib").glob("python3*")) if (path / "lib").is_dir() else path / "Lib"
    packages = lib / "site-packages"
    packages.mkdir(parents=True, exist_ok=True)
    (packages / "zz_running_python.pth").write_text(
        f"import site; list(map(site.addsitedir, {running_site_dirs()!r}))\n")
    return path / ("Scripts" if os.name == "nt" else "bin")


def requirements() -> list[str]:
    lines = [ln.split("#")[0].strip()
             for ln in (ROOT / "requirements.txt").read_text().splitlines()]
    return [ln for ln in lines if ln]


def test_throwaway_venv_imports_the_running_pythons_packages(tmp_path):
    """Run from a virtual environment (the README's set-up, CI's), the throwaway one imports
    that environment's torch and setuptools, not the base interpreter's (or none)."""
    import torch

    bin_dir = venv(tmp_path / "venv")
    seen = run(bin_dir / "python", "-c", "import sys, torch, pip; print(torch.__file__); "
               "print(sys.prefix)", cwd=tmp_path).stdout.split()
    assert seen == [torch.__file__, str(tmp_path / "venv")]  # installs still go to the venv
    if setuptools_ok():
        import setuptools

        found = run(bin_dir / "python", "-c", "import setuptools; print(setuptools.__file__)",
                    cwd=tmp_path).stdout.strip()
        assert found == setuptools.__file__


@needs_setuptools
def test_wheel_holds_the_engine_the_command_and_the_licence(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = z.read(f"{info}/METADATA").decode()
        entry_points = z.read(f"{info}/entry_points.txt").decode()
        licence = z.read(f"{info}/licenses/LICENSE").decode()
    assert {n.split("/")[0] for n in names} == {"fish_core", "quant", info}  # no tests/, nodes/
    assert "fish_core/loading/siblings.py" in names and "quant/convert.py" in names
    assert re.search(r"^sailfish = fish_core\.cli:main$", entry_points, re.MULTILINE)
    assert "License-Expression: MIT" in metadata and licence.startswith("MIT License")
    assert "Copyright (c) 2026 Sailfish contributors" in licence
    required = sorted(re.findall(r"^Requires-Dist: ([^;\n]+)$", metadata, re.MULTILINE))
    assert [r.replace(" ", "") for r in required] == sorted(requirements())  # torch is not one


@needs_setuptools
def test_installed_command_works_outside_the_checkout(wheel, tmp_path):
    bin_dir = venv(tmp_path / "venv")
    run(bin_dir / "python", "-m", "pip", "install", "--no-deps", "--no-index", wheel,
        cwd=tmp_path)
    where = run(bin_dir / "python", "-c", "import fish_core, quant; "
                "from fish_core.loading.siblings import quant as q; "
                "print(fish_core.__file__, quant.__file__, q is quant)", cwd=tmp_path)
    fish_file, quant_file, same = where.stdout.split()
    assert str(tmp_path / "venv") in fish_file and str(tmp_path / "venv") in quant_file
    assert same == "True"
    command = run(bin_dir / "sailfish", "say", "--help", cwd=tmp_path).stdout
    module = run(bin_dir / "python", "-m", "fish_core", "say", "--help", cwd=tmp_path).stdout
    assert command.startswith("usage: sailfish say") and "fp8" in command  # quant's modes
    same = re.sub(r"\s+", " ", module.replace("python -m fish_core", "sailfish"))
    assert re.sub(r"\s+", " ", command) == same  # the same parser, only the name differs
    out = tmp_path / "installed.wav"
    said = run(bin_dir / "sailfish", "say", "Installed.", "--model", fixtures_dir() / "tiny-s2",
               "-o", out, "--max-new-tokens", "6", "--seed", "1", cwd=tmp_path)
    assert said.stdout.startswith(f"wrote {out}") and out.stat().st_size > 44


@needs_setuptools
def test_editable_install_runs_the_checkout(source, tmp_path):
    bin_dir = venv(tmp_path / "venv")
    run(bin_dir / "python", "-m", "pip", "install", "--no-deps", "--no-build-isolation", "-e",
        source, cwd=tmp_path)
    where = run(bin_dir / "python", "-c", "import fish_core, quant; "
                "print(fish_core.__file__, quant.__file__)", cwd=tmp_path).stdout.split()
    assert where == [str(source / "fish_core" / "__init__.py"),
                     str(source / "quant" / "__init__.py")]
    assert run(bin_dir / "sailfish", "--help", cwd=tmp_path).stdout.startswith("usage: sailfish")
    blocked = run(bin_dir / "python", "-c", "import importlib.util as u; "
                  "print(u.find_spec('nodes'), u.find_spec('tests'))", cwd=tmp_path)
    assert blocked.stdout.split() == ["None", "None"]  # the pack's other folders stay out


# ---------------------------------------------------------------- the ComfyUI registry
def test_pyproject_holds_what_the_registry_needs():
    """The fields ``comfy node validate`` and the registry read (Comfy-Org/docs
    registry/specifications)."""
    project, comfy = PROJECT["project"], PROJECT["tool"]["comfy"]
    assert re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]{0,99}", project["name"])
    assert "comfyui" not in project["name"].lower()
    assert re.fullmatch(r"\d+\.\d+\.\d+", project["version"])
    assert project["version"] == re.search(r'__version__ = "([^"]+)"',
                                           (ROOT / "fish_core" / "__init__.py").read_text())[1]
    assert project["license"] == "MIT" and (ROOT / "LICENSE").is_file()
    assert project["urls"]["Repository"].startswith("https://")
    assert comfy["PublisherId"] and comfy["DisplayName"] and comfy["web"] == "web"
    assert re.fullmatch(r">=\d+\.\d+\.\d+", comfy["requires-comfyui"])
    assert project["dependencies"] == requirements()  # one list, requirements.txt's
    assert project["scripts"] == {"sailfish": "fish_core.cli:main"}


def test_comfy_node_validate(source):
    comfy = os.environ.get("COMFY_CLI") or shutil.which("comfy")
    if not comfy:
        pytest.skip("comfy-cli is not installed (pip install comfy-cli; or COMFY_CLI=path)")
    proc = subprocess.run([comfy, "--skip-prompt", "--no-enable-telemetry", "node", "validate"],
                          cwd=source, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "validation checks passed" in output and "Warning" not in output, output
