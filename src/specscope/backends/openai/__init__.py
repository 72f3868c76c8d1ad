"""The ``openai`` backend: serving engines (vLLM, SGLang, ``specscope serve``) measured over
their OpenAI-compatible HTTP API and Prometheus ``/metrics``.

:mod:`.prompts` (workload files), :mod:`.client` (closed-loop streamed load), :mod:`.metrics`
(spec-decode counters and their definitions), :mod:`.measure` (one run), :mod:`.launchers`
(engine command lines and process lifecycle), :mod:`.bench` (``specscope bench --backend
openai``), :mod:`.sweep_config` and :mod:`.sweep` (``specscope sweep``, resumable).
"""

from specscope.backends.openai.bench import (  # noqa: F401
    ServingBenchConfig,
    add_openai_bench_arguments,
    run_bench,
)
