"""The suite's own harness: every ``async def`` test is bounded, on uvloop as on asyncio.

pytest-timeout's SIGALRM handler never runs while uvloop waits, so a hung test on uvloop
used to hang the whole run (``conftest.py``). These run a small suite of hanging tests
with this conftest, in a pytest of its own (a subprocess, itself bounded), and read its
report.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest
from conftest import GRACE_S

pytestmark = pytest.mark.timeout(120)

HANGING = """
import asyncio
import os
from pathlib import Path

import pytest

pytestmark = [pytest.mark.both_loops, pytest.mark.timeout(1)]


async def test_waits_forever(event_loop_kind):
    try:
        await asyncio.Event().wait()
    finally:  # the cancellation reaches the test: its cleanup runs
        Path(os.environ["CLEANED"], event_loop_kind).write_text("cleaned")


async def test_raises_its_own_timeout_error():
    raise TimeoutError("the test's own")


@pytest.mark.timeout(30)
async def test_finishes_in_time():
    await asyncio.sleep(0)
"""


@pytest.fixture(scope="module")
def hanging_suite(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dict[str, str], str, float]:
    """``HANGING`` run with this conftest: its directory, {test id: "passed" or its failure
    message}, the output, and how long the run took."""
    tmp_path = tmp_path_factory.mktemp("hanging")
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_hanging.py").write_text(HANGING)
    (tmp_path / "cleaned").mkdir()
    began = time.monotonic()
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"),
            *("-o", "timeout=60", "-o", "markers=both_loops", "--junitxml=report.xml"),
        ],
        cwd=tmp_path,
        env={**os.environ, "CLEANED": str(tmp_path / "cleaned")},
        capture_output=True,
        text=True,
        timeout=90,
    )
    took = time.monotonic() - began
    outcomes = {}
    for case in ElementTree.parse(tmp_path / "report.xml").getroot().iter("testcase"):
        failure = case.find("failure")
        outcomes[case.get("name", "")] = "passed" if failure is None else failure.get("message", "")
    return tmp_path, outcomes, done.stdout + done.stderr, took


def test_a_hung_async_test_fails_at_its_timeout_on_either_loop_and_its_cleanup_runs(
    hanging_suite,
):
    tmp_path, outcomes, output, took = hanging_suite
    for loop in ("asyncio", "uvloop"):
        name = f"test_waits_forever[{loop}]"
        assert outcomes[name] == f"Failed: Timeout: {name} did not finish within 1 s", output
        assert (tmp_path / "cleaned" / loop).read_text() == "cleaned"
        assert outcomes[f"test_finishes_in_time[{loop}]"] == "passed", output
    assert took < 1 + GRACE_S, output  # the test's own timeout ended it, not the backstop


def test_a_tests_own_timeout_error_is_its_failure_not_a_harness_timeout(hanging_suite):
    _, outcomes, output, _ = hanging_suite
    for loop in ("asyncio", "uvloop"):
        assert outcomes[f"test_raises_its_own_timeout_error[{loop}]"] == (
            "TimeoutError: the test's own"
        ), output
