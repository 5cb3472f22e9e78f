"""Seed 003's validation plan on the pure cores: pressure, checkpoint, boundary, rollover."""

from __future__ import annotations

import pytest

from xrmq.actors.realtime.boundary import Boundary
from xrmq.actors.realtime.checkpoint import Checkpointer, LiveTranscript
from xrmq.actors.realtime.pressure import (
    PressurePolicy,
    PressureTracker,
    RealtimeLimits,
    Usage,
    estimate_tokens,
    usage_from_openai,
)
from xrmq.actors.realtime.rollover import (
    Close,
    Connect,
    GiveUp,
    InputItem,
    MachineSettings,
    Overflowed,
    Phase,
    RolloverMachine,
    Send,
)

# -- usage normalization and pressure --------------------------------------------------


def test_usage_is_the_latest_response_never_summed_across_turns() -> None:
    tracker = PressureTracker(RealtimeLimits(max_context_tokens=1000))
    for usage in (Usage(100, 20), Usage(140, 30), Usage(190, 25)):
        tracker.response_done(usage)
    # 190 + 25, not 100+20+140+30+190+25: the latest input already holds the history.
    assert tracker.used_tokens == 215
    assert tracker.pressure().value == pytest.approx(0.215)
    assert tracker.pressure().tokens_estimated is False


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"input_tokens": 120, "output_tokens": 30, "total_tokens": 150}, Usage(120, 30)),
        ({"total_tokens": 77}, Usage(77, 0)),
        ({"input_tokens": -1, "output_tokens": 3}, None),
        (None, None),
        ("150", None),
    ],
)
def test_openai_usage_maps_normalize(raw: object, expected: Usage | None) -> None:
    assert usage_from_openai(raw) == expected


def test_missing_usage_falls_back_to_the_transcript_estimate() -> None:
    tracker = PressureTracker(RealtimeLimits(max_context_tokens=100), seeded_text="x" * 80)
    tracker.add_transcript("y" * 120)
    tracker.response_done(None)
    assert tracker.used_tokens == estimate_tokens("x" * 80) + estimate_tokens("y" * 120) == 50
    assert tracker.pressure().tokens_estimated is True
    assert tracker.pressure().value == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("limits", "feed", "dimension", "value"),
    [
        (
            RealtimeLimits(max_context_tokens=1000, max_audio_turns=10, max_audio_duration_s=100),
            {"usage": Usage(700, 50), "turns": 2, "audio": 10.0},
            "tokens",
            0.75,
        ),
        (
            RealtimeLimits(max_context_tokens=1000, max_audio_turns=10, max_audio_duration_s=100),
            {"usage": Usage(100, 50), "turns": 8, "audio": 10.0},
            "turns",
            0.8,
        ),
        (
            RealtimeLimits(max_context_tokens=1000, max_audio_turns=10, max_audio_duration_s=100),
            {"usage": Usage(100, 50), "turns": 2, "audio": 90.0},
            "audio_seconds",
            0.9,
        ),
        (
            RealtimeLimits(max_audio_turns=4),
            {"usage": Usage(10**6, 0), "turns": 1, "audio": 0.0},
            "turns",
            0.25,
        ),
    ],
)
def test_pressure_is_the_largest_declared_ratio(
    limits: RealtimeLimits, feed: dict[str, object], dimension: str, value: float
) -> None:
    tracker = PressureTracker(limits)
    usage = feed["usage"]
    assert isinstance(usage, Usage)
    tracker.response_done(usage)
    for _ in range(int(feed["turns"])):  # type: ignore[call-overload]
        tracker.add_turn()
    tracker.add_audio(float(feed["audio"]))  # type: ignore[arg-type]
    pressure = tracker.pressure()
    assert (pressure.dimension, pressure.value) == (dimension, pytest.approx(value))


