"""The compaction-quality eval: what survives rolling summaries, on any litellm model.

``eval_session`` generates seeded long sessions that plant facts (numbers, names, times,
identifiers, corrections, sensor readings, cross-section conflicts); ``runner`` writes
them through the context engine with a compaction model and probes, with an answers
model, only the facts that by then live solely in a summary; ``scoring`` is the
exact-value scorer; ``report`` aggregates; ``eval_cli`` is ``python -m bench eval`` and
``xrmq eval``. Every model call is logged (``xrmq.actors.models.recording``) so a run
can be replayed with no model.
"""
