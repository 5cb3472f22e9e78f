"""The edge box: one config launches supervised actor processes.

- ``config``: the TOML config, decoded into typed msgspec config with errors naming file, key and
rule.
- ``roles``: the registry of roles (functions that register actors on a runtime).
- ``process``: ``xrmq run``, one process of the config.
- ``restart`` and ``supervisor``: ``xrmq up``, the broker and every process, supervised.
- ``recording`` and ``capture``: ``xrmq record`` / ``xrmq replay``.
- ``top``: ``xrmq top``.
"""
