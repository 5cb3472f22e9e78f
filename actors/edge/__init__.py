"""The edge box, the app layer: one config launches supervised actor processes.

The only layer that knows all the others: it composes the capabilities' configs and
actors into a box, and holds every command and demo.

- ``config`` (the schema), ``config_loader`` (TOML in), ``config_ranges``, ``config_rules``:
  the box's config, with errors naming file, key and rule.
- ``roles`` and ``stack``: the roles (functions that register actors on a runtime).
- ``process``: ``xrmq run``, one process of the config.
- ``restart`` and ``supervisor``: ``xrmq up``, the broker and every process, supervised.
- ``capture_file`` and ``capture``: ``xrmq record`` / ``xrmq replay``.
- ``top``: ``xrmq top``.
- ``box_commands``, ``context_commands``, ``turn_commands``, ``voice_commands``: the
  ``xrmq`` subcommands; ``chat``: ``xrmq say`` / ``xrmq chat``.
- ``demo``, ``voice_demo``, ``realtime_demo``: ``xrmq demo`` and its ``--voice`` and
  ``--realtime`` variants.
"""
