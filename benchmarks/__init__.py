"""Benchmarks that print figures: cycle cost, control-plane load, balance quality (see README.md)."""
