"""The bus commands: xrmq bus, xrmq publish and xrmq schema, as separate processes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from buses import broker_process, expect_line, python, reap

pytestmark = pytest.mark.timeout(60)


def xrmq(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "xrmq.actors.cli", *args], capture_output=True, text=True, timeout=30
    )


def test_publish_sends_a_context_update_for_a_participant():
    with broker_process() as bus:
        subscriber = python("subscriber.py", bus, "sample.notes", "1", "p1")
        try:
            expect_line(subscriber, "ready")
            result = xrmq(
                "publish", "--bus", bus, "--participant", "p1", "sample.notes", "Kettle is on."
            )
            assert result.returncode == 0, result.stderr
            report = json.loads(expect_line(subscriber, "{"))
        finally:
            reap(subscriber)
    assert report["texts"] == ["Kettle is on."]


def test_publish_rejects_a_payload_that_breaks_the_schema():
    result = xrmq("publish", "--bus", "ipc:///tmp/nowhere/bus", "voice.output", '{"kind": "reply"}')
    assert result.returncode == 2
    assert "request_id: is required for replies" in result.stderr


def test_a_second_broker_on_the_same_bus_is_refused():
    with broker_process() as bus:
        result = xrmq("bus", "--bus", bus)
    assert result.returncode == 2
    assert "a broker already serves" in result.stderr


def test_schema_prints_json_schema_of_the_envelope_and_every_standard_topic():
    result = xrmq("schema")
    assert result.returncode == 0
    document = json.loads(result.stdout)
    assert document["envelope"] == {"$ref": "#/$defs/MessageMetadata"}
    assert set(document["topics"]) >= {
        "voice.output",
        "voice.query",
        "voice.interrupted",
        "<context topic>",
    }
    assert document["$defs"]["ResponseOutput"]["properties"]["kind"]["enum"] == [
        "reply",
        "update",
        "withdraw",
    ]
