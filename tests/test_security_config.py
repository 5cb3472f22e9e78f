"""Keys on disk, the ``[bus.security]`` and ``[bus.identities]`` config, role-derived
permissions and what ``xrmq top`` shows of identities: the parts that need no bus."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from xrmq.actors.edge.config import ConfigError
from xrmq.actors.edge.config_loader import decode_config, default_config, load_config
from xrmq.actors.edge.identities import broker_security, init_keys, permissions, role_permissions
from xrmq.actors.edge.roles import check_roles
from xrmq.actors.edge.top import TopView, render
from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.runtime.security import create_keypair, list_keys
from xrmq.actors.runtime.security.acl import Patterns
from xrmq.actors.runtime.security.keys import KeyFileError, client_credentials, load_secret
from xrmq.schemas import RuntimeMetrics

CLI = [sys.executable, "-m", "xrmq.actors.cli"]
EXAMPLES = Path(__file__).parent.parent / "examples"


def test_a_key_pair_is_written_in_zmq_auth_format_with_a_private_secret(tmp_path):
    public, secret = create_keypair("sensor", tmp_path / "keys")
    assert (public.name, secret.name) == ("sensor.key", "sensor.key_secret")
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "keys").stat().st_mode) == 0o700
    assert [(info.name, info.has_secret) for info in list_keys(tmp_path / "keys")] == [
        ("sensor", True)
    ]
    with pytest.raises(ValueError, match="already exists"):
        create_keypair("sensor", tmp_path / "keys")


def test_a_secret_key_readable_by_others_is_refused(tmp_path):
    _, secret = create_keypair("alice", tmp_path)
    os.chmod(secret, 0o640)
    with pytest.raises(KeyFileError, match="must not be readable by other users"):
        load_secret(secret)


def test_a_key_without_the_brokers_key_is_an_error_naming_both(tmp_path, monkeypatch):
    _, secret = create_keypair("alice", tmp_path)
    monkeypatch.delenv("XRMQ_SERVER_KEY", raising=False)
    with pytest.raises(
        ValueError, match=r"--key \(XRMQ_KEY\) and --server-key \(XRMQ_SERVER_KEY\)"
    ):
        client_credentials(secret)
    with pytest.raises(ValueError, match="an embedded bus has no broker"):
        AgentRuntime(key=secret)


def test_a_runtime_with_a_key_is_named_after_its_identity(tmp_path):
    create_keypair("broker", tmp_path)
    _, secret = create_keypair("alice", tmp_path)
    runtime = AgentRuntime("tcp://127.0.0.1:7300", key=secret, server_key=tmp_path / "broker.key")
    assert runtime.name.startswith("alice-") and runtime.credentials.identity == "alice"


def test_keys_commands_write_and_list(tmp_path):
    made = subprocess.run(
        [*CLI, "keys", "new", "ops", "--dir", str(tmp_path)], capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    listed = subprocess.run([*CLI, "keys", "list", str(tmp_path)], capture_output=True, text=True)
    name, public, kind = listed.stdout.strip().split("\t")
    assert (name, len(public), kind) == ("ops", 40, "pair")


@pytest.mark.parametrize(
    "raw, key, rule",
    [
        (
            {"bus": {"security": {"mode": "tls"}}},
            "bus.security.mode",
            "must be 'none' or 'curve', got 'tls'",
        ),
        (
            {"bus": {"identities": {"broker": {}}}},
            "bus.identities.broker",
            "is the broker's own key",
        ),
        (
            {"bus": {"identities": {"s": {"publish": ["no*tes"]}}}},
            "bus.identities.s.publish",
            "a name, a prefix ending in '*', or '*'",
        ),
        ({"bus": {"identities": {"s": {"key": "short"}}}}, "bus.identities.s.key", "40 characters"),
        (
            {"bus": {"identities": {"s": {"pubish": []}}}},
            "bus.identities.s.pubish",
            "did you mean 'publish'",
        ),
        (
            {"bus": {"address": "tcp://*:7300"}},
            "bus.address",
            "binds tcp beyond loopback without security",
        ),
        (
            {"bus": {"security": {"rescan_s": -1}}},
            "bus.security.rescan_s",
            "must be >= 0 (0: never re-scan)",
        ),
        (
            {"bus": {"identities": {"s": {"participants": ["guest-*-x"]}}}},
            "bus.identities.s.participants[0]",
            "'guest-*-x': a participant id, a prefix ending in '*' (\"guest-*\"), or '*'",
        ),
        (
            {"bus": {"identities": {"s": {"participants": ["alice", " "]}}}},
            "bus.identities.s.participants[1]",
            "a participant id, a prefix ending in '*'",
        ),
        (
            {"bus": {"identities": {"s": {"participants": "alice"}}}},
            "bus.identities.s.participants",
            "must be an array",
        ),
        (
            {
                "processes": {"front": {"roles": ["router"], "identity": "desk"}},
                "bus": {"identities": {"desk": {"participants": ["alice"]}}},
            },
            "bus.identities.desk.participants",
            "identity 'desk' runs role 'router' (process 'front'), whose actors serve every "
            "participant: leave participants out of its table",
        ),
        (
            {"bus": {"identities": {"s": {"participants": ["alice"], "capture": True}}}},
            "bus.identities.s.participants",
            "capture = true reads every participant's messages",
        ),
        (
            {"bus": {"identities": {"xrmq-context": {"participants": ["alice"]}}}},
            "bus.identities.xrmq-context.participants",
            "xrmq's own tool identity, which serves every participant",
        ),
    ],
)
def test_security_config_errors_name_the_key_and_the_rule(raw, key, rule):
    with pytest.raises(ConfigError) as caught:
        decode_config(raw, source="edge.toml")
    assert caught.value.key == key and rule in caught.value.rule


@pytest.mark.parametrize(
    "address", ["tcp://127.0.0.1:7300", "tcp://localhost:7300", "tcp://[::1]:7300"]
)
def test_a_plain_tcp_bus_on_loopback_is_accepted(address):
    assert decode_config({"bus": {"address": address}}).bus.address == address


def test_every_subscription_a_built_in_role_makes_is_within_its_derived_permissions():
    config = default_config()
    for name, builders in check_roles(config).items():
        runtime = AgentRuntime("ipc:///nonexistent/bus", name=name)
        for build in builders:
            build(runtime, config, config.instances(name)[0])
        topics = {prefix.split(b"\x00")[0].decode() for prefix in runtime._subscriptions}
        allowed = Patterns(role_permissions(config, config.processes[name].roles[0]).subscribe)
        assert [topic for topic in topics if topic not in allowed] == [], name


def test_the_router_may_publish_its_turn_records():
    router = role_permissions(default_config(), "router")
    assert "xrmq.turns" in Patterns(router.publish)  # else a CURVE broker drops them
    assert "xrmq.playback" in Patterns(router.subscribe)  # the renderer's playback stages


def test_role_defaults_are_least_privilege():
    config = default_config()
    renderer = role_permissions(config, "renderer")
    # its playback stages, for the router's turn records, and nothing else
    assert (renderer.publish, renderer.sources) == (["xrmq.playback"], ["voice_renderer"])
    assert "notes" not in Patterns(renderer.subscribe)
    router = role_permissions(config, "router")
    assert "voice.output" in Patterns(router.publish) and "router" in Patterns(router.sources)
    assert "conversation" not in Patterns(router.sources)
    assert role_permissions(config, "my.module:role") == role_permissions(config, "unknown")


def test_an_identity_table_replaces_the_derived_lists_it_names():
    config = decode_config(
        {
            **_processes(),
            "bus": {
                "identities": {
                    "renderer": {"subscribe": ["voice.output"]},
                    "alice": {"publish": ["voice.query"]},
                }
            },
        }
    )
    granted = permissions(config)
    assert granted["renderer"].subscribe == ["voice.output"]
    assert granted["alice"].publish == ["voice.query"] and granted["alice"].subscribe == []


def test_participants_bind_only_the_identities_whose_tables_name_them():
    config = decode_config(
        {
            **_processes(),
            "bus": {
                "identities": {
                    "alice": {"publish": ["voice.query"], "participants": ["alice"]},
                    "kiosk": {"participants": ["guest-*", "host"]},
                    "sensor": {"publish": ["notes"]},
                }
            },
        }
    )
    granted = permissions(config)
    assert granted["alice"].participants == ["alice"]
    assert granted["kiosk"].participants == ["guest-*", "host"]
    assert granted["sensor"].participants is None  # no key: every participant, as before
    assert granted["renderer"].participants is None  # the box's own: every participant


def _processes() -> dict:
    return {"processes": {"renderer": {"roles": ["renderer"]}}}


def test_the_secure_example_is_ready_after_init_keys(tmp_path):
    config_path = tmp_path / "secure.toml"
    shutil.copy(EXAMPLES / "secure-edge-box.toml", config_path)
    for client in ("alice", "sensor", "ops"):
        create_keypair(client, tmp_path / "keys")
    config = load_config(config_path)
    assert init_keys(config) == [
        "broker",
        "context",
        "compaction",
        "conversation",
        "router",
        "renderer",
        "xrmq-up",
        "xrmq-context",
    ]
    assert init_keys(config) == []  # only what is missing
    security = broker_security(config)
    assert sorted(security.identities) == sorted(
        [
            "alice",
            "sensor",
            "ops",
            "context",
            "compaction",
            "conversation",
            "router",
            "renderer",
            "xrmq-up",
            "xrmq-context",
        ]
    )
    checked = subprocess.run(
        [*CLI, "up", "--check", str(config_path)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.strip().endswith("ok (5 processes; bus security curve, 10 identities)")
    (tmp_path / "keys" / "xrmq-context.key").unlink()  # a box made before it had the identity
    assert "xrmq-context" not in broker_security(load_config(config_path)).identities


def test_every_subscription_of_the_context_commands_is_within_xrmq_contexts_permissions():
    from xrmq.actors.edge.context_commands import manager_for
    from xrmq.actors.edge.identities import CONTEXT_IDENTITY, CONTEXT_PERMISSIONS

    config = default_config()
    manager = manager_for(config)
    runtime = AgentRuntime("ipc:///nonexistent/bus", name=f"{CONTEXT_IDENTITY}-{manager.id}")
    runtime.register("context", manager.subscriber())
    topics = {prefix.split(b"\x00")[0].decode() for prefix in runtime._subscriptions}
    assert topics and [t for t in topics if t not in Patterns(CONTEXT_PERMISSIONS.subscribe)] == []
    assert "voice.query" not in Patterns(CONTEXT_PERMISSIONS.publish)
    assert permissions(config)[CONTEXT_IDENTITY] == CONTEXT_PERMISSIONS


def test_top_shows_identities_and_the_brokers_per_identity_counters():
    view = TopView()
    view.observe(
        RuntimeMetrics(
            "broker",
            1,
            10,
            0,
            0,
            5,
            0,
            0,
            4,
            0,
            0,
            identity="broker",
            dropped={"sensor": 3},
            denied={"renderer": 1},
        ),
        0.0,
    )
    view.observe(RuntimeMetrics("router", 1, 11, 0, 2, 2, 0, 0, 0, 0, 0, identity="router"), 0.0)
    rows = view.rows(0.5)
    assert [(row.runtime, row.identity) for row in rows] == [
        ("broker", "broker"),
        ("router", "router"),
    ]
    text = render(rows, color=False)
    assert "broker  pid 10  0.5s ago  identity broker" in text
    assert "  dropped from sensor 3" in text and "  subscriptions denied to renderer 1" in text


def test_credentials_never_show_their_secret_key(tmp_path):
    create_keypair("broker", tmp_path)
    _, secret_file = create_keypair("alice", tmp_path)
    credentials = client_credentials(secret_file, tmp_path / "broker.key")
    assert credentials.secret_key.decode() not in repr(credentials)
