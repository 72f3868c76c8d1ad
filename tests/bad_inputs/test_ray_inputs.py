"""Bad inputs of ``--ray``: refused in one line before anything runs or is written, Ray or not."""

from __future__ import annotations

import sys

import pytest
from harness import Case, check
from test_sweep_inputs import ZOO_TARGET, config

SWEEP_RAY = ["sweep", "s.toml", "--ray", "127.0.0.1:1"]
CASES = [
    Case("resources-negative", SWEEP_RAY, r"s\.toml: field 'engines\[0\]\.resources\.H100': expected a number >= 0",
         config(engine='\n[[engines]]\nname = "v"\nlaunch = "vllm"\nmodel = "m"\nresources = { H100 = -1 }\n')),
    Case("resources-not-a-table", SWEEP_RAY, r"engines\[0\]\.resources: expected a table of Ray resources",
         config(engine='\n[[engines]]\nname = "v"\nlaunch = "vllm"\nmodel = "m"\nresources = 1\n')),
    Case("tensor-parallel-not-a-number", SWEEP_RAY,
         r"s\.toml: field 'engines\[0\]\.args': expected a positive tensor-parallel size, got 'two'",
         config(engine='\n[[engines]]\nname = "v"\nlaunch = "vllm"\nmodel = "m"\n'
                       'args = ["--tensor-parallel-size", "two"]\n')),
    Case("tensor-parallel-missing-value", SWEEP_RAY,
         r"field 'engines\[0\]\.args': expected a positive tensor-parallel size, got ''",
         config(engine='\n[[engines]]\nname = "v"\nlaunch = "sglang"\nmodel = "m"\nargs = ["--tp"]\n')),
    Case("ray-address-empty", ["sweep", "s.toml", "--ray", " "], r"--ray: expected local, auto or a cluster address",
         config()),
    Case("ray-workers-without-ray", ["trace", "--model", "m", "--proposers", "ngram", "--workload", "w.jsonl",
                                     "-o", "t.jsonl", "--ray-workers", "2"], r"--ray-workers: needs --ray", config()),
    Case("ray-port-out-of-range", ["sweep", "s.toml", "--ray", "127.0.0.1:99999"],
         r"--ray: '127\.0\.0\.1:99999': expected a port in 1 … 65535, got 99999", config()),
    Case("ray-address-a-word", ["sweep", "s.toml", "--ray", "foo"],
         r"--ray: 'foo': expected local, auto or a cluster address", config()),
    Case("ray-port-zero", ["sweep", "s.toml", "--ray", "ray://head:0"], r"expected a port in 1 … 65535, got 0", config()),
    Case("trace-ray-nothing-listens", ["trace", "--model", ZOO_TARGET, "--proposers", "ngram", "--workload", "w.jsonl",
                                       "-o", "t.jsonl", "--max-tokens", "4", "--ray", "127.0.0.1:1"],  # it left t.jsonl
         r"--ray: cannot connect to Ray at '127\.0\.0\.1:1': nothing answers", config()),  # and its settings, empty
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_refused(case, tmp_path, monkeypatch):
    check(case, tmp_path, monkeypatch)


@pytest.mark.parametrize("verb", [["sweep", "s.toml"], ["trace", "--model", "m", "--proposers", "ngram",
                                                         "--workload", "w.jsonl", "-o", "t.jsonl"]])
def test_without_ray_says_how_to_install_it(verb, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    check(Case("no-ray", [*verb, "--ray", "local"], r"^specscope: error: --ray: Ray is not installed; install it with: "
               r"pip install 'specscope\[ray\]'$", config()), tmp_path, monkeypatch)


def test_an_address_where_nothing_listens_is_refused_at_once():
    """Ray retries such an address for many minutes, printing pages of its logs: one line instead."""
    import socket
    import time

    from specscope.distributed.cluster import ray_session
    from specscope.errors import SpecscopeError

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(SpecscopeError, match=rf"--ray: cannot connect to Ray at '127\.0\.0\.1:{port}': nothing answers"):
        with ray_session(f"127.0.0.1:{port}"):
            pass
    assert time.monotonic() - started < 10


def test_an_address_where_no_ray_listens_is_refused_at_once():
    """An HTTP/1 server (as the dashboard's port, which `ray start` prints) at the address: Ray
    waited minutes, printing its logs; one line now, from the answer to HTTP/2's preface."""
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from specscope.distributed.cluster import ray_session
    from specscope.errors import SpecscopeError

    web = HTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    address = f"127.0.0.1:{web.server_address[1]}"
    started = time.monotonic()
    try:
        with pytest.raises(SpecscopeError, match=rf"--ray: '{address}': .* listens at {address}, not Ray's GCS"):
            with ray_session(address):
                pass
    finally:
        web.shutdown()
    assert time.monotonic() - started < 10


def test_a_group_no_node_can_hold_is_found():
    from specscope.distributed.cluster import feasible, largest_node

    nodes = [{"Alive": True, "Resources": {"CPU": 2.0, "node:1.2.3.4": 1.0}},
             {"Alive": False, "Resources": {"CPU": 64.0, "GPU": 8.0}}]
    assert feasible({"num_cpus": 2, "num_gpus": 0, "resources": {}}, nodes)
    assert not feasible({"num_cpus": 4, "num_gpus": 0, "resources": {}}, nodes)  # 2 + 2 on two nodes is not one
    assert not feasible({"num_cpus": 1, "num_gpus": 1, "resources": {}}, nodes)  # the GPU node is gone
    assert not feasible({"num_cpus": 1, "num_gpus": 0, "resources": {"H100": 1}}, nodes)
    assert largest_node(nodes) == "CPU 2"


def test_an_address_with_spaces_around_it_is_read_as_its_words():
    """' local ' is local: it passed the check and reached Ray unstripped, refused only after the
    models and the workload had been read."""
    from specscope.distributed.cluster import ray_address

    assert ray_address(" local ") == "local" and ray_address("127.0.0.1:6379 ") == "127.0.0.1:6379"
