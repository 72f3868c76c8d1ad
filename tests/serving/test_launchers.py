"""Engine command lines against the engines' documented options, and the process lifecycle
(healthy, early exit, never healthy, SIGTERM ignored -> SIGKILL) with small stand-in servers."""

from __future__ import annotations

import ast
import json
import sys
import textwrap
import time
from pathlib import Path

import pytest

from specscope.backends.openai import launchers
from specscope.backends.openai.launchers import (
    LaunchError,
    LaunchSpec,
    ServerProcess,
    command_for,
    free_port,
    sglang_command,
    vllm_command,
)
from specscope.errors import SpecscopeError
from specscope.trees import TreeShape

pytestmark = pytest.mark.slow  # launched processes and their timeouts


def _spec_config(command: list[str]) -> dict | None:
    if "--speculative-config" not in command:
        return None
    return json.loads(command[command.index("--speculative-config") + 1])


def _flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_vllm_baseline_has_batch_limit_and_no_prefix_caching():
    command = vllm_command(LaunchSpec("vllm", "meta-llama/Llama-3.1-8B-Instruct", batch_size=32, port=9001))
    assert command[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
    assert _flag(command, "--max-num-seqs") == "32" and _flag(command, "--port") == "9001"
    assert "--no-enable-prefix-caching" in command
    assert _spec_config(command) is None


@pytest.mark.parametrize(
    "method, draft, expected",
    [
        (
            "ngram",
            None,
            {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 3, "prompt_lookup_max": 7},
        ),
        (
            "eagle",
            "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
            {"method": "eagle", "num_speculative_tokens": 4, "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B"},
        ),
        ("eagle3", "h/e3", {"method": "eagle3", "num_speculative_tokens": 4, "model": "h/e3"}),
        (
            "draft",
            "meta-llama/Llama-3.2-1B-Instruct",
            {
                "method": "draft_model",
                "num_speculative_tokens": 4,
                "model": "meta-llama/Llama-3.2-1B-Instruct",
            },
        ),
        ("mtp", None, {"method": "mtp", "num_speculative_tokens": 4}),  # vLLM maps it per model
        ("suffix", None, {"method": "suffix", "num_speculative_tokens": 4}),
    ],
)
def test_vllm_speculative_config(method, draft, expected):
    command = vllm_command(LaunchSpec("vllm", "target", method=method, k=4, draft=draft))
    assert _spec_config(command) == expected


def test_vllm_qwen3_next_mtp_and_extra_args():
    spec = LaunchSpec(
        "vllm",
        "Qwen/Qwen3-Next-80B-A3B-Instruct",
        method="mtp",
        k=2,
        mtp_method="qwen3_next_mtp",
        extra_args=("--tensor-parallel-size", "4"),
    )
    command = vllm_command(spec)
    assert _spec_config(command) == {"method": "qwen3_next_mtp", "num_speculative_tokens": 2}
    assert command[-2:] == ["--tensor-parallel-size", "4"]


@pytest.mark.parametrize(
    "method, algorithm", [("eagle", "EAGLE"), ("eagle3", "EAGLE3"), ("draft", "STANDALONE"), ("mtp", "EAGLE")]
)
def test_sglang_chain_speculation(method, algorithm):
    draft = None if method == "mtp" else "some/draft"
    command = sglang_command(LaunchSpec("sglang", "target", method=method, k=5, batch_size=16, draft=draft))
    assert command[1:3] == ["-m", "sglang.launch_server"] and _flag(command, "--model-path") == "target"
    assert _flag(command, "--max-running-requests") == "16"
    assert "--disable-radix-cache" in command and "--enable-metrics" in command
    assert _flag(command, "--speculative-algorithm") == algorithm
    assert _flag(command, "--speculative-num-steps") == "5"
    assert _flag(command, "--speculative-eagle-topk") == "1"
    assert _flag(command, "--speculative-num-draft-tokens") == "6"
    assert ("--speculative-draft-model-path" in command) == (draft is not None)


NGRAM_SPEC = LaunchSpec("sglang", "target", method="ngram", k=3, prompt_lookup_min=2, prompt_lookup_max=5)


@pytest.mark.parametrize(
    "version, window",
    [("0.4.9.post2", True), ("0.5.9", True), ("0.5.10", False), ("0.5.10.post1", False), ("0.6.0", False)],
)
def test_sglang_ngram_flags_follow_the_installed_version(monkeypatch, version, window):
    monkeypatch.setattr(launchers, "_installed_version", lambda package: version)
    command = sglang_command(NGRAM_SPEC)
    assert _flag(command, "--speculative-algorithm") == "NGRAM"
    assert _flag(command, "--speculative-ngram-max-bfs-breadth") == "1"  # a chain
    assert _flag(command, "--speculative-num-draft-tokens") == "4"
    assert ("--speculative-ngram-min-match-window-size" in command) == window
    if window:
        assert _flag(command, "--speculative-ngram-min-match-window-size") == "2"
        assert _flag(command, "--speculative-ngram-max-match-window-size") == "5"


@pytest.mark.parametrize("version", [None, "main-abc"])
def test_sglang_unknown_version_says_which_flags_are_assumed(monkeypatch, caplog, version):
    monkeypatch.setattr(launchers, "_installed_version", lambda package: version)
    with caplog.at_level("WARNING", logger=launchers.__name__):
        command = sglang_command(NGRAM_SPEC)
    assert "--speculative-ngram-min-match-window-size" not in command
    [record] = caplog.records
    message = record.getMessage()
    assert "\n" not in message and "assuming SGLang >= 0.5.10" in message
    assert "--speculative-ngram-max-bfs-breadth 1" in message


def test_sglang_baseline_has_no_speculative_flags():
    assert not any(a.startswith("--speculative") for a in sglang_command(LaunchSpec("sglang", "target")))


def test_specscope_command():
    command = command_for(
        LaunchSpec("specscope", "/m", method="draft", k=2, batch_size=4, draft="/d", port=1234)
    )
    assert command[1:4] == ["-m", "specscope", "serve"]
    assert _flag(command, "--method") == "draft" and _flag(command, "--draft") == "/d"
    assert _flag(command, "--max-batch-size") == "4" and _flag(command, "--host") == "127.0.0.1"
    baseline = command_for(LaunchSpec("specscope", "/m", k=2, batch_size=4, port=1234))
    assert _flag(baseline, "--method") == "none" and "--k" not in baseline  # serve refuses a k without SD


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"engine": "tgi"}, "engine"),
        ({"method": "medusa"}, "method"),
        ({"method": "eagle"}, "draft"),
        ({"k": 0}, "1 <= k"),
        ({"k": 10**6}, "k <= 64"),
        ({"engine": "specscope", "method": "mtp"}, "mtp.*head"),
        ({"prompt_lookup_min": 5, "prompt_lookup_max": 2}, "prompt_lookup"),
    ],
)
def test_bad_specs(kwargs, match):
    with pytest.raises(SpecscopeError, match=match):
        LaunchSpec(**{"engine": "vllm", "model": "m", **kwargs})


