"""xrmq benchmarks: ``python -m bench [SUITE ...] [--quick] [--out DIR]`` (see README.md)."""
