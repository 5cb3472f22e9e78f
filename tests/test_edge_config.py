"""The edge-box config: typed decoding, and one clear error naming file, key and rule."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from xrmq.actors.context import context_config
from xrmq.actors.edge.config import ConfigError
from xrmq.actors.edge.config_loader import decode_config, default_config, load_config
from xrmq.actors.models import parse_model_spec

EXAMPLE = Path(__file__).parent.parent / "examples" / "edge-box.toml"


def load(tmp_path: Path, text: str):
    path = tmp_path / "edge.toml"
    path.write_text(text)
    return load_config(path)


def error_of(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, text)
    return str(caught.value).replace(str(tmp_path) + "/", "")


def test_the_reference_config_is_the_built_in_default():
    loaded = load_config(EXAMPLE)
    assert loaded.source == str(EXAMPLE)
    assert msgspec.structs.replace(loaded, source=default_config().source) == default_config()


def test_a_config_decodes_into_typed_sections(tmp_path):
    config = load(
        tmp_path,
        """
[bus]
address = "tcp://127.0.0.1:7100"
capture = false
[models]
answers = { preset = "local", api_base = "http://box:8000/v1" }
[context]
dialogue_budget_bytes = 6000
[context.topics.scene]
mode = "summary"
budget_bytes = 3000
[context.topics.notes]
mode = "incremental"
[context.prompts]
dialogue = "Keep every number."
[destinations.helper]
description = "Answers everything."
model = "hosted"
[router]
default = "helper"
[processes.context]
roles = ["context"]
replicas = 3
[processes.agents]
roles = ["router", "conversation"]
after = ["context"]
[processes.agents.restart]
max_crashes = 2
""",
    )
    assert config.bus.capture is False
    assert config.models.answers == parse_model_spec(
        {"preset": "local", "api_base": "http://box:8000/v1"}
    )
    assert config.models.compaction == parse_model_spec("offline")
    assert config.destinations["helper"].model == parse_model_spec("hosted")
    kwargs = config.context.manager_kwargs()
    assert kwargs["summary_context_topics"] == ["scene"] and kwargs[
        "incremental_context_topics"
    ] == ["notes"]
    assert kwargs["topic_budget_bytes"] == {"scene": 3000, "notes": 4000}
    assert kwargs["compaction_prompts"].dialogue == "Keep every number."
    context_config(**kwargs)  # what a ContextManager is built with passes its own validation
    assert [i.runtime_name for i in config.instances("context")] == [
        "context.0",
        "context.1",
        "context.2",
    ]
    assert [i.runtime_name for i in config.instances("agents")] == ["agents"]
    assert config.restart_policy("agents").max_crashes == 2
    assert config.restart_policy("context") == config.supervisor.restart


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # a misspelled key, with a suggestion
        (
            '[processes.conversation]\nroles = ["conversation"]\nreplica = 2',
            "edge.toml: processes.conversation.replica: unknown key; did you mean 'replicas'?",
        ),
        ("[supervisr]\n", "edge.toml: supervisr: unknown key; did you mean 'supervisor'?"),
        (
            '[models]\nanswers = { model = "x", timout_s = 3 }',
            "edge.toml: models.answers.timout_s: unknown key; did you mean 'timeout_s'?",
        ),
        # a wrong type
        (
            '[processes.conversation]\nroles = "conversation"',
            "edge.toml: processes.conversation.roles: must be an array, got a string",
        ),
        (
            '[context]\ndialogue_budget_bytes = "big"',
            "edge.toml: context.dialogue_budget_bytes: must be an integer, got a string",
        ),
        # an unknown topic mode
        (
            '[context.topics.notes]\nmode = "append"',
            "edge.toml: context.topics.notes.mode: must be 'summary' or 'incremental', got "
            "'append'",
        ),
        # range rules
        (
            '[processes.conversation]\nroles = ["conversation"]\nreplicas = 0',
            "edge.toml: processes.conversation.replicas: must be >= 1",
        ),
        (
            "[processes.conversation]\nroles = []",
            "edge.toml: processes.conversation.roles: must name at least one role",
        ),
        ("[processes.conversation]\n", "edge.toml: processes.conversation.roles: is required"),
        (
            '[models]\ncompaction = "gpt"',
            "edge.toml: models.compaction: must be one of hosted, local, offline, not 'gpt'",
        ),
        (
            '[models]\nanswers = { model = "x", timeout_s = 0 }',
            "edge.toml: models.answers.timeout_s: must be positive",
        ),
        (
            '[router]\ndefault = "nobody"',
            "edge.toml: router.default: must name a destination (conversation), got 'nobody'",
        ),
        (
            '[bus]\naddress = "inproc://x"',
            "edge.toml: bus.address: must be a name, ipc:// or tcp://: the processes of an edge "
            "box are separate OS processes",
        ),
        (
            '[processes.a]\nroles = ["x"]\nafter = ["b"]\n[processes.b]\nroles = ["y"]\nafter = '
            '["a"]',
            "edge.toml: processes.a.after: dependency cycle: a -> b -> a",
        ),
        (
            '[processes.a]\nroles = ["x"]\nafter = ["c"]',
            "edge.toml: processes.a.after[0]: must name a process, got 'c'",
        ),
        (
            "[supervisor.restart]\nbackoff_initial_s = 0",
            "edge.toml: supervisor.restart.backoff_initial_s: must be > 0",
        ),
        (
            "[context.prompts]\ndialogue = ' '",
            "edge.toml: context.prompts.dialogue: must be non-empty text",
        ),
        (
            '[processes.a]\nroles = ["x"]\nnice = 20',
            "edge.toml: processes.a.nice: must be in [0, 19] (a process may lower its priority, "
            "not raise it)",
        ),
        # liveness, stuck actors, dead destinations, give-up policy
        (
            "[supervisor]\nliveness_timeout_s = 1.5",
            "edge.toml: supervisor.liveness_timeout_s: must be >= 2 x supervisor.metrics_interval_s"
            " (two missed heartbeats), got 1.5",
        ),
        ("[supervisor]\nstuck_after_s = 0", "edge.toml: supervisor.stuck_after_s: must be > 0"),
        (
            "[router]\ndestination_dead_after_s = 1",
            "edge.toml: router.destination_dead_after_s: must be > supervisor.metrics_interval_s"
            " (the heartbeat, 1s)",
        ),
        (
            '[processes.a]\nroles = ["x"]\non_give_up = "retry"',
            "edge.toml: processes.a.on_give_up: must be 'stay_down' or 'stop_box', got 'retry'",
        ),
    ],
)
def test_each_broken_rule_names_file_key_and_rule(tmp_path, text, message):
    # The default destination is kept so that only the rule under test is broken.
    base = "" if "[destinations" in text else '[destinations.conversation]\ndescription = "d"\n'
    assert error_of(tmp_path, base + text) == message


def test_budget_rules_are_the_context_managers_own(tmp_path):
    with pytest.raises(ValueError) as manager_error:
        context_config(dialogue_budget_bytes=40_000)
    rule = str(manager_error.value).partition(": ")[2]
    assert error_of(tmp_path, "[context]\ndialogue_budget_bytes = 40000") == (
        f"edge.toml: context.compaction_input_budget_bytes: {rule}"
    )
    assert error_of(tmp_path, '[context.topics.notes]\nmode = "incremental"\nbudget_bytes = 0') == (
        "edge.toml: context.topics.notes.budget_bytes: must be a positive int of bytes, got 0"
    )
    assert error_of(
        tmp_path, '[context]\ntopic_budget_bytes = -1\n[context.topics.notes]\nmode = "incremental"'
    ) == ("edge.toml: context.topic_budget_bytes: must be a positive int of bytes, got -1")


def test_invalid_toml_and_missing_files_name_the_file(tmp_path):
    assert error_of(tmp_path, "[bus\n").startswith("edge.toml: invalid TOML:")
    with pytest.raises(ConfigError, match=r"nowhere\.toml: cannot read"):
        load_config(tmp_path / "nowhere.toml")


def test_startup_layers_follow_after_and_keep_config_order():
    config = decode_config(
        {
            "processes": {
                "router": {"roles": ["r"], "after": ["conversation"]},
                "context": {"roles": ["c"]},
                "conversation": {"roles": ["v"], "after": ["context"]},
                "renderer": {"roles": ["x"]},
            }
        }
    )
    assert config.startup_layers() == [["context", "renderer"], ["conversation"], ["router"]]


def test_up_refuses_a_broken_config_with_one_message_and_a_nonzero_exit(tmp_path):
    path = tmp_path / "edge.toml"
    path.write_text('[processes.conversation]\nroles = ["conversation"]\nreplicas = 0\n')
    result = subprocess.run(
        [sys.executable, "-m", "xrmq.actors.cli", "up", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert (
        result.stderr.strip() == f"xrmq up: {path}: processes.conversation.replicas: must be >= 1"
    )
    assert result.stdout == ""


def test_up_check_resolves_roles_and_names_an_unknown_one(tmp_path):
    path = tmp_path / "edge.toml"
    path.write_text('[processes.agents]\nroles = ["edge_roles:echo", "no-such-role"]\n')
    env = {**__import__("os").environ, "PYTHONPATH": str(Path(__file__).parent / "procs")}
    result = subprocess.run(
        [sys.executable, "-m", "xrmq.actors.cli", "up", "--check", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )
    assert result.returncode == 2
    assert result.stderr.startswith(
        f"xrmq up: {path}: processes.agents.roles[1]: unknown role 'no-such-role'"
    )