def test_mtp_needs_a_head_only_on_specscope():
    for engine in ("vllm", "sglang"):
        LaunchSpec(engine, "m", method="mtp")  # the target's own MTP layers
    assert command_for(LaunchSpec("specscope", "/m", method="mtp", draft="/head"))[-2:] == ["--draft", "/head"]


def test_methods_that_learn_across_requests():
    assert launchers.learns_across_requests("sglang", "ngram")
    assert launchers.learns_across_requests("vllm", "suffix")
    assert not launchers.learns_across_requests("vllm", "ngram")  # prompt lookup in the request itself
    assert not launchers.learns_across_requests("specscope", "ngram")
    assert launchers.learns_across_requests(None, "ngram")  # unknown engine: any engine's rule


def test_suffix_only_on_vllm():
    with pytest.raises(SpecscopeError, match="suffix"):
        sglang_command(LaunchSpec("sglang", "m", method="suffix"))


TREE = TreeShape.parse("2x2x1")
# vLLM's form: str() of the list of path tuples, breadth-first (vllm/config/speculative.py sorts
# ast.literal_eval(tree) by (len, path); tests/v1/spec_decode/test_eagle.py builds it with str())
TREE_2X2X1 = "[(0,), (1,), (0, 0), (0, 1), (1, 0), (1, 1), (0, 0, 0), (0, 1, 0), (1, 0, 0), (1, 1, 0)]"


@pytest.mark.parametrize("method", ["eagle", "eagle3"])
def test_vllm_tree(method):
    command = vllm_command(LaunchSpec("vllm", "target", method=method, k=3, draft="h", tree=TREE))
    config = _spec_config(command)
    assert config == {"method": method, "num_speculative_tokens": 10, "speculative_token_tree": TREE_2X2X1,
                      "model": "h"}
    tree = ast.literal_eval(config["speculative_token_tree"])
    assert str(sorted(tree, key=lambda t: (len(t), t))) == TREE_2X2X1  # vLLM's normalisation keeps it
    assert len(tree) == config["num_speculative_tokens"]  # vLLM's tests require the two to agree
    assert _flag(command, "--attention-backend") == "TREE_ATTN"  # else vLLM drafts a chain of 10


