"""The secure broker admits a key added to its keys directory, and refuses a removed one, without
a restart (``identities.KeyRescan``, ``[bus.security] rescan_s``)."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable

import pytest

from xrmq.actors.edge.config_loader import default_config, load_config
from xrmq.actors.edge.identities import KeyRescan, broker_security
from xrmq.actors.runtime.address import parse_bus
from xrmq.actors.runtime.broker import Broker

from secure_bus import CurveClient, SecureBus, free_tcp_bus, make_keys

pytestmark = pytest.mark.timeout(60)

CONFIG = """
[bus]
address = "{bus}"

[bus.security]
mode = "curve"
keys = "keys"

[bus.identities.alice]
publish = ["notes"]
sources = ["*"]
subscribe = ["notes"]
"""
BOB = """
[bus.identities.bob]
publish = ["notes"]
sources = ["*"]
"""


class Watched:
    """A re-scan that tells the test which identities the broker admits once it applied them
    (the forwarder applies a re-scan's result before it calls again)."""

    def __init__(self, rescan: Callable[[], dict | None]) -> None:
        self._rescan = rescan
        self._found: dict | None = None
        self.admitted: set[str] = set()
        self.granted: dict = {}
        self._changed = threading.Condition()

    def __call__(self) -> dict | None:
        if self._found is not None:
            with self._changed:
                self.admitted = set(self._found)
                self.granted = dict(self._found)
                self._changed.notify_all()
        self._found = self._rescan()
        return self._found

    def wait_until(self, predicate: Callable[[set[str]], bool], timeout: float = 20) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: predicate(self.admitted), timeout), self.admitted

    def wait_granted(self, predicate: Callable[[dict], bool], timeout: float = 20) -> None:
        """Until the broker applied a re-scan whose identities (name -> (key, permissions))
        satisfy ``predicate``."""
        with self._changed:
            assert self._changed.wait_for(lambda: predicate(self.granted), timeout)


def test_a_key_added_is_admitted_and_a_key_removed_refused_without_a_restart(tmp_path):
    bus = free_tcp_bus()
    # the config names no processes, so it runs the default box's: their keys too
    box = list(default_config().processes)
    keys = make_keys(tmp_path / "keys", "broker", "alice", "xrmq-up", *box)
    config_file = tmp_path / "edge.toml"
    config_file.write_text(CONFIG.format(bus=bus))
    config = load_config(config_file)
    outside = make_keys(tmp_path / "bob-home", "bob")  # bob's pair, not yet known to the broker
    shutil.copy(keys / "broker.key", outside / "broker.key")
    watched = Watched(KeyRescan(config))
    broker = Broker(
        parse_bus(bus), security=broker_security(config), rescan=watched, rescan_interval=0.02
    ).start()
    secure = SecureBus(bus, keys, broker)
    as_bob = SecureBus(bus, outside, broker)
    clients: list[CurveClient] = []
    try:
        alice = CurveClient(secure, "alice")
        clients.append(alice)
        alice.wait_ready()
        alice.subscribe(b"notes\x00")
        alice.wait_ready()  # its notes subscription is applied too
        unknown = CurveClient(as_bob, "bob")
        clients.append(unknown)
        assert unknown.handshakes_failed()

        with config_file.open("a") as file:  # the table first, then the key: admitted once both
            file.write(BOB)
        shutil.copy(outside / "bob.key", keys / "bob.key")
        watched.wait_until(lambda admitted: "bob" in admitted)
        bob = CurveClient(as_bob, "bob")
        clients.append(bob)
        bob.wait_ready()  # authenticated by the broker that was running all along
        bob.send("notes", "p1", {"text": "bob is in"})
        arrived = alice.wait_for("notes")
        assert arrived[-1][2] == b"\x81\xa4text\xa9bob is in"

        (keys / "bob.key").unlink()
        watched.wait_until(lambda admitted: "bob" not in admitted)
        again = CurveClient(as_bob, "bob")
        clients.append(again)
        assert again.handshakes_failed()  # a new connection with the removed key is refused
    finally:
        for client in clients:
            client.close()
        broker.stop()


def test_participants_added_to_a_table_bind_what_the_key_publishes_without_a_restart(tmp_path):
    bus = free_tcp_bus()
    keys = make_keys(tmp_path / "keys", "broker", "alice", "xrmq-up")
    config_file = tmp_path / "edge.toml"
    config_file.write_text(CONFIG.format(bus=bus))
    config = load_config(config_file)
    watched = Watched(KeyRescan(config))
    broker = Broker(
        parse_bus(bus), security=broker_security(config), rescan=watched, rescan_interval=0.02
    ).start()
    alice = CurveClient(SecureBus(bus, keys, broker), "alice")
    try:
        alice.subscribe(b"notes\x00")
        alice.wait_ready()
        with config_file.open("a") as file:  # the alice table is the file's last
            file.write('participants = ["alice"]\n')
        watched.wait_granted(
            lambda granted: "alice" in granted and granted["alice"][1].participants == ["alice"]
        )
        alice.send("notes", "p1", {"text": "as p1"})
        alice.send("notes", "alice", {"text": "as alice"})
        arrived = alice.wait_for("notes")  # one connection, in order: p1's was decided first
        notes = [frames[0] for frames in arrived if frames[0].endswith(b"\x00")]  # no probes
        assert notes == [b"notes\x00alice\x00"]
        assert broker.forwarder.dropped == {"alice": 1}
    finally:
        alice.close()
        broker.stop()
