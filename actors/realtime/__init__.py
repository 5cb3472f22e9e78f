"""Realtime speech-to-speech sessions that never hit the provider's limit.

Pure cores: ``pressure`` (usage normalization, context pressure), ``checkpoint``
(snapshot, summary, verbatim tail, recovery), ``boundary`` (the safe-boundary rule),
``rollover`` (epochs, bounded backlog, policies), ``config`` (``RealtimeConfig``: a
destination's ``[destinations.NAME.realtime]`` table), ``turns`` (provider events into the
transcript, barge-in cuts), ``history`` (each rollover's phases, the rollover-loop
guard), ``seed`` (what a new session is seeded with), ``mirror`` (what a standby
session holds). I/O: ``provider`` (the adapter interface), ``openai_realtime`` (the
OpenAI Realtime protocol over websockets), ``server`` (the offline simulated realtime
server), ``session`` (one participant's session shell, ``settings`` its settings) with
``background`` (its tasks, background checkpoint and settling) and ``standby`` (the
session opened before a rollover's boundary), ``conversation`` (``RealtimeConversation``,
the routed destination).
The I/O modules need the ``realtime`` extra (websockets) and are imported by name.
"""