def test_vllm_chain_has_no_tree_backend():
    assert "--attention-backend" not in vllm_command(LaunchSpec("vllm", "t", method="eagle", draft="h"))


@pytest.mark.parametrize("engine, method, tree, match", [
    ("vllm", "draft", "2x2", r"^launch vllm: method 'draft' drafts no token trees there \(tree 2x2\)$"),
    ("vllm", "mtp", "2x2", "method 'mtp' drafts no token trees"),
    ("vllm", "ngram", "1x1", "method 'ngram' drafts no token trees"),
    ("sglang", "ngram", "2x1", "method 'ngram' drafts no token trees"),
    ("vllm", "none", "2x1", "method 'none' drafts no token trees"),
    ("vllm", "eagle", "[(0,), (1,), (0, 0)]", r"^launch vllm: tree paths:0;1;0\.0: vLLM drafts only full trees"),
    ("sglang", "eagle", "2x2x1", r"^launch sglang: tree 2x2x1: SGLang expands at most 2 nodes per depth .* 1/2/4 per depth$"),
    ("sglang", "eagle", "2x3", "at most 2 nodes per depth"),
])
def test_trees_an_engine_cannot_draft_are_refused(engine, method, tree, match):
    with pytest.raises(SpecscopeError, match=match):
        LaunchSpec(engine, "m", method=method, draft="d", tree=TreeShape.parse(tree))


@pytest.mark.parametrize("tree, topk, steps, draft_tokens", [
    ("2x1x1", 2, 3, 7),  # two beams, one child each per step
    ("3x3", 3, 2, 13),  # 3 + 9 nodes: every candidate of two steps, root counted
    ("4", 4, 1, 5),
    ("[(0,), (1,), (0, 0), (0, 1)]", 2, 2, 5),  # one of the two kept nodes expanded
])
def test_sglang_tree(tree, topk, steps, draft_tokens):
    command = sglang_command(LaunchSpec("sglang", "t", method="eagle3", draft="h", tree=TreeShape.parse(tree)))
    assert _flag(command, "--speculative-eagle-topk") == str(topk)
    assert _flag(command, "--speculative-num-steps") == str(steps)
    assert _flag(command, "--speculative-num-draft-tokens") == str(draft_tokens)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "specscope"])
def test_a_chain_tree_launches_like_k(engine):
    """``1x1x1`` is the chain of 3: the same flags as k = 3, apart from the tree's own keys."""
    as_k = command_for(LaunchSpec(engine, "t", method="eagle", k=3, draft="h"))
    as_tree = command_for(LaunchSpec(engine, "t", method="eagle", k=7, draft="h", tree=TreeShape.parse("1x1x1")))
    if engine == "vllm":
        config = _spec_config(as_tree)
        assert config.pop("speculative_token_tree") == "[(0,), (0, 0), (0, 0, 0)]"
        assert config == _spec_config(as_k)
    elif engine == "sglang":
        assert as_tree == as_k
    else:
        assert _flag(as_tree, "--tree") == "1x1x1" and "--k" not in as_tree and _flag(as_k, "--k") == "3"


@pytest.mark.parametrize("tree, arg", [("2x2x1", "2x2x1"), ("[(0,), (1,), (0, 0)]", "[(0,), (1,), (0, 0)]")])
def test_specscope_tree_argument_is_what_serve_parses(tree, arg):
    from specscope.cli import build_parser

    shape = TreeShape.parse(tree)
    command = command_for(LaunchSpec("specscope", "/m", method="draft", draft="/d", tree=shape))
    assert _flag(command, "--tree") == arg and "--k" not in command  # serve refuses --k with --tree
    assert build_parser().parse_args(command[3:]).tree == shape


STAND_IN = textwrap.dedent("""
    import signal, sys, time
    from http.server import BaseHTTPRequestHandler, HTTPServer
    mode, port = sys.argv[1], int(sys.argv[2])
    if mode == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if mode == "crash":
        print("loading weights... out of memory", flush=True)
        sys.exit(3)
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a): pass
        def do_GET(self):
            self.send_response(200 if mode != "unhealthy" else 503)
            self.send_header("Content-Length", "0")
            self.end_headers()
    time.sleep(0.3)
    HTTPServer(("127.0.0.1", port), H).serve_forever()
""")


@pytest.fixture
def stand_in(tmp_path):
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)

    def make(mode: str, **kwargs) -> ServerProcess:
        port = free_port()
        return ServerProcess(
            [sys.executable, str(script), mode, str(port)],
            f"http://127.0.0.1:{port}",
            tmp_path / f"{mode}.log",
            **kwargs,
        )

    return make


