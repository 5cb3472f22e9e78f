"""Tools on the bus and seed 002's tiered compaction of a tool-calling transcript."""
