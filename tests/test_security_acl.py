"""The broker's per-identity decisions (``AccessPolicy``), table by table: pure, no sockets."""

from __future__ import annotations

import msgspec
import pytest

from xrmq.actors.runtime.security.acl import AccessPolicy, Patterns, Permissions
from xrmq.schemas import MessageMetadata

POLICY_IDENTITIES = {
    "sensor": Permissions(publish=["notes"], sources=["kettle", "camera"]),
    "sensor-2": Permissions(publish=["scene"], sources=["*"]),
    "renderer": Permissions(subscribe=["voice.output", "voice.query"]),
    "router": Permissions(
        publish=["voice.output", "route.*"],
        sources=["router", "conversation-*"],
        subscribe=["voice.query"],
    ),
    "conversation": Permissions(
        publish=["voice.output"], sources=["conversation"], subscribe=["route.conversation.*"]
    ),
    "ops": Permissions(subscribe=["xrmq.metrics"], capture=True),
}


def policy() -> AccessPolicy:
    return AccessPolicy(POLICY_IDENTITIES)


def metadata(sender: str, source: str = "kettle", **extra) -> bytes:
    return msgspec.msgpack.encode(
        MessageMetadata(extra.pop("message_id", "m1"), source, sender, 1, 1, 0, **extra)
    )


def key(topic: str, participant: str = "p1", suffix: str = "") -> bytes:
    return f"{topic}\x00{participant}\x00{suffix}".encode()


@pytest.mark.parametrize(
    "runtime, owner",
    [
        ("sensor", "sensor"),
        ("sensor-ab12", "sensor"),
        ("sensor.1", "sensor"),
        ("sensor-2", "sensor-2"),  # the longest identity name that prefixes it wins
        ("sensor-2-ab12", "sensor-2"),
        ("sensorx", None),  # a prefix only counts before '-' or '.'
        ("rt-1234", None),
        ("router.0", "router"),
    ],
)
def test_a_runtime_name_belongs_to_the_identity_it_starts_with(runtime, owner):
    assert policy().owner(runtime) == owner


@pytest.mark.parametrize(
    "identity, topic, participant, meta, allowed",
    [
        ("sensor", "notes", "p1", metadata("sensor-1"), True),
        ("sensor", "voice.query", "p1", metadata("sensor-1"), False),
        ("sensor", "participant.left", "p1", metadata("sensor-1"), False),
        ("sensor", "voice.output", "p1", metadata("sensor-1", "conversation"), False),
        ("sensor", "notes", "p1", metadata("sensor-1", "router"), False),  # a source it may not use
        ("sensor", "notes", "p1", metadata("router"), False),  # speaking as the router
        ("sensor", "notes", "p1", metadata("sensor-2-x"), False),  # as another identity's runtime
        ("sensor-2", "scene", "p1", metadata("sensor-2-x", "anything"), True),
        ("router", "voice.output", "p1", metadata("router", "router"), True),
        ("router", "voice.output", "p1", metadata("router", "conversation"), False),
        (
            "router",
            "route.conversation.answer",
            "p1",
            metadata("router", "conversation-proxy"),
            True,
        ),
        ("renderer", "voice.output", "p1", metadata("renderer"), False),  # it publishes nothing
        (
            "renderer",
            "xrmq.metrics",
            "",
            metadata("renderer", "runtime"),
            True,
        ),  # but its heartbeat
        (
            "renderer",
            "xrmq.metrics",
            "",
            metadata("router", "runtime"),
            False,
        ),  # under its own name
        ("nobody", "notes", "p1", metadata("nobody"), False),
        ("sensor", "notes", "p1", b"\xc1 not msgpack", False),
    ],
)
def test_a_message_passes_only_on_a_topic_source_and_sender_the_identity_may_use(
    identity, topic, participant, meta, allowed
):
    reason = policy().check_message(identity, key(topic, participant), meta, False)
    assert (reason is None) == allowed, reason


@pytest.mark.parametrize(
    "reply_to, allowed",
    [
        ("_inbox.router", True),
        ("_inbox.router-5", False),  # another runtime of the same identity is not the sender
        ("_inbox.conversation", False),
        ("participant.left", False),
    ],
)
def test_reply_to_must_be_the_senders_own_inbox(reply_to, allowed):
    reason = policy().check_message(
        "router",
        key("route.conversation.answer"),
        metadata("router", "conversation-proxy", reply_to=reply_to),
        False,
    )
    assert (reason is None) == allowed, reason


def test_a_reply_must_answer_a_forwarded_ask_from_an_identity_that_could_receive_it():
    acl = policy()
    ask = metadata("router", "conversation-proxy", message_id="ask-1", reply_to="_inbox.router")
    assert acl.check_message("router", key("route.conversation.answer"), ask, False) is None
    reply = metadata("conversation", "conversation-proxy", correlation_id="ask-1")
    assert acl.check_message("conversation", key("_inbox.router"), reply, False) is None
    forged = metadata("sensor-9", "conversation-proxy", correlation_id="ask-1")
    assert "may not receive" in acl.check_message("sensor", key("_inbox.router"), forged, False)
    unasked = metadata("conversation", "conversation-proxy", correlation_id="never-asked")
    assert "no ask" in acl.check_message("conversation", key("_inbox.router"), unasked, False)


