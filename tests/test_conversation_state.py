"""``Conversation``: seed 002's method table, one behaviour per test (tools/conversation_state)."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import pytest

from xrmq.actors.tools.conversation_state import Conversation
from xrmq.actors.tools.transcript import Transcript
from xrmq.schemas.tools import ToolCallReply

PNG_1x1 = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def _call(call_id: str, name: str = "lookup", arguments: str = '{"q": "x"}') -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _dialogue() -> Conversation:
    conversation = Conversation()
    conversation.set_system_message_content("be brief")
    conversation.add_user_message("first question")
    conversation.add_agent_message({"role": "assistant", "content": "first answer"})
    conversation.add_user_message("second question")
    conversation.add_agent_message(
        {"role": "assistant", "content": None, "tool_calls": [_call("c1")]}
    )
    conversation.add_tool_result("c1", "found it")
    conversation.add_agent_message({"role": "assistant", "content": "second answer"})
    return conversation


def test_messages_are_openai_typed_dicts_with_the_system_message_first() -> None:
    conversation = _dialogue()
    assert conversation.messages[0] == {"role": "system", "content": "be brief"}
    assert all(type(message) is dict for message in conversation.messages)
    assert [m["role"] for m in conversation.messages] == [
        "system", "user", "assistant", "user", "assistant", "tool", "assistant"
    ]  # fmt: skip


def test_set_system_message_content_replaces_the_system_message_or_inserts_it_at_index_0() -> None:
    conversation = Conversation()
    conversation.add_user_message("hello")
    conversation.set_system_message_content("one")
    assert conversation.messages[0] == {"role": "system", "content": "one"}
    conversation.set_system_message_content("two")
    assert conversation.messages == [
        {"role": "system", "content": "two"},
        {"role": "user", "content": "hello"},
    ]


def test_add_user_message_with_images_makes_text_and_image_url_blocks_with_data_urls(
    tmp_path: Path,
) -> None:
    PIL = pytest.importorskip("PIL.Image", reason="Pillow (pip install 'xrmq[images]')")
    path = tmp_path / "dot.png"
    path.write_bytes(PNG_1x1)
    conversation = Conversation()
    conversation.add_user_message("what is this?", images=[path, PIL.new("RGB", (2, 2), "red")])
    content = conversation.messages[0]["content"]
    assert isinstance(content, list)
    assert content[0] == {"type": "text", "text": "what is this?"}
    assert content[1] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG_1x1).decode()},
    }
    pil_url = content[2]["image_url"]["url"]
    assert pil_url.startswith("data:image/png;base64,")
    assert base64.b64decode(pil_url.split(",", 1)[1]).startswith(b"\x89PNG")
    conversation.add_user_message("plain")
    assert conversation.messages[1] == {"role": "user", "content": "plain"}


def test_an_image_that_is_not_one_is_a_clear_error(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not an image")
    with pytest.raises(ValueError, match=r"add_user_message\.images: cannot read .*notes\.txt"):
        Conversation().add_user_message("look", images=notes)
    with pytest.raises(ValueError, match=r"add_user_message\.images: each image must be a path"):
        Conversation().add_user_message("look", images=[42])


def test_append_user_message_appends_text_to_the_last_user_message() -> None:
    conversation = _dialogue()
    conversation.append_user_message("Answer as JSON.")
    assert conversation.messages[3] == {
        "role": "user",
        "content": "second question\n\nAnswer as JSON.",
    }
    with pytest.raises(ValueError, match="append_user_message: there is no user message"):
        Conversation().append_user_message("x")


def test_add_agent_message_drops_an_empty_tool_calls_list_and_keeps_reasoning_verbatim() -> None:
    conversation = Conversation(reasoning_field="reasoning")
    conversation.add_agent_message(
        {"role": "assistant", "content": "hi", "tool_calls": [], "reasoning_content": " why\n"}
    )
    assert conversation.messages == [{"role": "assistant", "content": "hi", "reasoning": " why\n"}]
    conversation.add_agent_message({"content": None, "tool_calls": [_call("c9", "f", "{ }")]})
    assert conversation.messages[1]["tool_calls"] == [_call("c9", "f", "{ }")]  # type: ignore[typeddict-item]


def test_add_agent_message_takes_the_openai_response_message() -> None:
    from openai.types.chat import ChatCompletionMessage

    message = ChatCompletionMessage(role="assistant", content="typed", tool_calls=[])
    conversation = Conversation()
    conversation.add_agent_message(message)
    assert conversation.messages == [{"role": "assistant", "content": "typed"}]


def test_add_tool_result_writes_a_tool_message_linked_by_tool_call_id() -> None:
    class Result:
        def value_str(self) -> str:
            return "42 apples"

    conversation = Conversation()
    conversation.add_tool_result("c1", Result())
    conversation.add_tool_result("c2", ToolCallReply("from a server"))
    assert conversation.messages == [
        {"role": "tool", "tool_call_id": "c1", "content": "42 apples"},
        {"role": "tool", "tool_call_id": "c2", "content": "from a server"},
    ]


def test_pop_last_message_if_user_rolls_back_only_a_trailing_user_message() -> None:
    conversation = _dialogue()
    assert conversation.pop_last_message_if_user() is None
    assert len(conversation.messages) == 7
    conversation.add_user_message("cancelled")
    assert conversation.pop_last_message_if_user() == {"role": "user", "content": "cancelled"}
    assert conversation.messages[-1]["content"] == "second answer"


def test_pop_from_last_user_message_exclusive_keeps_the_question_inclusive_drops_it() -> None:
    retried = _dialogue()
    removed = retried.pop_from_last_user_message()
    assert [m["role"] for m in removed] == ["assistant", "tool", "assistant"]
    assert retried.messages[-1] == {"role": "user", "content": "second question"}
    revised = _dialogue()
    removed = revised.pop_from_last_user_message(inclusive=True)
    assert removed[0] == {"role": "user", "content": "second question"}
    assert revised.messages[-1] == {"role": "assistant", "content": "first answer"}
    assert Conversation().pop_from_last_user_message(inclusive=True) == []


def test_a_cleared_conversation_keeps_its_system_message_and_resets_counters_and_originals() -> (
    None
):
    conversation = _dialogue()
    conversation.note_usage(1234)
    conversation.compaction_counter.summary_rounds = 2
    conversation.compaction_counter.tool_rounds = 1
    conversation.originals["c1"] = "found it"
    conversation.clear()
    assert conversation.messages == [{"role": "system", "content": "be brief"}]
    assert conversation.total_tokens is None
    assert (
        conversation.compaction_counter.summary_rounds,
        conversation.compaction_counter.tool_rounds,
    ) == (0, 0)
    assert conversation.originals == {}
    no_system = Conversation([{"role": "user", "content": "x"}])
    no_system.clear()
    assert no_system.messages == []


def test_to_history_flattens_text_images_tool_calls_and_results() -> None:
    conversation = _dialogue()
    conversation.add_user_message("see", images="https://example.org/a.png")
    history = conversation.to_history()
    assert history[1].role == "user" and history[1].text == "first question"
    assert history[4].tool_calls == (("c1", "lookup", '{"q": "x"}'),)
    assert history[5].role == "tool" and history[5].tool_call_id == "c1"
    assert history[7].images == ("https://example.org/a.png",)


def test_the_html_rendering_escapes_text_and_folds_tool_calls_and_results() -> None:
    conversation = _dialogue()
    conversation.add_user_message("<script>alert(1)</script> & more")
    page = conversation.render_history_as_html(title="a <b> talk")
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in page
    assert "<title>a &lt;b&gt; talk</title>" in page
    assert '<details class="tool-call"><summary>tool call: lookup (c1)</summary>' in page
    assert "<pre>{&quot;q&quot;: &quot;x&quot;}</pre>" in page
    assert '<details class="tool-result"><summary>tool result (c1)</summary><pre>found it' in page
    body = Conversation.content_to_html({"role": "user", "content": "a < b"})
    assert body == '<div class="text">a &lt; b</div>'


def test_the_html_rendering_shows_no_image_of_an_unsafe_url() -> None:
    message = {
        "role": "user",
        "content": [{"type": "image_url", "image_url": {"url": "javascript:alert(1)"}}],
    }
    assert "javascript" not in Conversation.content_to_html(message)


def test_dumps_and_loads_round_trip_equal_with_tokens_used_on_disk(tmp_path: Path) -> None:
    conversation = _dialogue()
    conversation.add_user_message("image", images="data:image/png;base64,AAAA")
    conversation.note_usage(321)
    conversation.compaction_counter.summary_rounds = 1
    conversation.originals["c0"] = "an old result"
    text = conversation.dumps()
    assert json.loads(text)["tokens_used"] == 321
    again = Conversation.loads(text)
    assert again.messages == conversation.messages
    assert again.total_tokens == 321
    assert again.compaction_counter == conversation.compaction_counter
    assert again.originals == {"c0": "an old result"}
    path = tmp_path / "talk.json"
    conversation.dump(path)
    assert json.loads(path.read_text())["tokens_used"] == 321
    assert Conversation.load(path).messages == conversation.messages


def test_loads_names_what_is_wrong() -> None:
    with pytest.raises(ValueError, match=r"Conversation\.loads\.messages: must be a list"):
        Conversation.loads('{"tokens_used": 3}')
    with pytest.raises(ValueError, match=r"messages\[0\]: must be a message with a role"):
        Conversation.loads('{"messages": [{"role": "robot"}]}')
    with pytest.raises(ValueError, match=r"tokens_used: must be an integer"):
        Conversation.loads('{"messages": [], "tokens_used": "many"}')


def test_estimated_message_length_counts_text_fields_recursing_into_nested_blocks() -> None:
    conversation = Conversation(
        [
            {"role": "system", "content": "12345"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "abc"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,ZZZZ"}},
                ],
            },
            {
                "role": "assistant",
                "content": "xy",
                "reasoning_content": "think",
                "tool_calls": [_call("c1", "lookup", '{"q": "not counted"}')],
            },
            {"role": "assistant", "content": None, "reasoning": {"text": "deep"}},
        ]
    )
    assert conversation.estimated_message_length() == 5 + 3 + 2 + 5 + 4


def test_total_tokens_is_the_providers_usage_report_and_starts_unknown() -> None:
    conversation = Conversation()
    assert conversation.total_tokens is None
    conversation.note_usage(1500)
    assert conversation.total_tokens == 1500
    assert Conversation(total_tokens=7).total_tokens == 7


def test_an_image_file_only_pillow_reads_is_a_clear_error_without_pillow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bitmap = tmp_path / "scan.bmp"
    bitmap.write_bytes(b"BM")
    monkeypatch.setitem(sys.modules, "PIL", None)
    monkeypatch.setitem(sys.modules, "PIL.Image", None)
    with pytest.raises(ValueError, match=r"scan\.bmp' needs Pillow .*pip install 'xrmq\[images\]'"):
        Conversation().add_user_message("look", images=bitmap)


def test_a_tools_transcript_is_a_conversation_and_rolls_back_like_one() -> None:
    transcript = Transcript()
    conversation = transcript.conversation
    conversation.add_user_message("q1")
    conversation.add_agent_message({"content": "a1", "reasoning_content": "because"})
    conversation.add_user_message("q2")
    conversation.add_agent_message({"content": None, "tool_calls": [_call("c1", "f", "{}")]})
    conversation.add_tool_result("c1", "r")
    conversation.add_agent_message({"content": "a2"})
    transcript.commit()
    transcript.note_usage(99)
    assert transcript.messages == conversation.messages  # the committed messages are its own
    assert transcript.messages[1] == {
        "role": "assistant",
        "content": "a1",
        "reasoning_content": "because",
    }
    assert conversation.total_tokens == 99
    dropped = transcript.pop_from_last_user_message()
    assert [m["role"] for m in dropped] == ["assistant", "tool", "assistant"]
    assert transcript.messages[-1] == {"role": "user", "content": "q2"}
    assert transcript.take_rewritten()  # the store gets the whole transcript
    assert transcript.pop_from_last_user_message(inclusive=True) == [
        {"role": "user", "content": "q2"}
    ]
    assert transcript.messages[-1]["content"] == "a1"


def test_a_cancelled_turn_is_rolled_back_to_the_last_commit() -> None:
    transcript = Transcript()
    transcript.conversation.add_user_message("kept")
    transcript.conversation.add_agent_message({"content": "yes"})
    transcript.commit()
    transcript.conversation.add_user_message("cancelled at once")
    transcript.rollback()  # only the question: pop_last_message_if_user
    transcript.conversation.add_user_message("cancelled in a tool call")
    transcript.conversation.add_agent_message({"tool_calls": [_call("c1", "f", "{}")]})
    transcript.rollback()
    assert transcript.conversation.messages == [
        {"role": "user", "content": "kept"},
        {"role": "assistant", "content": "yes"},
    ]
