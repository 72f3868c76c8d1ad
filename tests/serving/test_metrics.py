"""Prometheus parsing and spec-decode deltas, against hand-computed values."""

from __future__ import annotations

import pytest

pytest.importorskip("prometheus_client")

from specscope.backends.openai.metrics import (
    MetricsSnapshot,
    SpecDecodeDelta,
    delta,
    parse_metrics,
)
from specscope.errors import SpecscopeError

VLLM_TEXT = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 6.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e+09
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 48.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 20.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 12.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 6.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 2.0
vllm:num_requests_running{model_name="m"} 3.0
"""


def test_vllm_counters_with_total_suffix_summed_over_engines():
    snap = parse_metrics(VLLM_TEXT)
    assert snap.has_spec_decode
    assert (snap.num_drafts, snap.num_draft_tokens, snap.num_accepted_tokens) == (16, 48, 20)
    assert snap.accepted_per_pos == {0: 12, 1: 6, 2: 2}
    assert snap.sglang_accept_length is None


def test_counters_without_total_suffix_read_the_same():
    snap = parse_metrics(VLLM_TEXT.replace("_total{", "{"))
    assert (snap.num_drafts, snap.num_draft_tokens, snap.num_accepted_tokens) == (16, 48, 20)
    assert snap.accepted_per_pos == {0: 12, 1: 6, 2: 2}


def test_server_without_spec_decode():
    snap = parse_metrics('vllm:num_requests_running{model_name="m"} 1\n')
    assert not snap.has_spec_decode and snap.num_drafts == 0


def test_sglang_gauges_are_averaged_over_series():
    snap = parse_metrics(
        'sglang:spec_accept_length{tp_rank="0"} 2.5\nsglang:spec_accept_length{tp_rank="1"} 3.5\n'
        'sglang:spec_accept_rate{tp_rank="0"} 0.4\n'
    )
    assert snap.sglang_accept_length == pytest.approx(3.0)
    assert snap.sglang_accept_rate == pytest.approx(0.4)
    assert not snap.has_spec_decode
    # a review: SGLang's utilization gauge is -1 on a prefill server; a series it does not read
    # refused the whole scrape, its acceptance with it
    snap = parse_metrics('sglang:utilization{tp_rank="0"} -1.0\nvllm:cache_config_info{x="y"} NaN\n'
                         'sglang:spec_accept_length{tp_rank="0"} 2.5\n')
    assert snap.sglang_accept_length == 2.5
    with pytest.raises(SpecscopeError, match="expected a finite value >= 0"):
        parse_metrics('sglang:spec_accept_rate{tp_rank="0"} -1.0\n')


def test_delta_and_derived_rates():
    before = MetricsSnapshot(10, 30, 12, {0: 8, 1: 3, 2: 1}, True)
    after = MetricsSnapshot(20, 60, 27, {0: 17, 1: 8, 2: 2}, True, sglang_accept_length=2.0)
    d = delta(before, after)
    assert (d.num_drafts, d.num_draft_tokens, d.num_accepted_tokens) == (10, 30, 15)
    assert d.num_accepted_tokens_per_pos == [9, 5, 1]
    assert d.acceptance_rate == pytest.approx(15 / 30)
    assert d.drafting_acceptance_length == pytest.approx(1 + 15 / 10)
    assert d.per_position_rates() == pytest.approx([0.9, 0.5, 0.1])
    assert d.conditional_rates() == pytest.approx([9 / 10, 5 / 9, 1 / 5])
    assert d.sglang_accept_length == 2.0
    row = d.as_row()
    assert row["num_drafts"] == 10 and row["acceptance_rate"] == pytest.approx(0.5)


def test_positions_that_appear_only_after():
    d = delta(MetricsSnapshot(), MetricsSnapshot(4, 8, 3, {1: 1, 0: 2}, True))
    assert d.num_accepted_tokens_per_pos == [2, 1]


def test_no_drafts_gives_none_not_zero_division():
    d = SpecDecodeDelta(0, 0, 0, [0, 0])
    assert d.acceptance_rate is None and d.drafting_acceptance_length is None
    assert d.conditional_rates() == [None, None]


def test_counter_going_down_is_an_error():
    with pytest.raises(SpecscopeError, match="went down"):
        delta(MetricsSnapshot(10, 30, 12, {}, True), MetricsSnapshot(2, 6, 1, {}, True))


def test_counters_that_cannot_be_are_refused():
    """A NaN, infinite or negative spec-decode sample (a traceback before), and more drafts
    accepted than proposed (an α of 10 before), are the server's errors, not numbers."""
    for value in ("NaN", "+Inf", "-3"):
        with pytest.raises(SpecscopeError, match="expected a finite value >= 0"):
            parse_metrics(f'vllm:spec_decode_num_drafts_total{{model_name="m"}} {value}\n')
    with pytest.raises(SpecscopeError, match="30 draft tokens accepted of 3 proposed"):
        delta(MetricsSnapshot(), MetricsSnapshot(1, 3, 30, {}, True))


