"""``xrmq up --print-systemd CONFIG``: one unit per process, ordered and restarted as the
config says (issue 17, item 9)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from xrmq.actors.edge.config_loader import decode_config, load_config
from xrmq.actors.edge.systemd import systemd_units

CONFIG = Path(__file__).parent.parent / "examples" / "edge-box.toml"


def section(unit: str, name: str) -> dict[str, str]:
    lines = unit.split(f"[{name}]\n", 1)[1].split("\n\n", 1)[0].splitlines()
    return dict(line.split("=", 1) for line in lines)


def test_every_process_of_the_reference_config_gets_a_unit_running_it_in_dependency_order():
    units = systemd_units(load_config(CONFIG), str(CONFIG), python="/opt/py")
    assert list(units) == [
        "xrmq-bus.service",
        "xrmq-context.service",
        "xrmq-compaction.service",
        "xrmq-conversation.service",
        "xrmq-router.service",
        "xrmq-renderer.service",
        "xrmq.target",
    ]
    router = units["xrmq-router.service"]
    service = section(router, "Service")
    assert (
        service["ExecStart"]
        == f"/opt/py -m xrmq.actors.cli run router --shard 0 --config {CONFIG.resolve()}"
    )
    assert service["Restart"] == "on-failure" and service["RestartSec"] == "0.5"
    assert section(router, "Unit")["After"] == "xrmq-bus.service xrmq-conversation.service"
    assert section(router, "Unit")["Requires"] == "xrmq-bus.service xrmq-conversation.service"
    assert (
        section(router, "Unit")["StartLimitBurst"] == "5"
        and section(router, "Unit")["StartLimitIntervalSec"] == "60"
    )
    assert section(units["xrmq-context.service"], "Service")["Nice"] == "19"
    bus = section(units["xrmq-bus.service"], "Service")
    assert bus["ExecStartPre"] == f"/opt/py -m xrmq.actors.cli up --check {CONFIG.resolve()}"
    assert bus["ExecStart"] == "/opt/py -m xrmq.actors.cli bus --bus default"
    assert section(units["xrmq.target"], "Unit")["Wants"].split() == list(units)[:-1]


def test_replicas_get_a_unit_each_and_their_dependents_wait_for_all_of_them(tmp_path):
    config = decode_config(
        {
            "processes": {
                "context": {
                    "roles": ["context"],
                    "replicas": 2,
                    "restart": {"max_crashes": 3, "backoff_initial_s": 2},
                },
                "app": {"roles": ["edge_roles:idle"], "after": ["context"]},
            },
        },
        source="edge.toml",
    )
    units = systemd_units(config, str(tmp_path / "edge.toml"), python="py")
    assert "xrmq-context-0.service" in units and "xrmq-context-1.service" in units
    assert section(units["xrmq-context-1.service"], "Service")["ExecStart"].endswith(
        f"run context --shard 1 --config {tmp_path / 'edge.toml'}"
    )
    assert section(units["xrmq-context-1.service"], "Service")["RestartSec"] == "2"
    assert section(units["xrmq-context-1.service"], "Unit")["StartLimitBurst"] == "3"
    assert section(units["xrmq-app.service"], "Unit")["After"] == (
        "xrmq-bus.service xrmq-context-0.service xrmq-context-1.service"
    )


def test_print_systemd_prints_every_unit_under_its_path():
    result = subprocess.run(
        [sys.executable, "-m", "xrmq.actors.cli", "up", "--print-systemd", str(CONFIG)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    headers = [
        line for line in result.stdout.splitlines() if line.startswith("# /etc/systemd/system/")
    ]
    assert headers[0] == "# /etc/systemd/system/xrmq-bus.service" and headers[-1].endswith(
        "xrmq.target"
    )
    assert len(headers) == 7