def test_remembered_asks_are_bounded():
    acl = AccessPolicy(POLICY_IDENTITIES, pending_asks=2)
    for n in range(3):
        ask = metadata("router", "router", message_id=f"ask-{n}", reply_to="_inbox.router")
        assert acl.check_message("router", key("voice.output"), ask, False) is None
    reply = metadata("renderer", "router", correlation_id="ask-0")
    assert "no ask" in acl.check_message("renderer", key("_inbox.router"), reply, False)


@pytest.mark.parametrize(
    "identity, prefix, allowed",
    [
        ("renderer", b"voice.output\x00", True),
        ("renderer", b"voice.output\x00p1\x00", True),
        ("renderer", b"notes\x00", False),
        ("renderer", b"", False),  # everything
        ("renderer", b"voice", False),  # a prefix spanning topics
        ("renderer", b"_inbox.renderer-1\x00", True),
        ("renderer", b"_inbox.router\x00", False),  # another identity's inbox
        ("renderer", b"_probe.renderer-1\x00", True),
        ("renderer", b"_probe.router\x00", False),
        ("renderer", b"xrmq.capture\x00", False),
        ("ops", b"xrmq.capture\x00", True),
        ("ops", b"xrmq.metrics\x00", True),
        ("nobody", b"voice.output\x00", False),
    ],
)
def test_a_subscription_applies_only_to_a_whole_topic_the_identity_may_receive(
    identity, prefix, allowed
):
    reason = policy().check_subscription(identity, prefix)
    assert (reason is None) == allowed, reason


@pytest.mark.parametrize(
    "identity, probe_key, meta, payload_empty, allowed",
    [
        ("renderer", key("voice.output", "", "?abc"), b"", True, True),
        ("renderer", key("notes", "", "?abc"), b"", True, False),
        (
            "renderer",
            key("voice.output", "", "?abc"),
            metadata("renderer"),
            True,
            False,
        ),  # smuggles metadata
        ("renderer", key("voice.output", "", "?abc"), b"", False, False),  # or a payload
        ("ops", key("xrmq.capture", "", "?abc"), b"", True, True),
        ("renderer", key("xrmq.capture", "", "?abc"), b"", True, False),
    ],
)
def test_a_probe_goes_only_where_the_identity_may_subscribe(
    identity, probe_key, meta, payload_empty, allowed
):
    reason = policy().check_message(identity, probe_key, meta, payload_empty)
    assert (reason is None) == allowed, reason


@pytest.mark.parametrize(
    "patterns, name, matched",
    [
        (["notes"], "notes", True),
        (["notes"], "notes2", False),
        (["route.*"], "route.conversation.answer", True),
        (["route.*"], "router", False),
        (["*"], "anything", True),
        ([], "notes", False),
    ],
)
def test_patterns_match_names_prefixes_and_everything(patterns, name, matched):
    assert (name in Patterns(patterns)) == matched


@pytest.mark.parametrize("pattern", ["", "a*b", "no\x00nul"])
def test_a_malformed_pattern_is_refused_naming_the_rule(pattern):
    with pytest.raises(ValueError, match="a name, a prefix ending in"):
        Patterns([pattern])


def test_a_remembered_decision_still_records_every_ask_and_checks_every_reply():
    acl = policy()
    for n in range(2):  # the second ask is decided from memory
        ask = metadata(
            "router", "conversation-proxy", message_id=f"ask-{n}", reply_to="_inbox.router"
        )
        assert acl.check_message("router", key("route.conversation.answer"), ask, False) is None
    for n in range(2):
        reply = metadata("conversation", "conversation-proxy", correlation_id=f"ask-{n}")
        assert acl.check_message("conversation", key("_inbox.router"), reply, False) is None
    stray = metadata("conversation", "conversation-proxy", correlation_id="ask-9")
    assert "no ask" in acl.check_message("conversation", key("_inbox.router"), stray, False)
    bad_reply_to = metadata("router", "conversation-proxy", reply_to="participant.left")
    assert "own inbox" in acl.check_message(
        "router", key("route.conversation.answer"), bad_reply_to, False
    )


# -- participants: an identity bound to the participants it may speak and listen as ---------

BOUND = {
    **POLICY_IDENTITIES,
    "alice": Permissions(
        publish=["voice.query"],
        sources=["text-input"],
        subscribe=["voice.output"],
        participants=["alice"],
    ),
    "kiosk": Permissions(
        publish=["voice.query"],
        sources=["*"],
        subscribe=["voice.output"],
        participants=["guest-*", "host"],
    ),
    "lamp": Permissions(subscribe=["voice.output"], participants=[]),
}


def with_participant(sender: str, participant: str | None, **extra) -> bytes:
    return metadata(sender, "text-input", participant_id=participant, **extra)


