"""VoiceOrdering: the renderer's ordering rules, pure (no bus, no sink, no clock)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xrmq.actors.voice.ordering import (
    Cut,
    Dropped,
    Forgotten,
    ResponseEnded,
    Segment,
    StreamClosed,
    VoiceOrdering,
    Wake,
)
from xrmq.schemas import ResponseOutput


def reply(
    text: str = "",
    request_id: str = "r1",
    response_id: str | None = None,
    final: bool = True,
    ts: int | None = None,
):
    return ResponseOutput(
        kind="reply",
        text=text,
        request_id=request_id,
        response_id=response_id,
        final=final,
        timestamp_us=ts,
    )


def chunk(text: str, response_id: str, request_id: str = "r1") -> ResponseOutput:
    return reply(text, request_id, response_id, final=False)


def end(response_id: str, request_id: str = "r1", text: str = "") -> ResponseOutput:
    return reply(text, request_id, response_id, final=True)


def update(text: str, urgent: bool = False) -> ResponseOutput:
    return ResponseOutput(kind="update", text=text, urgent=urgent)


WITHDRAW = ResponseOutput(kind="withdraw")


def drain(ordering: VoiceOrdering, pid: str = "p1") -> list:
    """Play everything playable now: segments as (sources, text), ends as ("end", reason)."""
    heard: list = []
    while (step := ordering.take(pid)) is not None:
        if isinstance(step, ResponseEnded):
            heard.append(("end", step.reason))
        else:
            heard.append((",".join(step.sources), step.text))
            ordering.finished(step)
    return heard


def start(ordering: VoiceOrdering, pid: str = "p1") -> Segment:
    """Take the next step, which must be a segment, and leave it playing."""
    step = ordering.take(pid)
    assert isinstance(step, Segment), step
    return step


def drops(effects: list, reason: str) -> int:
    return sum(1 for effect in effects if isinstance(effect, Dropped) and effect.reason == reason)


def test_complete_reply_plays_its_whole_text_then_ends():
    ordering = VoiceOrdering()
    assert Wake("p1") in ordering.output("p1", "conversation", reply("Hello there."), now=0)
    assert drain(ordering) == [("conversation", "Hello there."), ("end", "completed")]


def test_streamed_reply_plays_fragments_in_order_and_ends_at_its_terminator():
    ordering = VoiceOrdering()
    ordering.output("p1", "conversation", chunk("The kettle ", "s1"), now=0)
    assert drain(ordering) == [("conversation", "The kettle")]
    ordering.output("p1", "conversation", chunk("is on. ", "s1"), now=1)
    assert drain(ordering) == [("conversation", "is on.")]
    ordering.output("p1", "conversation", end("s1"), now=2)
    assert drain(ordering) == [("end", "completed")]


def test_a_partial_word_is_held_back_until_the_next_fragment():
    ordering = VoiceOrdering()
    ordering.output("p1", "c", chunk("Hel", "s1"), now=0)
    assert drain(ordering) == []
    ordering.output("p1", "c", chunk("lo wor", "s1"), now=0)
    assert drain(ordering) == [("c", "Hello")]
    ordering.output("p1", "c", end("s1", text="ld"), now=0)
    assert drain(ordering) == [("c", "world"), ("end", "completed")]


def test_two_producers_streaming_for_one_participant_never_interleave():
    ordering = VoiceOrdering()
    ordering.output("p1", "chef", chunk("Chop ", "a"), now=0)
    first = start(ordering)
    ordering.output("p1", "timer", chunk("Ten ", "b", request_id="r1"), now=0)
    ordering.output("p1", "chef", chunk("the onions. ", "a"), now=0)
    ordering.output("p1", "timer", chunk("minutes left. ", "b"), now=0)
    ordering.output("p1", "timer", end("b"), now=0)
    ordering.finished(first)
    assert drain(ordering) == [("chef", "the onions.")]
    ordering.output("p1", "chef", end("a"), now=0)
    assert drain(ordering) == [
        ("end", "completed"),
        ("timer", "Ten minutes left."),
        ("end", "completed"),
    ]


def test_the_same_response_id_from_two_sources_is_two_streams():
    ordering = VoiceOrdering()
    ordering.output("p1", "a", chunk("from a ", "same"), now=0)
    ordering.output("p1", "b", chunk("from b ", "same"), now=0)
    ordering.output("p1", "a", end("same"), now=0)
    ordering.output("p1", "b", end("same"), now=0)
    assert drain(ordering) == [
        ("a", "from a"),
        ("end", "completed"),
        ("b", "from b"),
        ("end", "completed"),
    ]


def test_participants_are_rendered_independently():
    ordering = VoiceOrdering()
    ordering.output("p1", "c", chunk("For one ", "s1"), now=0)
    start(ordering, "p1")
    ordering.output("p2", "c", reply("For two."), now=0)
    assert drain(ordering, "p2") == [("c", "For two."), ("end", "completed")]


def test_replies_play_in_arrival_order_per_participant():
    ordering = VoiceOrdering()
    for text in ("First.", "Second.", "Third."):
        ordering.output("p1", "c", reply(text), now=0)
    assert [text for _, text in drain(ordering) if _ != "end"] == ["First.", "Second.", "Third."]


def test_router_acknowledgement_published_before_the_first_chunk_plays_first():
    ordering = VoiceOrdering()
    ordering.output("p1", "router", reply("Let me check.", request_id="turn-1"), now=0)
    ordering.output("p1", "conversation", chunk("Your tea ", "s1", request_id="turn-1"), now=0)
    ordering.output("p1", "conversation", end("s1", request_id="turn-1", text="is ready."), now=0)
    assert drain(ordering) == [
        ("router", "Let me check."),
        ("end", "completed"),
        ("conversation", "Your tea is ready."),
        ("end", "completed"),
    ]


def test_newer_query_drops_the_older_replys_remaining_fragments():
    ordering = VoiceOrdering()
    ordering.output("p1", "c", chunk("The old ", "s1", request_id="old"), now=0)
    playing = start(ordering)
    effects = ordering.query("p1", "new")
    assert Cut("p1") in effects
    assert (
        drops(
            ordering.output("p1", "c", chunk("answer ", "s1", request_id="old"), now=1),
            "superseded",
        )
        == 1
    )
    assert drops(ordering.output("p1", "c", end("s1", request_id="old"), now=1), "superseded") == 1
    assert ordering.finished(playing) == []
    assert drain(ordering) == [("end", "superseded")]
    ordering.output("p1", "c", reply("New answer.", request_id="new"), now=2)
    assert drain(ordering) == [("c", "New answer."), ("end", "completed")]


def test_newer_query_drops_queued_replies_of_older_requests():
    ordering = VoiceOrdering()
    ordering.output("p1", "router", reply("Checking.", request_id="old"), now=0)
    ordering.output("p1", "c", chunk("Queued ", "s1", request_id="old"), now=0)
    effects = ordering.query("p1", "new")
    assert drops(effects, "superseded") == 2
    assert drain(ordering) == []
    assert (
        drops(
            ordering.output("p1", "c", chunk("more ", "s1", request_id="old"), now=0), "superseded"
        )
        == 1
    )


def test_replies_to_the_querys_own_request_id_are_kept():
    ordering = VoiceOrdering()
    ordering.output("p1", "router", reply("On it.", request_id="q2"), now=0)
    assert ordering.query("p1", "q2") == []
    assert drain(ordering) == [("router", "On it."), ("end", "completed")]


def test_a_query_seen_before_its_replies_supersedes_them_once_a_newer_query_arrives():
    ordering = VoiceOrdering()
    ordering.query("p1", "q1")
    ordering.query("p1", "q2")
    assert (
        drops(
            ordering.output("p1", "c", reply("Late answer.", request_id="q1"), now=0), "superseded"
        )
        == 1
    )


def test_interrupted_cuts_the_playing_output_and_drops_replies_but_keeps_updates():
    ordering = VoiceOrdering()
    ordering.output("p1", "c", chunk("Long answer ", "s1"), now=0)
    ordering.output("p1", "c", reply("Queued reply.", request_id="r1"), now=0)
    ordering.output("p1", "timer", update("Tea is ready."), now=0)
    start(ordering)
    effects = ordering.interrupted("p1")
    assert Cut("p1") in effects
    assert drops(effects, "interrupted") == 1
    assert drain(ordering) == [
        ("end", "interrupted"),
        ("timer", "Tea is ready."),
        ("end", "completed"),
    ]
    assert drops(ordering.output("p1", "c", end("s1"), now=1), "superseded") == 1


def test_interrupted_cuts_a_playing_update():
    ordering = VoiceOrdering()
    ordering.output("p1", "timer", update("Tea is ready."), now=0)
    start(ordering)
    assert Cut("p1") in ordering.interrupted("p1")
    assert drain(ordering) == [("end", "interrupted")]


def test_global_interrupted_applies_to_every_participant():
    ordering = VoiceOrdering()
    for pid in ("p1", "p2"):
        ordering.output(pid, "c", chunk("Talking ", "s"), now=0)
        start(ordering, pid)
    effects = ordering.interrupted(None)
    assert Cut("p1") in effects and Cut("p2") in effects


def test_updates_wait_until_the_participant_is_not_being_spoken_to():
    ordering = VoiceOrdering()
    ordering.output("p1", "c", chunk("Thinking ", "s1"), now=0)
    assert drain(ordering) == [("c", "Thinking")]
    ordering.output("p1", "timer", update("Timer done."), now=0)
    assert drain(ordering) == []
    ordering.output("p1", "c", reply("Queued reply."), now=0)
    ordering.output("p1", "c", end("s1"), now=0)
    assert drain(ordering) == [
        ("end", "completed"),
        ("c", "Queued reply."),
        ("end", "completed"),
        ("timer", "Timer done."),
        ("end", "completed"),
    ]


def test_consecutive_queued_updates_are_combined_into_one_response():
    ordering = VoiceOrdering()
    ordering.output("p1", "timer", update("Tea is ready."), now=0)
    ordering.output("p1", "monitor", update("Milk is low."), now=0)
    ordering.output("p1", "timer", update("Biscuits too."), now=0)
    assert drain(ordering) == [
        ("timer,monitor", "Tea is ready. Milk is low. Biscuits too."),
        ("end", "completed"),
    ]
    assert ordering.counts["updates_combined"] == 2


def test_updates_are_played_separately_when_combining_is_off():
    ordering = VoiceOrdering(combine_updates=False)
    ordering.output("p1", "timer", update("One."), now=0)
    ordering.output("p1", "timer", update("Two."), now=0)
    assert [text for _, text in drain(ordering)] == ["One.", "completed", "Two.", "completed"]


def test_urgent_update_cuts_the_current_output_and_plays_next():
    ordering = VoiceOrdering()
    ordering.output("p1", "c", chunk("A long ", "s1"), now=0)
    ordering.output("p1", "c", reply("Next reply."), now=0)
    ordering.output("p1", "timer", update("Routine."), now=0)
    playing = start(ordering)
    effects = ordering.output("p1", "safety", update("Stop now!", urgent=True), now=1)
    assert Cut("p1") in effects
    assert ordering.finished(playing) == []
    assert drain(ordering) == [
        ("end", "cut"),
        ("safety", "Stop now!"),
        ("end", "completed"),
        ("c", "Next reply."),
        ("end", "completed"),
        ("timer", "Routine."),
        ("end", "completed"),
    ]
    assert ordering.counts["cut"] == 1


def test_fragments_of_a_stream_cut_by_an_urgent_update_are_dropped_as_late():
    ordering = VoiceOrdering()
    ordering.output("p1", "c", chunk("A long ", "s1"), now=0)
    start(ordering)
    ordering.output("p1", "safety", update("Stop now!", urgent=True), now=0)
    assert drops(ordering.output("p1", "c", chunk("answer ", "s1"), now=0), "late") == 1


def test_urgent_update_queues_behind_a_playing_urgent_update():
    ordering = VoiceOrdering()
    ordering.output("p1", "safety", update("Fire!", urgent=True), now=0)
    playing = start(ordering)
    effects = ordering.output("p1", "safety", update("Exit left!", urgent=True), now=0)
    assert not any(isinstance(effect, Cut) for effect in effects)
    ordering.finished(playing)
    assert [text for _, text in drain(ordering)] == ["completed", "Exit left!", "completed"]


def test_withdraw_drops_only_that_producers_queued_updates():
    ordering = VoiceOrdering(combine_updates=False)
    ordering.output("p1", "timer", update("Playing now."), now=0)
    playing = start(ordering)
    ordering.output("p1", "timer", update("Queued timer."), now=0)
    ordering.output("p1", "monitor", update("Queued monitor."), now=0)
    ordering.output("p1", "c", reply("A reply."), now=0)
    ordering.output("p2", "timer", update("Other participant."), now=0)
    effects = ordering.output("p1", "timer", WITHDRAW, now=0)
    assert drops(effects, "withdrawn") == 1
    ordering.finished(playing)
    assert [text for _, text in drain(ordering)] == [
        "completed",
        "A reply.",
        "completed",
        "Queued monitor.",
        "completed",
    ]
    assert drain(ordering, "p2") == [("timer", "Other participant."), ("end", "completed")]


def test_withdraw_drops_that_producers_queued_urgent_updates_too():
    ordering = VoiceOrdering()
    ordering.output("p1", "safety", update("Fire!", urgent=True), now=0)
    playing = start(ordering)
    ordering.output("p1", "timer", update("Urgent timer.", urgent=True), now=0)
    assert drops(ordering.output("p1", "timer", WITHDRAW, now=0), "withdrawn") == 1
    ordering.finished(playing)
    assert drain(ordering) == [("end", "completed")]


def test_withdraw_keeps_the_update_already_playing():
    ordering = VoiceOrdering()
    ordering.output("p1", "timer", update("Playing now."), now=0)
    playing = start(ordering)
    assert ordering.output("p1", "timer", WITHDRAW, now=0) == []
    assert ordering.finished(playing) == [Wake("p1")]


def test_idle_timeout_closes_an_abandoned_stream_and_plays_what_it_received():
    ordering = VoiceOrdering(idle_timeout_s=5)
    ordering.output("p1", "c", chunk("Half a sent", "s1"), now=10)
    assert drain(ordering) == [("c", "Half a")]
    assert ordering.next_deadline() == 15
    assert ordering.expire(now=14.9) == []
    effects = ordering.expire(now=15)
    assert StreamClosed("p1", "c", "s1", "idle_timeout") in effects
    assert ordering.next_deadline() is None
    assert drain(ordering) == [("c", "sent"), ("end", "completed")]
    assert ordering.counts["stream_idle_timeout"] == 1
    assert drops(ordering.output("p1", "c", chunk("ence.", "s1"), now=16), "late") == 1


def test_each_fragment_pushes_the_idle_deadline_back():
    ordering = VoiceOrdering(idle_timeout_s=5)
    ordering.output("p1", "c", chunk("a ", "s1"), now=0)
    ordering.output("p1", "c", chunk("b ", "s1"), now=4)
    assert ordering.expire(now=6) == []
    assert ordering.next_deadline() == 9


def test_duplicate_terminator_is_dropped_and_counted():
    ordering = VoiceOrdering()
    ordering.output("p1", "c", chunk("Hi ", "s1"), now=0)
    ordering.output("p1", "c", end("s1"), now=0)
    assert drops(ordering.output("p1", "c", end("s1"), now=0), "late") == 1
    assert drain(ordering) == [("c", "Hi"), ("end", "completed")]


def test_terminator_before_its_stream_is_dropped_and_the_stream_that_follows_is_late():
    ordering = VoiceOrdering()
    assert drops(ordering.output("p1", "c", end("s1"), now=0), "unknown_terminator") == 1
    assert drops(ordering.output("p1", "c", chunk("Out of order ", "s1"), now=0), "late") == 1
    assert drain(ordering) == []


def test_final_fragment_with_text_for_an_unknown_stream_plays_as_a_complete_reply():
    ordering = VoiceOrdering()
    ordering.output("p1", "c", end("s1", text="Only fragment."), now=0)
    assert drain(ordering) == [("c", "Only fragment."), ("end", "completed")]
    assert drops(ordering.output("p1", "c", end("s1"), now=0), "late") == 1


def test_output_failing_boundary_validation_is_dropped_and_counted():
    ordering = VoiceOrdering()
    effects = ordering.output("p1", "c", ResponseOutput(kind="reply", request_id="r1"), now=0)
    assert drops(effects, "invalid") == 1
    assert "text" in effects[0].detail
    assert drain(ordering) == []


def test_output_without_a_participant_is_dropped_and_counted():
    ordering = VoiceOrdering()
    assert drops(ordering.output(None, "c", reply("Hello."), now=0), "no_participant") == 1
    assert ordering.counts["no_participant"] == 1


def test_queue_is_bounded_and_evicts_updates_before_replies():
    ordering = VoiceOrdering(queue_capacity=2, combine_updates=False)
    ordering.output("p1", "timer", update("Update."), now=0)
    ordering.output("p1", "c", reply("Reply one."), now=0)
    assert drops(ordering.output("p1", "c", reply("Reply two."), now=0), "evicted") == 1
    assert drops(ordering.output("p1", "c", chunk("Reply three ", "s3"), now=0), "evicted") == 1
    assert [text for _, text in drain(ordering)] == ["Reply two.", "completed", "Reply three"]
    assert ordering.counts["evicted"] == 2


def test_open_streams_are_bounded_and_the_oldest_is_closed():
    ordering = VoiceOrdering(max_open_streams=1)
    ordering.output("p1", "c", chunk("first ", "s1"), now=0)
    effects = ordering.output("p2", "c", chunk("second ", "s2"), now=0)
    assert StreamClosed("p1", "c", "s1", "evicted") in effects
    assert drain(ordering, "p1") == [("c", "first"), ("end", "completed")]
    assert ordering.counts["stream_evicted"] == 1


def test_segments_carry_first_flag_request_and_timestamp():
    ordering = VoiceOrdering()
    ordering.output("p1", "c", reply("One two ", "r9", "s1", final=False, ts=123), now=0)
    first = start(ordering)
    ordering.finished(first)
    ordering.output("p1", "c", chunk("three ", "s1", request_id="r9"), now=0)
    second = start(ordering)
    assert (first.first, second.first) == (True, False)
    assert (first.request_id, first.timestamp_us, first.kind, first.response) == (
        "r9",
        123,
        "reply",
        second.response,
    )


def test_constructor_rejects_bad_settings_naming_the_field():
    with pytest.raises(ValueError, match=r"VoiceOrdering\.idle_timeout_s"):
        VoiceOrdering(idle_timeout_s=0)
    with pytest.raises(ValueError, match=r"VoiceOrdering\.queue_capacity"):
        VoiceOrdering(queue_capacity=0)


def test_take_for_a_participant_never_seen_is_nothing():
    assert VoiceOrdering().take("nobody") is None


def test_memory_of_closed_streams_is_bounded_oldest_first():
    ordering = VoiceOrdering(closed_capacity=1)
    ordering.output("p1", "c", end("s1", text="One."), now=0)
    ordering.output("p1", "c", end("s2", text="Two."), now=0)
    assert drops(ordering.output("p1", "c", end("s2"), now=0), "late") == 1
    # s1 was forgotten: its duplicate terminator now looks like one for an unknown stream.
    assert drops(ordering.output("p1", "c", end("s1"), now=0), "unknown_terminator") == 1


def test_memory_of_requests_is_bounded_oldest_first():
    ordering = VoiceOrdering(request_capacity=2)
    ordering.query("p1", "q1")
    ordering.query("p1", "q2")
    ordering.query("p1", "q3")
    # q1 was forgotten (two requests are remembered), so its reply plays.
    assert (
        drops(ordering.output("p1", "c", reply("Old.", request_id="q2"), now=0), "superseded") == 1
    )
    assert (
        drops(ordering.output("p1", "c", reply("Older.", request_id="q1"), now=0), "superseded")
        == 0
    )


_sources = st.sampled_from(["a", "b"])
_pids = st.sampled_from(["p1", "p2"])
_texts = st.sampled_from(["", " ", "word ", "two words ", "tail"])
_outputs = st.one_of(
    st.builds(
        lambda t, r, s: chunk(t, s, r),
        _texts,
        st.sampled_from(["r1", "r2"]),
        st.sampled_from(["s1", "s2"]),
    ),
    st.builds(
        lambda t, r, s: end(s, r, t),
        _texts,
        st.sampled_from(["r1", "r2"]),
        st.sampled_from(["s1", "s2"]),
    ),
    st.builds(
        lambda t, r: reply(t, r), st.sampled_from(["Hi.", ""]), st.sampled_from(["r1", "r2"])
    ),
    st.builds(update, st.sampled_from(["U.", ""]), st.booleans()),
    st.just(WITHDRAW),
)
_operations = st.lists(
    st.one_of(
        st.tuples(st.just("output"), st.one_of(_pids, st.none()), _sources, _outputs),
        st.tuples(st.just("query"), _pids, st.sampled_from(["r1", "r2", "r3"])),
        st.tuples(st.just("interrupted"), st.one_of(_pids, st.none())),
        st.tuples(st.just("expire")),
        st.tuples(st.just("play"), _pids),
        st.tuples(st.just("finish"), _pids),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(_operations)
def test_any_input_sequence_never_raises_and_never_interleaves_responses(operations):
    ordering = VoiceOrdering(idle_timeout_s=1, queue_capacity=3, max_open_streams=2)
    now = 0.0
    playing: dict[str, Segment] = {}
    current: dict[str, int | None] = {"p1": None, "p2": None}
    for operation in operations:
        now += 0.5
        kind = operation[0]
        if kind == "output":
            ordering.output(operation[1], operation[2], operation[3], now)
        elif kind == "query":
            ordering.query(operation[1], operation[2])
        elif kind == "interrupted":
            ordering.interrupted(operation[1])
        elif kind == "expire":
            ordering.expire(now)
        elif kind == "finish" and operation[1] in playing:
            ordering.finished(playing.pop(operation[1]))
        elif kind == "play":
            pid = operation[1]
            step = ordering.take(pid)
            if isinstance(step, ResponseEnded):
                assert step.response == current[pid]
                current[pid] = None
            elif isinstance(step, Segment):
                assert current[pid] in (None, step.response)
                assert step.first == (current[pid] is None)
                current[pid] = step.response
                playing[pid] = step


# -- robustness (issue 13): gaps, bounded participants -------------------------------------


def test_a_stream_that_had_a_gap_plays_what_arrived_but_ends_incomplete_and_is_counted():
    ordering = VoiceOrdering()
    ordering.output("p1", "conversation", chunk("The kettle is ", "s1"), now=0, sender="conv.0")
    ordering.gap("p1", "conv.0")  # a fragment between these two never arrived
    ordering.output("p1", "conversation", chunk("degrees. ", "s1"), now=0, sender="conv.0")
    ordering.output("p1", "conversation", end("s1"), now=0, sender="conv.0")
    assert drain(ordering) == [("conversation", "The kettle is degrees."), ("end", "incomplete")]
    assert ordering.counts["incomplete"] == 1


def test_a_gap_before_a_streams_first_surviving_fragment_marks_that_stream():
    ordering = VoiceOrdering()
    ordering.output("p1", "conversation", reply("Earlier, complete."), now=0, sender="conv.0")
    assert drain(ordering) == [("conversation", "Earlier, complete."), ("end", "completed")]
    ordering.gap("p1", "conv.0")  # the stream's first fragment was lost
    ordering.output("p1", "conversation", chunk("rest of it ", "s2", "r2"), now=0, sender="conv.0")
    ordering.output("p1", "conversation", end("s2", "r2"), now=0, sender="conv.0")
    assert drain(ordering) == [("conversation", "rest of it"), ("end", "incomplete")]


def test_a_gap_of_another_sender_or_participant_leaves_the_stream_complete():
    ordering = VoiceOrdering()
    ordering.output("p1", "conversation", chunk("All ", "s1"), now=0, sender="conv.0")
    ordering.output("p2", "conversation", chunk("Other ", "s1"), now=0, sender="conv.0")
    ordering.gap("p1", "router")
    ordering.gap("p2", "conv.0")
    ordering.output("p1", "conversation", end("s1", text="here."), now=0, sender="conv.0")
    assert drain(ordering) == [("conversation", "All here."), ("end", "completed")]
    assert ordering.gap("nobody", "conv.0") == [] and len(ordering) == 2  # no state for a stranger


def test_participants_are_bounded_the_least_recently_active_idle_one_is_forgotten_first():
    ordering = VoiceOrdering(max_participants=3)
    ordering.output("busy", "conversation", chunk("Still talking ", "s1"), now=0)
    start(ordering, "busy")
    for pid in ("a", "b"):
        ordering.query(pid, f"q-{pid}")
    effects = ordering.query("c", "q-c")  # over the bound: "a", idle and least recent, goes
    assert Forgotten("a") in effects and len(ordering) == 3
    effects = ordering.output("d", "conversation", reply("Hi."), now=0)
    assert Forgotten("b") in effects and "busy" in ordering._participants
    assert ordering.counts["participants_evicted"] == 2


def test_an_interruption_for_an_unknown_participant_creates_no_state():
    ordering = VoiceOrdering()
    for index in range(1000):
        assert ordering.interrupted(f"stranger{index}") == []
    assert len(ordering) == 0


def test_the_next_sentence_is_handed_out_ahead_while_one_plays_at_most_one_and_in_order():
    ordering = VoiceOrdering(sentences=True)
    ordering.output("p1", "c", chunk("One is here. Two is", "s1"), 0.0)
    playing = start(ordering)
    assert playing.text == "One is here."
    assert ordering.take_ahead("p1") is None  # "Two is" may go on
    ordering.output("p1", "c", chunk(" next. Three", "s1"), 0.0)
    ahead = ordering.take_ahead("p1")
    assert isinstance(ahead, Segment) and ahead.text == "Two is next." and not ahead.first
    ordering.output("p1", "c", chunk(" comes last. ", "s1"), 0.0)
    assert ordering.take_ahead("p1") is None  # one ahead at most
    assert ordering.take("p1") is None  # the prepared one plays next, nothing else
    assert ordering.finished(ahead) == []  # not its turn yet: ignored
    assert ordering.finished(playing) == [Wake("p1")]
    assert ordering.take("p1") is None  # the prepared one is playing now
    assert ordering.take_ahead("p1") is None  # "Three comes last." waits for the end
    ordering.output("p1", "c", end("s1"), 0.0)
    third = ordering.take_ahead("p1")
    assert isinstance(third, Segment) and third.text == "Three comes last."
    ordering.finished(ahead)
    ordering.finished(third)
    assert drain(ordering) == [("end", "completed")]


def test_a_barge_in_cuts_the_playing_sentence_and_drops_the_one_ahead():
    ordering = VoiceOrdering(sentences=True)
    ordering.query("p1", "r1")
    ordering.output("p1", "c", chunk("One is here. Two", "s1"), 0.0)
    playing = start(ordering)
    ordering.output("p1", "c", chunk(" is next. More", "s1"), 0.0)
    ahead = ordering.take_ahead("p1")
    assert isinstance(ahead, Segment)
    assert Cut("p1") in ordering.interrupted("p1")
    assert ordering.finished(playing) == [] and ordering.finished(ahead) == []
    assert ordering.take_ahead("p1") is None
    assert drain(ordering) == [("end", "interrupted")]
