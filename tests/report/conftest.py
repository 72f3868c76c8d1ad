"""Synthetic trace files and one report built from them, shared by the report tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from report_fixtures import HOSTILE_DATASET, synthetic_records

from specscope.report.build import build_report
from specscope.report.config import ReportConfig
from specscope.sim.grid import SimConfig
from specscope.trace.load import write_traces


@pytest.fixture(scope="session")
def synthetic_traces(tmp_path_factory) -> list[Path]:
    folder = tmp_path_factory.mktemp("traces")
    paths = [folder / "chat.jsonl", folder / "hostile.jsonl"]
    write_traces(paths[0], synthetic_records("chat", 24, seed=1))
    write_traces(paths[1], synthetic_records(HOSTILE_DATASET, 12, seed=2))
    return paths


@pytest.fixture(scope="session")
def synthetic_report(synthetic_traces, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    config = ReportConfig(sim=SimConfig(batch_sizes=(1, 8, 12)))  # every dataset fills B = 12
    return build_report(synthetic_traces, out, config)