@pytest.mark.parametrize(
    ("dimension", "feed"),
    [
        ("tokens", lambda t: t.response_done(Usage(690, 20))),
        ("turns", lambda t: [t.add_turn() for _ in range(71)]),
        ("audio", lambda t: t.add_audio(71.0)),
    ],
)
def test_token_turn_and_audio_triggers_compress_at_070_and_roll_over_by_085(
    dimension, feed
) -> None:
    limits = RealtimeLimits(max_context_tokens=1000, max_audio_turns=100, max_audio_duration_s=100)
    tracker = PressureTracker(limits)
    assert not tracker.should_compress()
    feed(tracker)
    assert tracker.should_compress() and not tracker.should_rollover()

    def turns() -> None:
        for _ in range(15):
            tracker.add_turn()

    {
        "tokens": lambda: tracker.response_done(Usage(840, 20)),
        "turns": turns,
        "audio": lambda: tracker.add_audio(15.0),
    }[dimension]()
    assert tracker.should_rollover()


def test_thresholds_are_configurable_and_validated() -> None:
    tracker = PressureTracker(
        RealtimeLimits(max_context_tokens=100), PressurePolicy(compress_at=0.3, rollover_at=0.5)
    )
    tracker.response_done(Usage(30, 0))
    assert tracker.should_compress() and not tracker.should_rollover()
    with pytest.raises(ValueError, match="compress_at"):
        PressurePolicy(compress_at=0.9, rollover_at=0.8)
    with pytest.raises(ValueError, match="max_context_tokens"):
        RealtimeLimits(max_context_tokens=0)


def test_session_duration_schedules_a_reconnect_but_never_a_summary() -> None:
    tracker = PressureTracker(
        RealtimeLimits(max_context_tokens=1000, max_session_s=600),
        PressurePolicy(session_margin_s=30),
        started_at=100.0,
    )
    assert not tracker.session_expiring(now=100.0 + 569)
    assert tracker.session_expiring(now=100.0 + 570)
    assert tracker.pressure().value == 0.0 and not tracker.should_compress()


# -- checkpoint -------------------------------------------------------------------------


def _transcript(*texts: str) -> LiveTranscript:
    transcript = LiveTranscript()
    for index, text in enumerate(texts):
        transcript.append("user" if index % 2 == 0 else "assistant", text)
    return transcript


def test_recovered_context_is_summary_retained_tail_and_post_snapshot_messages() -> None:
    transcript = _transcript("A", "B", "C", "D")
    checkpointer = Checkpointer(transcript, keep_tail=1)
    snapshot = checkpointer.begin()
    assert [m.text for m in snapshot.head] == ["A", "B", "C"] and [
        m.text for m in snapshot.tail
    ] == ["D"]
    transcript.append("assistant", "E")  # while the summarizer runs
    transcript.append("user", "F")
    assert checkpointer.commit(snapshot, "Summary(A B C)") is not None
    recovered = checkpointer.recovered()
    assert recovered.summary == "Summary(A B C)"
    assert [m.text for m in recovered.messages] == ["D", "E", "F"]
    assert [m.text for m in transcript.messages] == ["D", "E", "F"]  # summarized prefix left


def test_snapshot_takes_completed_messages_only() -> None:
    transcript = _transcript("A", "B")
    open_id = transcript.append("user", "half a sent", complete=False)
    transcript.append("assistant", "after")
    snapshot = Checkpointer(transcript, keep_tail=0).begin()
    assert [m.text for m in snapshot.head] == ["A", "B"]
    transcript.replace(open_id, "half a sentence, finished")
    checkpointer = Checkpointer(transcript, keep_tail=0)
    assert checkpointer.commit(checkpointer.begin(), "S") is not None


@pytest.mark.parametrize("change", ["truncate", "merge"])
def test_a_candidate_whose_snapshot_prefix_changed_is_discarded_and_retried(change: str) -> None:
    transcript = _transcript("A", "B", "C", "D")
    checkpointer = Checkpointer(transcript, keep_tail=1)
    snapshot = checkpointer.begin()
    ids = [m.id for m in transcript.messages]
    if change == "truncate":  # barge-in truncated the assistant's B
        transcript.replace(ids[1], "B (cut)")
    else:  # aggregation merged C and D
        transcript.merge(ids[2], ids[3])
    assert checkpointer.commit(snapshot, "stale summary") is None
    assert checkpointer.discarded == 1 and checkpointer.latest is None
    retry = checkpointer.begin()
    assert checkpointer.commit(retry, "fresh summary") is not None
    assert checkpointer.recovered().summary == "fresh summary"


