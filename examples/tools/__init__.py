"""The tools example: a camera and an inventory served on the bus (``examples/tools.toml``)."""
