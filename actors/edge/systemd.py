"""``xrmq up --print-systemd CONFIG``: the edge box as systemd units instead of ``xrmq up``.

Why: on a box that boots into the edge stack, the init system should supervise it
(journal, boot ordering, restarts) rather than a shell running ``xrmq up``. Pure: the
units are text derived from the config, one per OS process:

- ``xrmq-bus.service`` checks the config first (``xrmq up --check CONFIG``: an unset
  key or a box that cannot answer fails the unit before anything runs), then runs the
  broker (``xrmq bus --bus ADDRESS``);
- ``xrmq-<process>.service`` (``xrmq-<process>-<shard>.service`` for replicas) runs
  ``xrmq run PROCESS --shard N --config CONFIG``, after and requiring the broker and
  the units of its ``after`` processes; ``nice`` becomes ``Nice=``;
- ``xrmq.target`` wants them all (``systemctl start xrmq.target``).

The restart policy maps to ``Restart=on-failure`` (a clean exit is not a failure),
``RestartSec=`` (``backoff_initial_s``) and ``StartLimitIntervalSec=``/``StartLimitBurst=``
(``window_s``/``max_crashes``: systemd gives up on a crash loop as ``xrmq up`` does).
``After=`` orders starts only: a process started before its broker is up waits for it in
its readiness handshake (``supervisor.ready_timeout_s``), as under ``xrmq up``.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from .config import EdgeConfig, ProcessInstance, RestartPolicyConfig

TARGET = "xrmq.target"
BUS_UNIT = "xrmq-bus.service"


def unit_name(instance: ProcessInstance) -> str:
    suffix = f"-{instance.shard}" if instance.shards > 1 else ""
    return f"xrmq-{instance.process}{suffix}.service"


def _restart(policy: RestartPolicyConfig) -> list[str]:
    return ["Restart=on-failure", f"RestartSec={policy.backoff_initial_s:g}"]


def _limits(policy: RestartPolicyConfig) -> list[str]:
    return [f"StartLimitIntervalSec={policy.window_s:g}", f"StartLimitBurst={policy.max_crashes}"]


def _unit(description: str, unit: list[str], service: list[str]) -> str:
    lines = [
        "[Unit]",
        f"Description={description}",
        f"PartOf={TARGET}",
        *unit,
        "",
        "[Service]",
        "Type=simple",
        *service,
        "",
        "[Install]",
        f"WantedBy={TARGET}",
        "",
    ]
    return "\n".join(lines)


def systemd_units(
    config: EdgeConfig, config_path: str, *, python: str = sys.executable
) -> dict[str, str]:
    """Unit file name -> text, for every process of ``config`` (see the module docstring)."""
    command = [python, "-m", "xrmq.actors.cli"]
    config_file = str(Path(config_path).resolve())
    policy = config.supervisor.restart
    bus = [*command, "bus", "--bus", config.bus.address] + (
        [] if config.bus.capture else ["--no-capture"]
    )
    check = [*command, "up", "--check", config_file]
    units = {
        BUS_UNIT: _unit(
            f"xrmq bus broker ({config_file})",
            _limits(policy),
            [
                f"ExecStartPre={shlex.join(check)}",
                f"ExecStart={shlex.join(bus)}",
                *_restart(policy),
            ],
        )
    }
    for name in config.processes:
        process_policy = config.restart_policy(name)
        spec = config.processes[name]
        needs = [
            BUS_UNIT,
            *(
                unit_name(instance)
                for dependency in spec.after
                for instance in config.instances(dependency)
            ),
        ]
        for instance in config.instances(name):
            argv = [*command, "run", name, "--shard", str(instance.shard), "--config", config_file]
            service = [
                f"ExecStart={shlex.join(argv)}",
                *_restart(process_policy),
                f"TimeoutStopSec={config.supervisor.shutdown_timeout_s:g}",
            ]
            if spec.nice:
                service.append(f"Nice={spec.nice}")
            unit = [
                f"After={' '.join(needs)}",
                f"Requires={' '.join(needs)}",
                *_limits(process_policy),
            ]
            units[unit_name(instance)] = _unit(
                f"xrmq {instance.runtime_name}: {', '.join(spec.roles)} ({config_file})",
                unit,
                service,
            )
    target = [
        "[Unit]",
        f"Description=xrmq edge box ({config_file})",
        f"Wants={' '.join(units)}",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ]
    units[TARGET] = "\n".join(target)
    return units


def render_units(units: dict[str, str]) -> str:
    """Every unit, each after a ``# /etc/systemd/system/<name>`` line (to split into files)."""
    return "\n".join(f"# /etc/systemd/system/{name}\n{text}" for name, text in units.items())