def test_malformed_text_and_bad_position_label():
    with pytest.raises(SpecscopeError, match="Prometheus"):
        parse_metrics('vllm:spec_decode_num_drafts_total{model_name="m" 3\n')
    with pytest.raises(SpecscopeError, match="position"):
        parse_metrics('vllm:spec_decode_num_accepted_tokens_per_pos_total{position="x"} 1\n')


@pytest.mark.parametrize("method, k, positions", [("ngram", 4, [0, 1, 2, 3]), ("none", 3, [])])
def test_specscope_serve_exports_one_position_series_per_draft_from_startup(tiny_model, method, k, positions):
    """As vLLM: k zero-valued position series before any request, and no spec_decode series without SD."""
    from serving_helpers import start_server

    from specscope.backends.openai.metrics import scrape

    running = start_server(tiny_model, method, k=k, max_batch_size=2)
    try:
        snap = scrape(running.url)
    finally:
        running.close()
    assert snap.engine == "vllm" and snap.has_spec_decode == (method != "none")
    assert snap.accepted_per_pos == {position: 0 for position in positions}


def test_engine_kind_from_metric_names():
    assert parse_metrics(VLLM_TEXT).engine == "vllm"
    assert parse_metrics('sglang:num_running_reqs{tp_rank="0"} 0\n').engine == "sglang"
    assert parse_metrics("process_cpu_seconds_total 1.5\n").engine is None


def histogram_text(iterations: tuple[float, float], itl: tuple[float, float]) -> str:
    """vLLM's two cross-check histograms (sum, count), as its /metrics writes them."""
    return (
        "# TYPE vllm:iteration_tokens_total histogram\n"
        f'vllm:iteration_tokens_total_bucket{{le="+Inf",model_name="m"}} {iterations[1]}\n'
        f'vllm:iteration_tokens_total_sum{{model_name="m"}} {iterations[0]}\n'
        f'vllm:iteration_tokens_total_count{{model_name="m"}} {iterations[1]}\n'
        "# TYPE vllm:inter_token_latency_seconds histogram\n"
        f'vllm:inter_token_latency_seconds_bucket{{le="+Inf",model_name="m"}} {itl[1]}\n'
        f'vllm:inter_token_latency_seconds_sum{{model_name="m"}} {itl[0]}\n'
        f'vllm:inter_token_latency_seconds_count{{model_name="m"}} {itl[1]}\n'
    )


def test_histogram_means_over_a_run():
    """The calibration cross-check: a run's mean of each histogram = Δsum / Δcount."""
    from specscope.backends.openai.metrics import histogram_means

    before = parse_metrics(histogram_text((100.0, 10.0), (0.5, 50.0)))
    after = parse_metrics(histogram_text((400.0, 30.0), (1.1, 250.0)))
    assert before.histograms["vllm:iteration_tokens_total"] == [100.0, 10.0]
    means = histogram_means(before, after)
    assert means["server_iteration_tokens_mean"] == pytest.approx(300.0 / 20.0)
    assert means["server_inter_token_latency_mean_s"] == pytest.approx(0.6 / 200.0)
    assert histogram_means(after, after)["server_iteration_tokens_mean"] is None  # no step in between


def test_a_run_in_parts_counts_only_its_parts():
    """A server that served another run between this run's two parts: the counters and histograms
    of the parts alone are summed (10 + 5 drafts, not the 40 between the first and last scrape)."""
    from specscope.backends.openai.metrics import histogram_means, summed

    first = (MetricsSnapshot(0, 0, 0, {0: 0}, True, histograms={"vllm:iteration_tokens_total": [0.0, 0.0]}),
             MetricsSnapshot(10, 30, 12, {0: 8}, True, histograms={"vllm:iteration_tokens_total": [40.0, 10.0]}))
    second = (MetricsSnapshot(35, 90, 40, {0: 30, 1: 4}, True, histograms={"vllm:iteration_tokens_total": [100.0, 30.0]}),
              MetricsSnapshot(40, 100, 43, {0: 32, 1: 5}, True, sglang_accept_length=1.5,
                              histograms={"vllm:iteration_tokens_total": [120.0, 35.0]}))
    before, after = summed([first, second])
    d = delta(before, after)
    assert (d.num_drafts, d.num_draft_tokens, d.num_accepted_tokens) == (15, 40, 15)
    assert d.num_accepted_tokens_per_pos == [10, 1] and d.sglang_accept_length == 1.5
    assert histogram_means(before, after)["server_iteration_tokens_mean"] == pytest.approx(60.0 / 15.0)
    with pytest.raises(SpecscopeError, match="went down"):
        summed([first, (second[1], second[0])])
