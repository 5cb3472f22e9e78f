"""Typed topics: one schema per name, exact-match keys, reused codecs."""

from __future__ import annotations

import pytest

from xrmq.schemas import ConversationContextUpdate, UserQuery
from xrmq.topics import VOICE_OUTPUT_TOPIC, Topic, context_topic, split_key


def test_a_second_topic_with_the_same_name_and_another_type_is_rejected():
    context_topic("sample.notes")
    assert context_topic("sample.notes") == Topic("sample.notes", ConversationContextUpdate)
    with pytest.raises(
        ValueError,
        match=r"Topic.name: 'sample.notes' is already bound to ConversationContextUpdate",
    ):
        Topic("sample.notes", UserQuery)


def test_voice_output_topic_name():
    assert VOICE_OUTPUT_TOPIC.name == "voice.output"


def test_keys_match_exactly_one_topic_and_can_filter_one_participant():
    notes, notes2 = context_topic("notes"), context_topic("notes2")
    assert not notes2.key("p1").startswith(notes.subscription())
    assert notes.key("p1").startswith(notes.subscription())
    assert notes.key("p1").startswith(notes.subscription("p1"))
    assert not notes.key("p12").startswith(notes.subscription("p1"))
    assert not notes.key(None).startswith(notes.subscription("p1"))
    assert split_key(notes.key("p1")) == ("notes", "p1", b"")
    assert split_key(notes.key(None)) == ("notes", None, b"")


@pytest.mark.parametrize("name, rule", [("", "non-empty"), ("a\x00b", "NUL")])
def test_topic_names_are_validated(name, rule):
    with pytest.raises(ValueError, match=rf"Topic.name: .*{rule}"):
        Topic(name, UserQuery)


def test_encode_refuses_another_type_and_decode_validates():
    topic = context_topic("notes")
    payload = topic.encode(ConversationContextUpdate("hello"))
    assert topic.decode(payload) == ConversationContextUpdate("hello")
    with pytest.raises(TypeError, match="carries ConversationContextUpdate"):
        topic.encode(UserQuery("hi", 1))
