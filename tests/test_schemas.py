"""Wire schemas: every rule raises ValueError naming the field and the rule, on
construction and on decode."""

from __future__ import annotations

import msgspec
import pytest

from xrmq.schemas import (
    Admission,
    AgentTurn,
    CompactionPrompts,
    ContextBlock,
    ConversationContextUpdate,
    MessageMetadata,
    ResponseOutput,
    RoutingAid,
    UserQuery,
)


def test_response_output_reply_requires_request_id():
    with pytest.raises(ValueError, match=r"ResponseOutput.request_id: is required for replies"):
        ResponseOutput(kind="reply", text="hi")


@pytest.mark.parametrize("kind", ["update", "withdraw"])
def test_response_output_request_id_is_forbidden_for_updates_and_withdraws(kind):
    with pytest.raises(ValueError, match=rf"ResponseOutput.request_id: is forbidden for {kind}s"):
        ResponseOutput(kind=kind, request_id="t1")


def test_only_updates_can_be_urgent():
    assert ResponseOutput(kind="update", text="timer", urgent=True).urgent
    with pytest.raises(ValueError, match=r"ResponseOutput.urgent: only updates can be urgent"):
        ResponseOutput(kind="reply", request_id="t1", text="x", urgent=True)


def test_withdraw_carries_no_content():
    with pytest.raises(ValueError, match=r"ResponseOutput.text: a withdraw carries no text"):
        ResponseOutput(kind="withdraw", text="stale")


def test_only_replies_are_streamed():
    with pytest.raises(ValueError, match=r"ResponseOutput.response_id: only replies are streamed"):
        ResponseOutput(kind="update", text="x", response_id="r1")


def test_unknown_kind_is_rejected_on_decode():
    with pytest.raises(msgspec.ValidationError, match=r"kind"):
        msgspec.msgpack.decode(msgspec.msgpack.encode({"kind": "shout"}), type=ResponseOutput)


def test_validate_boundary_requires_identity_for_streamed_replies():
    fragment = ResponseOutput(kind="reply", request_id="t1", text="Hel", final=False)
    with pytest.raises(
        ValueError, match=r"ResponseOutput.response_id: is required for non-final fragments"
    ):
        fragment.validate_boundary()
    streamed = ResponseOutput(
        kind="reply", request_id="t1", text="Hel", final=False, response_id="r1"
    )
    assert streamed.validate_boundary() is streamed


def test_validate_boundary_requires_text_for_finite_output():
    with pytest.raises(
        ValueError, match=r"ResponseOutput.text: is required for output without response_id"
    ):
        ResponseOutput(kind="reply", request_id="t1", text="  ").validate_boundary()
    terminator = ResponseOutput(kind="reply", request_id="t1", response_id="r1")
    assert terminator.validate_boundary() is terminator
    assert ResponseOutput(kind="withdraw").validate_boundary().kind == "withdraw"


def test_context_update_text_must_be_non_empty_also_when_decoded():
    with pytest.raises(ValueError, match=r"ConversationContextUpdate.text: must be non-empty text"):
        ConversationContextUpdate("   ")
    with pytest.raises(msgspec.ValidationError, match=r"ConversationContextUpdate.text"):
        msgspec.msgpack.decode(msgspec.msgpack.encode({"text": ""}), type=ConversationContextUpdate)


def test_user_query_needs_text():
    with pytest.raises(ValueError, match=r"UserQuery.text: must be non-empty text"):
        UserQuery("", 1)


def test_agent_turn_is_positional_like_the_seed():
    turn = AgentTurn("participant-1", "turn-1", "When is the calibration meeting?")
    assert (turn.participant_id, turn.turn_id, turn.history) == ("participant-1", "turn-1", ())
    with pytest.raises(ValueError, match=r"AgentTurn.turn_id: must be a non-empty string"):
        AgentTurn("p", "", "text")


def test_admission_rules():
    with pytest.raises(ValueError, match=r"Admission.text: must be non-empty text"):
        Admission("clarify")
    with pytest.raises(ValueError, match=r"Admission.focus: only an accept can take focus"):
        Admission("decline", focus=True)
    assert Admission("accept", focus=True).focus