def test_summaries_chain_and_a_failed_summary_commits_nothing() -> None:
    transcript = _transcript("A", "B", "C")
    checkpointer = Checkpointer(transcript, keep_tail=1)
    first = checkpointer.begin()
    assert checkpointer.commit(first, "") is None and checkpointer.latest is None
    assert checkpointer.commit(checkpointer.begin(), "S1") is not None
    transcript.append("assistant", "D")
    transcript.append("user", "E")
    second = checkpointer.begin()
    assert second.previous_summary == "S1" and [m.text for m in second.head] == ["C", "D"]
    checkpointer.commit(second, "S2")
    assert [m.text for m in checkpointer.recovered().messages] == ["E"]


# -- the safe boundary (one test per unsafe condition) -------------------------------


def _streaming(settings: MachineSettings | None = None) -> RolloverMachine:
    machine = RolloverMachine(settings)
    assert machine.start() == [Connect(1, "start")]
    machine.ready(1)
    return machine


def _assert_rollover_waits_for(blocker: str, set_unsafe, set_safe) -> None:
    machine = _streaming()
    set_unsafe(machine)
    assert machine.boundary.blockers() == (blocker,)
    assert machine.request_rollover("pressure") == []
    assert machine.phase is Phase.STREAMING and machine.scheduled == "pressure"
    assert set_safe(machine) == [Close(1), Connect(2, "rollover")]
    assert machine.phase is Phase.ROLLING


def test_no_rollover_while_the_user_turn_is_incomplete() -> None:
    _assert_rollover_waits_for(
        "user_turn", lambda m: m.user_turn(True), lambda m: m.user_turn(False)
    )


def test_no_rollover_while_the_response_is_in_progress() -> None:
    _assert_rollover_waits_for("response", lambda m: m.response(True), lambda m: m.response(False))


def test_no_rollover_while_a_tool_call_or_confirmation_is_pending() -> None:
    _assert_rollover_waits_for("tool_call", lambda m: m.tools(1), lambda m: m.tools(0))


def test_no_rollover_while_assistant_audio_is_still_playing() -> None:
    _assert_rollover_waits_for("playback", lambda m: m.playback(True), lambda m: m.playback(False))


def test_the_boundary_waits_for_every_blocker() -> None:
    boundary = Boundary(user_turn_open=True, response_active=True, pending_tools=2, playing=True)
    assert boundary.blockers() == ("user_turn", "response", "tool_call", "playback")
    machine = _streaming()
    machine.response(True)
    machine.playback(True)
    machine.request_rollover("pressure")
    assert machine.response(False) == []  # audio still plays
    assert machine.playback(False) == [Close(1), Connect(2, "rollover")]


# -- epochs, backlog, policies ----------------------------------------------------------


def _audio(seq: int) -> InputItem:
    return InputItem("audio", seq, data=bytes([seq % 256]) * 4, seconds=0.02)


def test_events_of_an_old_epoch_are_dropped_and_counted() -> None:
    machine = _streaming()
    machine.request_rollover("pressure")
    assert machine.epoch == 2
    assert machine.accept(1) is False  # the old session's late response.done
    assert machine.ready(1) == [] and machine.disconnected(1) == []
    assert machine.counts["stale_events"] == 3
    assert machine.phase is Phase.ROLLING and machine.accept(2)


def test_backlog_replays_in_order_before_newer_input() -> None:
    machine = _streaming()
    assert machine.input(_audio(0)) == [Send(1, _audio(0))]
    machine.request_rollover("pressure")
    for seq in range(1, 40):
        assert machine.input(_audio(seq)) == []
    replay = machine.ready(2)
    assert [effect.item.seq for effect in replay if isinstance(effect, Send)] == list(range(1, 40))
    assert all(isinstance(e, Send) and e.epoch == 2 and e.replayed for e in replay)
    assert machine.input(_audio(40)) == [Send(2, _audio(40))]
    assert machine.counts["replayed"] == 39 and machine.counts["rollovers"] == 1


