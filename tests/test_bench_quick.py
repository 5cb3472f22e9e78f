"""`python -m bench --quick` keeps every benchmark suite working (it asserts nothing about speed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_quick_run_writes_results_for_every_suite(tmp_path: Path) -> None:
    listed = subprocess.run([sys.executable, "-m", "bench", "--list"], cwd=ROOT, capture_output=True, text=True,
                            timeout=30, check=True)
    suites = [line.split()[0] for line in listed.stdout.splitlines()]
    assert {"bus", "codec", "turn", "storm", "context", "models"} <= set(suites)

    run = subprocess.run([sys.executable, "-m", "bench", "--quick", "--out", str(tmp_path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=55)
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())

    assert results["quick"] is True
    assert results["commit"] and results["machine"]["cpus_usable"] >= 1 and results["versions"]["python"]
    assert [suite["name"] for suite in results["suites"]] == suites
    for suite in results["suites"]:
        assert suite["status"] == "ok", suite.get("error")
        rows = suite["result"]["rows"]
        assert rows, suite["name"]
        for row in rows:
            assert {"group", "subject", "unit", "median", "repetitions", "higher_is_better"} <= row.keys()
            assert row["median"] > 0 and len(row["repetitions"]) == results["repetitions"]
        for bar in suite["result"]["bars"]:
            assert bar["op"] in (">=", "<=") and isinstance(bar["met"], bool)
    bus = next(suite["result"] for suite in results["suites"] if suite["name"] == "bus")
    subjects = {(row["group"], row["subject"]) for row in bus["rows"]}
    for subject in ("raw pyzmq", "raw pyzmq + msgspec, per message", "xrmq actors"):
        assert ("one-way throughput, cross-process (shared cores)", subject) in subjects
        assert ("ask round trip p50, cross-process (shared cores)", subject) in subjects
    assert all(row["extra"]["lost"] == 0 for row in bus["rows"] if row["group"].startswith("one-way throughput, cross"))
    storm = next(suite["result"] for suite in results["suites"] if suite["name"] == "storm")
    assert [bar["name"] for bar in storm["bars"]] == ["storm p99 / idle p99",
                                                      "storm p99 journal on / off"]
    assert "### bus" in run.stdout
