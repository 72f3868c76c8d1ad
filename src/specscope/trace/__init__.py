"""Acceptance traces: the one record per request that simulation and analysis read.

``schema`` defines the record; ``jsonl`` reads and writes specscope's own JSON Lines format;
``specdecode_bench`` imports the paper's SpecDecode-Bench files; ``load`` picks the right
reader for each line and reports what it had to repair.
"""

from specscope.trace.load import LoadReport, load_traces
from specscope.trace.schema import SCHEMA_VERSION, ProposerTrace, TraceRecord

__all__ = ["LoadReport", "ProposerTrace", "SCHEMA_VERSION", "TraceRecord", "load_traces"]
