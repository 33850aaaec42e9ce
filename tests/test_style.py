"""House style the suite holds the code to: ruff's rules (pyproject.toml) with no finding, and no
backslash line continuations (parentheses instead: they read better and keep the structure
tools able to follow a statement)."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def python_files() -> list[Path]:
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True,
                             text=True)
    if tracked.returncode == 0 and tracked.stdout.strip():
        return [ROOT / name for name in tracked.stdout.split()]
    return [p for p in ROOT.rglob("*.py") if ".git" not in p.parts and ".venv" not in p.parts]


def ruff_command() -> list[str] | None:
    if shutil.which("ruff"):
        return ["ruff"]
    probe = subprocess.run([sys.executable, "-m", "ruff", "--version"], capture_output=True)
    return [sys.executable, "-m", "ruff"] if probe.returncode == 0 else None


def test_ruff_finds_nothing():
    command = ruff_command()
    if command is None:
        pytest.skip("ruff is not installed (.ci/run and the README's test set-up install it)")
    found = subprocess.run([*command, "check", "--output-format", "concise", "."], cwd=ROOT,
                           capture_output=True, text=True)
    assert found.returncode == 0, found.stdout + found.stderr


def backslash_continuations(source: str) -> list[int]:
    """Lines that end in a backslash outside a string: an explicit line continuation."""
    in_string = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.STRING or token.type == getattr(tokenize, "FSTRING_MIDDLE", -1):
            in_string.update(range(token.start[0], token.end[0]))
    return [n for n, line in enumerate(source.splitlines(), 1)
            if line.rstrip().endswith("\\") and n not in in_string]


def test_backslash_continuations_are_found():
    assert backslash_continuations("x = 1 + \\\n    2\n") == [1]
    assert backslash_continuations('x = """a \\\nb"""\ny = (1 +\n     2)\n') == []


def test_no_backslash_continuations():
    found = [f"{p.relative_to(ROOT)}:{n}" for p in python_files()
             for n in backslash_continuations(p.read_text(encoding="utf-8"))]
    assert not found, "use parentheses instead of a backslash at: " + ", ".join(found)
