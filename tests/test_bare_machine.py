"""The README's test command on a machine that has nothing but Python.

A test or benchmark that needs a system package (espeak-ng) skips it with the package named,
instead of failing: shown here on a ``PATH`` without espeak-ng (``path_without``), so it
holds on a machine that has it too (CI installs it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from system_packages import path_without

ROOT = Path(__file__).resolve().parent.parent

pytest.importorskip("numpy")  # the voice tests need the voice extra before they need espeak-ng


def _without_espeak(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PATH": path_without(tmp_path / "bin", "espeak-ng")}


@pytest.mark.timeout(240)
def test_the_voice_tests_skip_naming_espeak_ng_on_a_machine_without_it(tmp_path):
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            "tests/test_voice_role.py",
            "tests/test_voice_sinks.py",
        ],
        cwd=ROOT,
        env=_without_espeak(tmp_path),
        capture_output=True,
        text=True,
        timeout=220,
    )
    assert run.returncode == 0, run.stdout[-3000:]
    skips = [line for line in run.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skips and all("apt-get install espeak-ng" in line for line in skips), skips


@pytest.mark.timeout(200)
def test_the_voice_benchmark_skips_its_speaking_rows_naming_espeak_ng(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(tmp_path), "voice"],
        cwd=ROOT,
        env=_without_espeak(tmp_path),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    (suite,) = json.loads((tmp_path / "results.json").read_text())["suites"]
    assert suite["status"] == "ok", suite.get("error")
    rows = suite["result"]["rows"]
    assert rows and not any("espeak-ng" in row["subject"] for row in rows)
    assert any("apt-get install espeak-ng" in note for note in suite["result"]["notes"])
