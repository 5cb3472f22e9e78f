"""`python -m bench --quick` keeps every benchmark suite working (it asserts nothing about speed).

Each suite runs in a process of its own, so one slow suite cannot eat the others' time
and a failure names its suite; the set of suites is what the runner discovers.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.registry import discover  # noqa: E402  (bench/ is not installed: the repository's)

_ENVIRONMENT = dict(os.environ)
SUITES = list(discover()[0])
_ENVIRONMENT_AFTER_IMPORT = dict(os.environ)


def test_importing_the_suites_leaves_the_environment_alone() -> None:
    """The suite modules are imported here at collection: one that set, say, the log level
    at import would set it for every test in the run."""
    assert _ENVIRONMENT_AFTER_IMPORT == _ENVIRONMENT


def test_the_runner_lists_every_suite_it_discovers() -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "bench", "--list"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    suites = [line.split()[0] for line in listed.stdout.splitlines()]
    assert suites == SUITES
    assert {"bus", "codec", "turn", "storm", "context", "models", "curve"} <= set(suites)


@pytest.mark.timeout(200)
@pytest.mark.parametrize("name", SUITES)
def test_quick_run_writes_results_for_the_suite(name: str, tmp_path: Path) -> None:
    if name == "pipecat" and importlib.util.find_spec("pipecat") is None:
        pytest.skip("pipecat-ai is not installed (the bench extra): no Pipecat side-by-side")
    if name == "pipecat" and shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed: the Pipecat side-by-side has no questions")
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(tmp_path), name],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())

    assert results["quick"] is True
    assert (
        results["commit"]
        and results["machine"]["cpus_usable"] >= 1
        and results["versions"]["python"]
    )
    assert [suite["name"] for suite in results["suites"]] == [name]
    suite = results["suites"][0]
    assert suite["status"] == "ok", suite.get("error")
    rows = suite["result"]["rows"]
    assert rows, name
    for row in rows:
        assert {
            "group",
            "subject",
            "unit",
            "median",
            "repetitions",
            "higher_is_better",
        } <= row.keys()
        assert row["median"] > 0 and len(row["repetitions"]) == results["repetitions"]
    for bar in suite["result"]["bars"]:
        assert bar["op"] in (">=", "<=") and isinstance(bar["met"], bool)
    assert f"### {name}" in run.stdout
    if name == "bus":
        subjects = {(row["group"], row["subject"]) for row in rows}
        for subject in ("raw pyzmq", "raw pyzmq + msgspec, per message", "xrmq actors"):
            assert ("one-way throughput, cross-process (shared cores)", subject) in subjects
            assert ("ask round trip p50, cross-process (shared cores)", subject) in subjects
        assert all(
            row["extra"]["lost"] == 0
            for row in rows
            if row["group"].startswith("one-way throughput, cross")
        )
    if name == "storm":
        assert [bar["name"] for bar in suite["result"]["bars"]] == [
            "storm p99 / idle p99",
            "storm p99 journal on / off",
        ]
    if name == "turn":
        _check_turn_rows(rows, results["repetitions"])
    if name == "voice":
        speaks = any("espeak-ng" in row["subject"] for row in rows)
        assert speaks == (shutil.which("espeak-ng") is not None), rows
    if name == "pipecat":
        subjects = {(row["group"].split(",")[0], row["subject"]) for row in rows}
        for stage in ("transcript", "first reply chunk", "first audio frame"):
            for side in ("xrmq", "pipecat"):
                assert (f"end of speech -> {stage}", f"{side}, 1 speaker") in subjects
    if name == "curve":
        subjects = {row["subject"] for row in rows}
        assert subjects == {"tcp+curve+acl", "AccessPolicy.check_message"}
        assert all(row["extra"]["lost"] == 0 for row in rows if row["group"].startswith("one-way"))


def _check_turn_rows(rows: list[dict], repetitions: int) -> None:
    """The turn suite's baselines (issue 23): the back-to-back raw round trip and ``x raw`` as
    before, the paced raw ring and 2-hop round trip, ``x ring`` paired per repetition, the
    crossings of the counting pass and the CPU per turn of each process."""
    group = "turn to first chunk at the renderer, zero-delay model"
    by_subject = {row["subject"]: row for row in rows if row["group"] == group}
    turn = by_subject["xrmq turn path"]
    raw = by_subject["raw pyzmq round trip (same broker)"]
    ring = by_subject["raw pyzmq 3-hop ring (the turn's crossings), paced like the turns"]
    paced = by_subject["raw pyzmq 2-hop round trip, paced like the turns"]
    for baseline in (raw, ring, paced):
        assert baseline["median"] > 0 and baseline["extra"]["p99 us"] >= baseline["median"]
    extra = turn["extra"]
    paired = [t / r for t, r in zip(turn["repetitions"], ring["repetitions"], strict=True)]
    assert extra["x ring p50"] == pytest.approx(statistics.median(paired))
    paired_raw = [t / r for t, r in zip(turn["repetitions"], raw["repetitions"], strict=True)]
    assert extra["x raw p50"] == pytest.approx(statistics.median(paired_raw))
    assert extra["x ring p99"] > 0 and extra["x raw p99"] > 0
    assert 3 <= extra["crossings per turn p50"] <= extra["crossings per turn max"]
    assert extra["counting pass (tap on) p50 us"] > 0
    (cpu,) = [row for row in rows if row["group"].startswith("CPU per zero-delay turn")]
    per_process = {key.removesuffix(" us"): value for key, value in cpu["extra"].items()}
    assert set(per_process) == {"broker", "sections", "workers", "conversation", "router", "client"}
    assert all(per_process[name] > 0 for name in ("broker", "conversation", "router", "client"))
    assert repetitions == 1  # a quick run: the median of the sums is the sum of the medians
    assert cpu["median"] == pytest.approx(sum(per_process.values()))