def test_waits_for_health_and_stops_with_sigterm(stand_in):
    server = stand_in("ok", health_timeout_s=20)
    with server:
        process = server.process
        assert process.poll() is None
    assert process.poll() is not None and process.returncode < 0  # killed by a signal


def test_sigkill_after_grace_when_sigterm_is_ignored(stand_in):
    server = stand_in("ignore-term", health_timeout_s=20, stop_grace_s=0.5)
    server.__enter__()
    process = server.process
    start = time.monotonic()
    server.stop()
    assert process.returncode == -9
    assert time.monotonic() - start < 5


def test_early_exit_is_reported_with_the_log(stand_in):
    with pytest.raises(LaunchError, match="status 3.*out of memory"), stand_in("crash", health_timeout_s=20):
        pass


def test_never_healthy_times_out_and_is_stopped(stand_in):
    server = stand_in("unhealthy", health_timeout_s=1.5)
    start = time.monotonic()
    with pytest.raises(LaunchError, match="not healthy after 1.5s"):
        server.__enter__()
    assert time.monotonic() - start < 10
    assert server.process is None  # stopped


def test_missing_executable(tmp_path):
    with pytest.raises(LaunchError, match="cannot start"):
        ServerProcess(["/nonexistent/vllm", "serve"], "http://127.0.0.1:1", tmp_path / "x.log").start()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_server_dies_with_a_killed_launcher(tmp_path):
    """A sweep killed with SIGKILL cannot stop its server; the kernel's parent-death signal does."""
    import os
    import signal
    import subprocess

    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    port = free_port()
    launcher = tmp_path / "launcher.py"
    launcher.write_text(
        textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from specscope.backends.openai.launchers import ServerProcess
        server = ServerProcess([sys.executable, {str(script)!r}, "ok", "{port}"], "http://127.0.0.1:{port}",
                               Path({str(tmp_path / "s.log")!r}), health_timeout_s=20)
        server.__enter__()
        print(server.process.pid, flush=True)
        time.sleep(60)
    """)
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    parent = subprocess.Popen([sys.executable, str(launcher)], stdout=subprocess.PIPE, text=True, env=env)
    child = int(parent.stdout.readline())
    parent.send_signal(signal.SIGKILL)
    parent.wait(10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        if Path(f"/proc/{child}/stat").read_text().split()[2] == "Z":  # exited, awaiting its reaper
            return
        time.sleep(0.05)
    os.kill(child, signal.SIGKILL)
    pytest.fail("the server outlived its killed launcher")


def test_a_tree_servers_per_position_counters_are_checked_against_what_it_shows():
    """The sweep checked a launched tree server's per-position counters against k = the tree's
    node count; specscope serve shows one per depth of the accepted path (every tree cell of a
    specscope engine failed its check), vLLM one per speculative token (its node count)."""
    tree = TreeShape.parse("2x1")  # 4 nodes, depth 2
    assert LaunchSpec("specscope", "target", method="eagle", draft="h", tree=tree).positions == 2
    assert LaunchSpec("vllm", "target", method="eagle", draft="h", tree=tree).positions == 4
    assert LaunchSpec("specscope", "target", method="eagle", k=3, draft="h").positions == 3


def test_a_log_folder_it_cannot_make_fails_the_launch_in_one_line(tmp_path):
    """A file where the servers' log folder goes was a 39-line FileExistsError traceback (without
    --ray; with it, a failed cell): a LaunchError, which fails the cell, said."""
    from specscope.backends.openai.launchers import LaunchError, ServerProcess

    (tmp_path / "logs").write_text("x")
    server = ServerProcess(["true"], "http://127.0.0.1:1", tmp_path / "logs" / "r.log")
    with pytest.raises(LaunchError, match=r"logs/r\.log: cannot write the server's log"):
        server.start()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_server_whose_launcher_died_before_it_could_ask_for_the_parent_death_signal_exits():
    """A launcher killed between the fork and the child's prctl (a Ray actor killed as it launched a
    server) sends no signal ever: the child found its parent gone and ran on, an orphan server. The
    child now checks its parent after asking, and exits where it is not the launcher."""
    import functools
    import os
    import subprocess

    from specscope.backends.openai.launchers import _die_with_parent

    gone = subprocess.run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=20,
                          preexec_fn=functools.partial(_die_with_parent, os.getpid() + 10**6))
    assert gone.returncode == 1  # not the launcher's child: it never ran the command
    kept = subprocess.run([sys.executable, "-c", "pass"], timeout=20, preexec_fn=functools.partial(_die_with_parent, os.getpid()))
    assert kept.returncode == 0
