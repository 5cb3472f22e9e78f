"""A config that cannot answer (or cannot start) is an error before anything starts;
a clean exit is not a crash; the ready line's bus works with ``--bus`` (issue 17, item 4)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys

import pytest

from xrmq.actors.edge.checks import check_can_answer, model_endpoints
from xrmq.actors.edge.config import ConfigError
from xrmq.actors.edge.config_loader import decode_config, default_config, load_config
from xrmq.actors.models import parse_model_spec

from buses import broker_process, expect_line, reap
from edge_box import start_up, write_config
from secure_bus import free_tcp_bus

CLI = [sys.executable, "-m", "xrmq.actors.cli"]
STACK = {
    "context": {"roles": ["context"]},
    "conversation": {"roles": ["conversation"], "after": ["context"]},
    "router": {"roles": ["router"], "after": ["conversation"]},
}
DESTINATIONS = {"conversation": {"description": "General assistant."}}


def rule_of(raw: dict) -> str:
    with pytest.raises(ConfigError) as raised:
        check_can_answer(decode_config(raw, source="edge.toml"))
    return str(raised.value)


def test_a_config_with_only_models_runs_the_default_box_and_check_says_so(tmp_path):
    path = tmp_path / "edge.toml"
    path.write_text(f'[bus]\naddress = "ipc://{tmp_path}/bus"\n[models]\nanswers = "local"\n')
    result = subprocess.run(
        [*CLI, "up", "--check", str(path)], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"xrmq up: {path}: names no processes, so it runs the built-in default box's processes "
        "(context, compaction, conversation, router, renderer), destination 'conversation' "
        "and context topics (scene, notes) (examples/edge-box.toml spells them out)",
        f"xrmq up: {path}: ok (5 processes; bus security none)",
    ]
    config = load_config(path)
    default = default_config()
    assert (config.processes, config.destinations, config.context.topics) == (
        default.processes,
        default.destinations,
        default.context.topics,
    )
    assert config.models.answers == parse_model_spec("local")


def test_a_config_without_processes_keeps_its_own_destinations_and_topics():
    config = decode_config(
        {
            "destinations": {"helper": {"description": "Helps."}},
            "context": {"topics": {"room": {"mode": "summary"}}},
        }
    )
    assert config.processes == default_config().processes
    assert list(config.destinations) == ["helper"] and config.router.default is None
    assert list(config.context.topics) == ["room"]
    assert config.defaulted == ("processes",)
    check_can_answer(config)
    named = decode_config({"processes": {"agents": {"roles": ["edge_roles:echo"]}}})
    assert named.defaulted == () and list(named.processes) == ["agents"]


def test_a_config_without_a_router_or_a_conversation_fails_the_check():
    without_router = {name: spec for name, spec in STACK.items() if name != "router"}
    assert rule_of({"destinations": DESTINATIONS, "processes": without_router}) == (
        "edge.toml: processes: no process runs the 'router' role: "
        "queries on voice.query would get no answer"
    )
    without_conversation = {"context": STACK["context"], "router": {"roles": ["router"]}}
    assert rule_of({"destinations": DESTINATIONS, "processes": without_conversation}) == (
        "edge.toml: processes: no process runs the 'conversation' role: "
        "the router's destinations would be served by nobody"
    )
    assert rule_of({"processes": STACK}) == (
        "edge.toml: destinations: none configured: the router has no destination for a turn"
    )


def test_a_role_configured_twice_fails_the_check():
    twice = {**STACK, "router2": {"roles": ["router"]}}
    assert rule_of({"destinations": DESTINATIONS, "processes": twice}) == (
        "edge.toml: processes.router2.roles[0]: role 'router' already runs in process 'router': "
        "a role of the answer path runs in one process"
    )
    replicated = {**STACK, "router": {"roles": ["router"], "replicas": 2}}
    assert rule_of({"destinations": DESTINATIONS, "processes": replicated}) == (
        "edge.toml: processes.router.replicas: must be 1 for role 'router': "
        "its replicas do not shard, each would take every turn"
    )


def test_an_unset_api_key_env_fails_the_check(monkeypatch):
    monkeypatch.delenv("XRMQ_TEST_UNSET_KEY", raising=False)
    spec = {"model": "openai/gpt-5-mini", "api_key_env": "XRMQ_TEST_UNSET_KEY"}
    raw = {"models": {"answers": spec}, "destinations": DESTINATIONS, "processes": STACK}
    assert (
        rule_of(raw) == "edge.toml: models.answers.api_key_env: "
        "environment variable XRMQ_TEST_UNSET_KEY is not set"
    )
    own = {"conversation": {"description": "Helper.", "model": spec}}
    assert rule_of({"destinations": own, "processes": STACK}) == (
        "edge.toml: destinations.conversation.model.api_key_env: "
        "environment variable XRMQ_TEST_UNSET_KEY is not set"
    )
    monkeypatch.setenv("XRMQ_TEST_UNSET_KEY", "sk-test")
    check_can_answer(decode_config(raw, source="edge.toml"))


def test_the_reference_and_default_configs_pass_and_application_roles_need_no_router():
    from pathlib import Path

    from xrmq.actors.edge.config_loader import default_config, load_config

    check_can_answer(default_config())
    check_can_answer(load_config(Path(__file__).parent.parent / "examples" / "edge-box.toml"))
    check_can_answer(decode_config({"processes": {"agents": {"roles": ["edge_roles:echo"]}}}))


def test_up_on_a_bus_already_served_exits_2_with_one_message_and_starts_nothing(tmp_path):
    with broker_process() as bus:
        path = tmp_path / "edge.toml"
        path.write_text(
            f'[bus]\naddress = "{bus}"\n[destinations.conversation]\ndescription = "x"\n'
            '[processes.context]\nroles = ["context"]\n'
            '[processes.conversation]\nroles = ["conversation"]\n'
            '[processes.router]\nroles = ["router"]\n'
        )
        result = subprocess.run([*CLI, "up", str(path)], capture_output=True, text=True, timeout=30)
        # the serving broker's sockets are untouched
        assert os.path.exists(bus[len("ipc://") :] + ".in")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"xrmq up: {path}: bus.address: {bus!r} is already served by a running "
        "broker (another `xrmq up`?)"
    )
    assert result.stdout == ""


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_up_check_refuses_a_bus_another_broker_serves(tmp_path, transport):
    bus = f"ipc://{tmp_path}/bus" if transport == "ipc" else free_tcp_bus()
    broker = subprocess.Popen(
        [*CLI, "bus", "--bus", bus],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "XRMQ_LOG_LEVEL": "WARNING"},
    )
    try:
        expect_line(broker, "xrmq bus: ready")
        path = tmp_path / "edge.toml"
        path.write_text(
            f'[bus]\naddress = "{bus}"\n[destinations.conversation]\ndescription = "x"\n'
            '[processes.context]\nroles = ["context"]\n'
            '[processes.conversation]\nroles = ["conversation"]\n'
            '[processes.router]\nroles = ["router"]\n'
        )
        result = subprocess.run(
            [*CLI, "up", "--check", str(path)], capture_output=True, text=True, timeout=30
        )
    finally:
        reap(broker)
    assert result.returncode == 2, result.stdout
    assert result.stdout == ""
    assert result.stderr.strip().startswith(f"xrmq up: {path}: bus.address: {bus!r}")
    assert "(another `xrmq up`?)" in result.stderr
    after = subprocess.run(  # the broker gone, the same config passes
        [*CLI, "up", "--check", str(path)], capture_output=True, text=True, timeout=30
    )
    assert after.returncode == 0 and after.stdout.startswith(f"xrmq up: {path}: ok"), after


def test_up_with_an_unset_key_exits_2_before_starting_anything(tmp_path):
    path = tmp_path / "edge.toml"
    path.write_text(
        f'[bus]\naddress = "ipc://{tmp_path}/bus"\n[models]\nanswers = "hosted"\n'
        '[destinations.conversation]\ndescription = "x"\n'
        '[processes.context]\nroles = ["context"]\n'
        '[processes.conversation]\nroles = ["conversation"]\n'
        '[processes.router]\nroles = ["router"]\n'
    )
    env = {key: value for key, value in os.environ.items() if key != "OPENAI_API_KEY"}
    result = subprocess.run(
        [*CLI, "up", str(path)], capture_output=True, text=True, timeout=30, env=env
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"xrmq up: {path}: models.answers.api_key_env: environment variable "
        "OPENAI_API_KEY is not set"
    )
    assert result.stdout == "" and sorted(p.name for p in tmp_path.iterdir()) == ["edge.toml"]


def test_a_clean_exit_is_not_a_crash_and_the_ready_line_bus_works_with_bus(tmp_path):
    config = write_config(
        tmp_path, '[processes.idle]\nroles = ["edge_roles:idle"]\n', restart="max_crashes = 1"
    )  # a single crash would give up
    up = start_up(config)
    try:
        ready = expect_line(up, "xrmq up: ready")
        bus = re.search(r"bus=(\S+)", ready)[1]
        assert bus == f"ipc://{tmp_path}/bus"
        published = subprocess.run(
            [*CLI, "publish", "--bus", bus, "notes", "--participant", "p1", "hello"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert published.returncode == 0, published.stderr
        pid = int(re.search(r"idle=(\d+)", ready)[1])
        os.kill(pid, signal.SIGTERM)
        assert expect_line(up, "xrmq up: idle exited") == (
            "xrmq up: idle exited cleanly (exit code 0), not a crash; restarting in 0.05s"
        )
        assert expect_line(up, "xrmq up: restarted idle").startswith("xrmq up: restarted idle pid=")
        up.send_signal(signal.SIGTERM)
        assert up.wait(timeout=30) == 0
    finally:
        reap(up)


def test_up_warns_at_start_that_a_model_endpoint_did_not_answer_and_keeps_running(tmp_path):
    with socket.socket() as refusing, socket.socket() as listening:
        refusing.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        down = f"http://127.0.0.1:{refusing.getsockname()[1]}/v1"
        up_ = f"http://127.0.0.1:{listening.getsockname()[1]}/v1"
        config = write_config(
            tmp_path,
            f'[models]\nanswers = {{ preset = "local", api_base = "{down}" }}\n'
            f'compaction = {{ preset = "local", api_base = "{up_}" }}\n'
            '[processes.idle]\nroles = ["edge_roles:idle"]\n',
        )
        up = start_up(config)
        try:
            assert up.stdout is not None
            before_ready = []
            for line in up.stdout:  # up to the ready line: the box started all the same
                before_ready.append(line.strip())
                if line.startswith("xrmq up: ready"):
                    break
            up.send_signal(signal.SIGTERM)
            assert up.wait(timeout=30) == 0
        finally:
            reap(up)
    assert before_ready[-1].startswith("xrmq up: ready"), before_ready
    warnings = [line for line in before_ready if "WARNING" in line]
    assert len(warnings) == 1, before_ready
    assert warnings[0].startswith(
        f"xrmq up: WARNING: model endpoint {down} did not answer (models.answers: "
    ), warnings


def test_only_the_http_endpoints_of_models_the_box_uses_are_probed():
    local = {"preset": "local", "api_base": "http://127.0.0.1:9/v1"}
    raw = {"models": {"answers": local, "routing": {**local, "api_base": "http://10.0.0.1/v1"}}}
    # the router decides "first": the routing model is not used, so not probed
    assert model_endpoints(decode_config(raw)) == [("models.answers", "http://127.0.0.1:9/v1")]
    llm = decode_config({**raw, "router": {"decisions": "llm"}})
    assert [url for _, url in model_endpoints(llm)] == [
        "http://127.0.0.1:9/v1",
        "http://10.0.0.1/v1",
    ]
    assert model_endpoints(default_config()) == []  # offline models have no endpoint
