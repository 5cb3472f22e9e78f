"""The edge box's context journal: ``[context] persist``, ``state_dir`` and ``on_corrupt``
(issue 15), decoded and validated, and a context process (``xrmq run context``) facing
a corrupt journal: one clear error naming the file, or moved aside and started empty."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from xrmq.actors.edge.config import ConfigError
from xrmq.actors.edge.config_loader import decode_config, default_config
from xrmq.actors.edge.configfile import write_config
from xrmq.actors.edge.stack import (
    context_store_path,
    open_context_store,
    open_orphan_stores,
    state_dir,
)

from buses import broker_process

pytestmark = pytest.mark.timeout(60)


def config_with(**context):
    return decode_config(
        {
            "context": {"topics": {"notes": {"mode": "incremental"}}, **context},
            "bus": {"address": "ipc:///tmp/some/bus"},
        }
    )


def test_the_journal_keys_default_to_a_per_bus_directory_under_the_state_home(
    monkeypatch, tmp_path
):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    config = config_with()
    assert config.context.persist is True and config.context.on_corrupt == "error"
    assert state_dir(config) == tmp_path / "xrmq" / "ipc_tmp_some_bus"
    assert (
        context_store_path(config, 1)
        == tmp_path / "xrmq" / "ipc_tmp_some_bus" / "context-1.sqlite3"
    )
    monkeypatch.delenv("XDG_STATE_HOME")
    assert state_dir(config) == Path.home() / ".local" / "state" / "xrmq" / "ipc_tmp_some_bus"
    assert state_dir(config_with(state_dir=str(tmp_path / "j"))) == tmp_path / "j"
    assert open_context_store(config_with(persist=False), 0) is None


def test_shard_0_opens_the_journals_of_shards_beyond_the_count_for_migration(tmp_path):
    config = config_with(state_dir=str(tmp_path))
    for shard in (0, 1, 2, 3):
        open_context_store(config, shard).close()
    (tmp_path / "context-x.sqlite3").write_bytes(b"")  # not a shard's journal: left alone
    orphans = open_orphan_stores(config, 2)
    try:
        assert [store.path for store in orphans] == [
            context_store_path(config, 2),
            context_store_path(config, 3),
        ]
    finally:
        for store in orphans:
            store.close()
    assert open_orphan_stores(config, 4) == []
    assert open_orphan_stores(config_with(state_dir=str(tmp_path), persist=False), 1) == []


@pytest.mark.parametrize(
    ("context", "key", "rule"),
    [
        (
            {"on_corrupt": "ignore"},
            "context.on_corrupt",
            "must be 'error' or 'backup_and_start_empty', got 'ignore'",
        ),
        ({"state_dir": " "}, "context.state_dir", "must be a non-empty path"),
        ({"persist": "yes"}, "context.persist", "must be a boolean, got a string"),
    ],
)
def test_bad_journal_keys_name_the_key_and_the_rule(context, key, rule):
    with pytest.raises(ConfigError) as error:
        config_with(**context)
    assert (error.value.key, error.value.rule) == (key, rule)


def run_context(config_path: Path, bus: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "xrmq.actors.cli", "run", "context", "--config", str(config_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "XRMQ_LOG_LEVEL": "ERROR"},
    )


def test_a_context_process_with_a_corrupt_journal_names_the_file_or_moves_it_aside(tmp_path):
    with broker_process() as bus:
        import msgspec

        base = default_config()
        for on_corrupt in ("error", "backup_and_start_empty"):
            context = msgspec.structs.replace(
                base.context, state_dir=str(tmp_path / "state"), on_corrupt=on_corrupt
            )
            config = write_config(
                msgspec.structs.replace(
                    base, context=context, bus=msgspec.structs.replace(base.bus, address=bus)
                ),
                tmp_path / f"{on_corrupt}.toml",
            )
            journal = context_store_path(config, 0)
            journal.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # a private state dir
            journal.write_bytes(b"SQLite format 3\x00" + b"\xff" * 3000)  # a header, then garbage
            proc = run_context(tmp_path / f"{on_corrupt}.toml", bus)
            if on_corrupt == "error":
                _out, err = proc.communicate(timeout=30)
                assert proc.returncode == 2
                assert (
                    f"context journal {journal}: " in err
                    and 'on_corrupt = "backup_and_start_empty"' in err
                )
                assert journal.read_bytes().endswith(b"\xff" * 3000)  # left as it was
            else:
                try:
                    assert proc.stdout.readline().startswith("xrmq run: ready context")
                    backups = sorted(journal.parent.glob("context-0.sqlite3.corrupt-*"))
                    assert len(backups) == 1 and backups[0].read_bytes().endswith(b"\xff" * 3000)
                finally:
                    proc.terminate()
                    _, err = proc.communicate(timeout=30)
                assert "context.journal_corrupt" in err and str(backups[0]) in err
