"""``Resourcer``: a recording re-published as the replaying identity's own runtime, so a secure
broker holds it to that identity's permissions (the end-to-end replay is in
``test_security_clients.py``)."""

from __future__ import annotations

import msgspec

from xrmq.actors.edge.capture import Resourcer, refused_by
from xrmq.actors.runtime.security.acl import Permissions
from xrmq.schemas import MessageMetadata

_decode = msgspec.msgpack.Decoder(MessageMetadata).decode


def recorded(key: bytes, message_id: str, seq: int, **fields) -> tuple[bytes, bytes, bytes]:
    metadata = MessageMetadata(message_id, "text-input", "say-1234", 7, seq, 1, **fields)
    return key, msgspec.msgpack.encode(metadata), b"\x80"


def test_a_replay_is_one_new_stream_per_key_of_the_replayers_runtime_with_ids_remapped():
    resource = Resourcer("sensor")
    query = recorded(
        b"voice.query\x00p1\x00",
        "q1",
        5,
        reply_to="_inbox.say-1234",
        correlation_id="q1",
        participant_id="p1",
    )
    follow = recorded(
        b"voice.interrupted\x00p1\x00",
        "i1",
        9,
        correlation_id="q1",
        parent_message_id="q1",
        participant_id="p1",
    )
    again = recorded(b"voice.query\x00p1\x00", "q2", 6, participant_id="p1")
    out = [resource(frames) for frames in (query, follow, again)]
    first, second, third = (_decode(frames[1]) for frames in out)
    assert resource.sender.startswith("sensor-replay-")
    assert {m.sender for m in (first, second, third)} == {resource.sender}
    assert {m.epoch for m in (first, second, third)} == {resource.epoch}
    assert (first.seq, second.seq, third.seq) == (1, 1, 2)  # per key, from 1
    assert first.message_id not in ("q1", "q2") and first.reply_to == f"_inbox.{resource.sender}"
    assert first.correlation_id == first.message_id  # a new turn, consistently referenced
    assert second.correlation_id == second.parent_message_id == first.message_id
    assert (first.source, first.participant_id) == ("text-input", "p1")
    assert [frames[0] for frames in out] == [query[0], follow[0], again[0]]
    assert [frames[2] for frames in out] == [b"\x80"] * 3  # payloads untouched


def test_what_the_identity_may_not_publish_is_named_before_anything_is_sent():
    resource = Resourcer("alice")
    messages = [
        resource(recorded(b"notes\x00p1\x00", "n1", 1)),
        resource(recorded(b"voice.query\x00p1\x00", "q1", 1)),
    ]
    allowed = Permissions(publish=["voice.query"], sources=["text-input"])
    assert refused_by(allowed, "alice", messages) == {
        ("notes", "text-input"): "may not publish on 'notes'"
    }
    assert refused_by(Permissions(publish=["*"], sources=["*"]), "alice", messages) == {}


def test_what_a_bound_identity_may_not_replay_as_another_participant_is_named():
    resource = Resourcer("alice")
    messages = [
        resource(recorded(b"voice.query\x00carol\x00", "q1", 1, participant_id="carol")),
        resource(recorded(b"voice.query\x00alice\x00", "q2", 1, participant_id="alice")),
    ]
    bound = Permissions(publish=["voice.query"], sources=["text-input"], participants=["alice"])
    assert refused_by(bound, "alice", messages) == {
        ("voice.query", "text-input"): "may not speak as participant 'carol'"
    }