def test_routing_aid_needs_a_description():
    with pytest.raises(ValueError, match=r"RoutingAid.description"):
        RoutingAid("")


def test_compaction_prompts_defaults_carry_the_design_rules():
    prompts = CompactionPrompts()
    for text in (prompts.source, prompts.dialogue):
        assert "verbatim" in text and "most recent" in text and "uncertain" in text
    assert prompts.condense == (
        "Shorten this summary. Keep facts, preferences, corrections, unresolved requests, and "
        "uncertainty."
    )
    assert prompts.dialogue.startswith(
        "Summarize the completed conversation history for future turns."
    )
    assert prompts.source.startswith("Summarize only the source-owned background context below.")
    with pytest.raises(ValueError, match=r"CompactionPrompts.condense"):
        CompactionPrompts(condense=" ")


def test_messages_are_frozen_so_subscribers_can_share_one_decoded_copy():
    block = ContextBlock(None, "summary")
    with pytest.raises(AttributeError):
        block.text = "changed"


def test_metadata_round_trips_and_its_decoder_checks_sequence_epoch_and_id():
    metadata = MessageMetadata(
        message_id="m1", source="a", sender="rt", epoch=1, seq=1, timestamp_us=5
    )
    assert (
        msgspec.msgpack.decode(msgspec.msgpack.encode(metadata), type=MessageMetadata) == metadata
    )
    fields = {
        "message_id": "m1",
        "source": "a",
        "sender": "rt",
        "epoch": 1,
        "seq": 1,
        "timestamp_us": 5,
    }
    for field, value, rule in [
        ("seq", 0, ">= 1"),
        ("epoch", -1, ">= 0"),
        ("message_id", "", "length >= 1"),
    ]:
        with pytest.raises(msgspec.ValidationError, match=rf"{rule} - at `\$.{field}`"):
            msgspec.msgpack.decode(
                msgspec.msgpack.encode({**fields, field: value}), type=MessageMetadata
            )


@pytest.mark.parametrize(
    "fields, rule",
    [
        ({"kind": "reply", "request_id": ""}, "request_id: must be a non-empty string"),
        ({"kind": "reply", "request_id": "a\x00b"}, "request_id: must not contain NUL"),
        (
            {"kind": "reply", "request_id": "t", "response_id": ""},
            "response_id: must be a non-empty string",
        ),
        ({"kind": "update", "text": "x", "timestamp_us": -1}, "timestamp_us: must be >= 0"),
        ({"kind": "withdraw", "urgent": True}, "urgent: only updates can be urgent"),
        ({"kind": "update", "text": "x", "final": False}, "final: only replies are streamed"),
    ],
)
def test_response_output_rules_name_the_field_on_construction_and_decode(fields, rule):
    with pytest.raises(ValueError, match=rule):
        ResponseOutput(**fields)
    with pytest.raises(msgspec.ValidationError, match=rule):
        msgspec.msgpack.decode(msgspec.msgpack.encode(fields), type=ResponseOutput)


def test_the_stamps_of_a_turn_s_parts_are_optional_and_left_off_the_wire_when_absent():
    from xrmq.schemas import PlaybackStages, UserQuery

    old_query = msgspec.msgpack.encode({"text": "hi", "timestamp_us": 1, "speech_end_us": 2})
    query = msgspec.msgpack.decode(old_query, type=UserQuery)
    assert (query.endpoint_us, query.recognition_start_us, query.recognition_end_us) == (
        None,
        None,
        None,
    )
    assert msgspec.msgpack.encode(query) == old_query
    stamped = UserQuery("hi", 1, endpoint_us=3, recognition_start_us=4, recognition_end_us=5)
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(stamped), type=UserQuery) == stamped
    old_stages = msgspec.msgpack.encode({"turn_id": "t", "first_frame_us": 7})
    stages = msgspec.msgpack.decode(old_stages, type=PlaybackStages)
    assert (stages.first_text_us, stages.synthesis_start_us, stages.synthesis_end_us) == (
        None,
        None,
        None,
    )
    assert msgspec.msgpack.encode(stages) == old_stages
    with pytest.raises(ValueError, match="recognition_end_us"):
        UserQuery("hi", 1, recognition_end_us=-1)