@pytest.mark.parametrize(
    ("policy", "kept"), [("drop_oldest", [2, 3, 4]), ("drop_newest", [0, 1, 2])]
)
def test_backlog_overflow_is_explicit_and_follows_its_policy(policy, kept) -> None:
    machine = _streaming(MachineSettings(backlog_items=3, overflow=policy))
    machine.request_rollover("pressure")
    effects = [effect for seq in range(5) for effect in machine.input(_audio(seq))]
    assert (
        all(isinstance(e, Overflowed) and e.policy == policy for e in effects) and len(effects) == 2
    )
    assert machine.counts["overflow"] == 2
    assert [e.item.seq for e in machine.ready(2) if isinstance(e, Send)] == kept


def test_natural_policy_keeps_the_checkpoint_for_the_next_disconnect() -> None:
    machine = _streaming(MachineSettings(policy="natural"))
    assert machine.request_rollover("pressure") == [] and machine.phase is Phase.STREAMING
    assert machine.counts["deferred_to_disconnect"] == 1
    assert machine.disconnected(1) == [Connect(2, "disconnected")]
    machine.input(_audio(7))
    assert machine.ready(2) == [Send(2, _audio(7), replayed=True)]
    assert machine.counts["reconnects"] == 1


def test_a_failed_proactive_reconnect_retries_then_falls_back_to_natural() -> None:
    machine = _streaming(MachineSettings(connect_attempts=3))
    machine.request_rollover("pressure")
    machine.input(_audio(1))
    assert machine.connect_failed(2) == [Connect(3, "retry")]
    machine.input(_audio(2))
    assert [e.item.seq for e in machine.ready(3) if isinstance(e, Send)] == [1, 2]
    assert machine.policy == "natural" and machine.counts["fallbacks"] == 1
    assert machine.request_rollover("pressure") == []  # later checkpoints wait for a disconnect


def test_when_every_attempt_fails_the_machine_gives_up_and_counts_the_backlog() -> None:
    machine = _streaming(MachineSettings(connect_attempts=2))
    machine.request_rollover("pressure")
    machine.input(_audio(1))
    machine.connect_failed(2)
    assert machine.connect_failed(3) == [GiveUp("2 connect attempts failed", 1)]
    assert machine.phase is Phase.FAILED and machine.counts["backlog_dropped"] == 1
    assert machine.input(_audio(2)) == [] and machine.counts["input_dropped"] == 1


def test_an_unexpected_disconnect_reconnects_and_clears_the_dead_response() -> None:
    machine = _streaming()
    machine.response(True)
    assert machine.disconnected(1) == [Connect(2, "disconnected")]
    assert machine.boundary.response_active is False and machine.phase is Phase.RECONNECTING


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="overflow"):
        MachineSettings(overflow="block")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="backlog_items"):
        MachineSettings(backlog_items=0)


def test_a_sent_turn_holds_the_boundary_until_its_response_is_done() -> None:
    machine = _streaming()
    machine.input(InputItem("commit", 1))
    assert machine.boundary.blockers() == ("response",)
    assert machine.request_rollover("pressure") == []
    assert machine.response(True) == [] and machine.response(False) == [
        Close(1),
        Connect(2, "rollover"),
    ]
    machine.input(InputItem("text", 2, text="hi"))
    assert [e.item.kind for e in machine.ready(2) if isinstance(e, Send)] == ["text"]
    assert machine.boundary.response_active


def test_a_new_turn_waits_for_a_scheduled_rollover_so_it_cannot_be_postponed_for_ever() -> None:
    machine = _streaming()
    machine.input(InputItem("text", 1, text="first"))
    machine.request_rollover("pressure")
    machine.response(True)
    assert machine.input(_audio(2)) == [Send(1, _audio(2))]  # plain audio still flows
    assert machine.input(InputItem("text", 3, text="next")) == []  # a new turn is held
    assert machine.input(_audio(4)) == []  # and what follows it, in order
    assert machine.playback(True) == [] and machine.response(False) == []
    assert machine.playback(False) == [Close(1), Connect(2, "rollover")]
    assert [e.item.seq for e in machine.ready(2) if isinstance(e, Send)] == [3, 4]
    assert machine.counts["held_for_rollover"] == 2
