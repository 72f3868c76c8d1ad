"""Workloads: the requests a benchmark runs (JSON Lines files: :mod:`.jsonl`)."""
