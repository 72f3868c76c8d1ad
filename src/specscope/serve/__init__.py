"""``specscope serve``: the reference engine behind an OpenAI-compatible HTTP API.

:mod:`~specscope.serve.protocol` (request validation for every route, response shapes),
:mod:`~specscope.serve.output` (output text and stop strings),
:mod:`~specscope.serve.detokenize` (incremental decoding),
:mod:`~specscope.serve.engine_loop` (continuous batching on one engine thread),
:mod:`~specscope.serve.exporter` (``/metrics`` with vLLM's names),
:mod:`~specscope.serve.server` (the HTTP server); chat messages are rendered with the model's chat
template by :mod:`specscope.workloads.chat`, as a workload's prompts are.
"""
