"""xrmq actors: the runtime and the built-in actors that run on it."""