@pytest.mark.parametrize(
    "identity, participant, allowed",
    [
        ("alice", "alice", True),
        ("alice", "carol", False),
        ("alice", "alice2", False),  # a name is exact
        ("alice", None, True),  # a global message is no participant's
        ("kiosk", "guest-7", True),
        ("kiosk", "host", True),
        ("kiosk", "hostess", False),
        ("kiosk", "carol", False),
        ("renderer", "carol", True),  # no participants key: every participant
    ],
)
def test_a_message_as_a_participant_the_identity_may_not_speak_as_is_dropped(
    identity, participant, allowed
):
    acl = AccessPolicy({**BOUND, "renderer": Permissions(publish=["voice.query"], sources=["*"])})
    meta = with_participant(f"{identity}-1", participant)
    reason = acl.check_message(identity, key("voice.query", participant or ""), meta, False)
    assert (reason is None) == allowed, reason
    if not allowed:
        assert reason == f"may not speak as participant {participant!r}"


def test_a_remembered_decision_does_not_let_another_participant_through():
    acl = AccessPolicy(BOUND)
    ok = with_participant("alice-1", "alice")
    assert acl.check_message("alice", key("voice.query", "alice"), ok, False) is None
    carol = with_participant("alice-1", "carol")  # same identity, topic, sender and source
    assert acl.check_message("alice", key("voice.query", "carol"), carol, False) is not None


def test_the_metadata_participant_is_held_to_the_same_rule_as_the_keys():
    acl = AccessPolicy(BOUND)
    hidden = with_participant("alice-1", "carol")
    reason = acl.check_message("alice", key("voice.query", "alice"), hidden, False)
    assert reason == "may not speak as participant 'carol'"


def test_a_dropped_ask_as_another_participant_is_not_remembered_for_replies():
    acl = AccessPolicy(BOUND)
    ask = with_participant("alice-1", "carol", message_id="ask-c", reply_to="_inbox.alice-1")
    assert acl.check_message("alice", key("voice.query", "carol"), ask, False) is not None
    reply = metadata("router", "router", correlation_id="ask-c")
    assert "no ask" in acl.check_message("router", key("_inbox.alice-1", "carol"), reply, False)


def test_a_probe_as_another_participant_is_dropped():
    acl = AccessPolicy(BOUND)
    assert acl.check_message("alice", key("voice.output", "alice", "?x"), b"", True) is None
    reason = acl.check_message("alice", key("voice.output", "carol", "?x"), b"", True)
    assert reason == "may not speak as participant 'carol'"


@pytest.mark.parametrize(
    "identity, prefix, applied",
    [
        # a whole topic: its global messages and the allowed participants' only
        ("alice", b"voice.output\x00", [b"voice.output\x00\x00", b"voice.output\x00alice\x00"]),
        ("alice", b"voice.output\x00alice\x00", [b"voice.output\x00alice\x00"]),
        ("alice", b"voice.output\x00\x00", [b"voice.output\x00\x00"]),
        ("alice", b"voice.output\x00carol\x00", []),
        ("alice", b"voice.output\x00ali", [b"voice.output\x00alice\x00"]),
        ("alice", b"voice.output\x00c", []),
        (
            "alice",
            b"_inbox.alice-1\x00",
            [b"_inbox.alice-1\x00\x00", b"_inbox.alice-1\x00alice\x00"],
        ),
        (
            "kiosk",
            b"voice.output\x00",
            [b"voice.output\x00\x00", b"voice.output\x00host\x00", b"voice.output\x00guest-"],
        ),
        ("kiosk", b"voice.output\x00guest-", [b"voice.output\x00guest-"]),
        ("kiosk", b"voice.output\x00guest-7", [b"voice.output\x00guest-7"]),
        ("kiosk", b"voice.output\x00gu", [b"voice.output\x00guest-"]),
        ("kiosk", b"voice.output\x00guest-7\x00", [b"voice.output\x00guest-7\x00"]),
        ("kiosk", b"voice.output\x00hostess\x00", []),
        ("lamp", b"voice.output\x00", [b"voice.output\x00\x00"]),  # global messages only
        ("lamp", b"voice.output\x00alice\x00", []),
        ("renderer", b"voice.output\x00", [b"voice.output\x00"]),  # unbound: as asked
        ("renderer", b"voice.output\x00carol\x00", [b"voice.output\x00carol\x00"]),
    ],
)
def test_a_bound_identitys_subscription_is_narrowed_to_its_participants(identity, prefix, applied):
    acl = AccessPolicy(BOUND)
    assert acl.applied_subscriptions(identity, prefix) == applied
    reason = acl.check_subscription(identity, prefix)
    assert (reason is None) == bool(applied), reason
    if not applied:
        assert reason is not None and reason.startswith("may not listen as participant")


def test_a_malformed_participant_pattern_is_refused_naming_the_rule():
    with pytest.raises(ValueError, match="a name, a prefix ending in"):
        AccessPolicy({"alice": Permissions(participants=["guest-*-x"])})


def test_a_bound_identity_never_reads_the_capture_socket():
    acl = AccessPolicy({"alice": Permissions(capture=True, participants=["alice"])})
    assert not acl.may_capture("alice")
    assert acl.check_subscription("alice", b"xrmq.capture\x00") is not None
