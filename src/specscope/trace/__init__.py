"""Acceptance traces: the one record per request that simulation and analysis read.

``schema`` defines the record; ``fields`` reads one JSON line's fields with errors naming
file:line and field; ``load`` reads specscope's own JSON Lines format and the paper's
SpecDecode-Bench files (the right parser for each line), reports what it had to repair, and
writes traces.
"""

from specscope.trace.load import LoadReport, load_traces
from specscope.trace.schema import SCHEMA_VERSION, ProposerTrace, TraceRecord

__all__ = ["LoadReport", "ProposerTrace", "SCHEMA_VERSION", "TraceRecord", "load_traces"]
