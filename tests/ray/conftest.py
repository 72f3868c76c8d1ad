"""A real two-node Ray cluster on this machine for the Ray tests: a head with custom resource
``nodeA`` and a second node with ``nodeB``, one CPU each, started with ``ray start --block`` in
sessions of their own and stopped by those sessions' PIDs (never ``ray stop``, which would stop
every Ray process on the machine)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from specscope.backends.openai.launchers import free_port

ray = pytest.importorskip("ray")

ZOO = Path(__file__).resolve().parents[2] / "src" / "specscope" / "data" / "zoo"
WORKLOADS = ZOO.parent / "workloads"
START_TIMEOUT_S = 90


def session_pids(sids: set[int]) -> list[int]:
    """Processes whose session is one of ``sids`` (the ``ray start`` sessions started here)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) in sids:
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def actor_pids(sids: set[int], title: str) -> list[int]:
    """Processes of those sessions whose title starts with ``title`` (Ray names an actor's
    process ``ray::Class.method`` while it runs a call)."""
    found = []
    for pid in session_pids(sids):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(title.encode()):
                found.append(pid)
        except OSError:
            pass
    return found


@dataclass
class Cluster:
    address: str
    sids: set[int]
    nodes: dict[str, str]  # custom resource (nodeA, nodeB) -> Ray node id


def _start(args: list[str], temp_dir: str, log_name: str) -> subprocess.Popen:
    ports = ["--dashboard-agent-listen-port", str(free_port()), "--dashboard-agent-grpc-port", str(free_port()),
             "--runtime-env-agent-port", str(free_port()), "--metrics-export-port", str(free_port())]
    command = ["ray", "start", *args, "--num-cpus", "1", "--object-store-memory", str(100 * 2**20), "--block",
               "--disable-usage-stats", "--node-ip-address", "127.0.0.1", *ports]
    with open(Path(temp_dir) / log_name, "wb") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def _stop(processes: list[subprocess.Popen]) -> None:
    sids = {p.pid for p in processes}
    for process in processes:
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and session_pids(sids):
        time.sleep(0.2)
    for pid in session_pids(sids):  # what did not stop in time
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for process in processes:
        process.wait(10)


@pytest.fixture(scope="session")
def ray_cluster():
    """The cluster, with this test process connected to it as a driver. Token authentication is
    off for it (nodes, this driver and the CLI drivers the tests start), so that a token left in
    ~/.ray by an earlier ``--ray local`` run on this machine does not matter."""
    saved = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    try:
        yield from _cluster()
    finally:
        if saved is None:
            del os.environ["RAY_AUTH_MODE"]
        else:
            os.environ["RAY_AUTH_MODE"] = saved


def _cluster():
    temp_dir = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray puts Unix sockets under it
    port = free_port()
    address = f"127.0.0.1:{port}"
    processes = [_start(["--head", "--port", str(port), "--temp-dir", temp_dir, "--include-dashboard", "false",
                         "--resources", json.dumps({"nodeA": 1})], temp_dir, "head.log")]
    try:
        time.sleep(1)
        processes.append(_start(["--address", address, "--resources", json.dumps({"nodeB": 1})], temp_dir,
                                 "node.log"))
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                ray.init(address=address, log_to_driver=False)
                break
            except ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        while len([n for n in ray.nodes() if n["Alive"]]) < 2:
            assert time.monotonic() < deadline, "the second Ray node did not join"
            time.sleep(0.5)
        nodes = {name: n["NodeID"] for n in ray.nodes() if n["Alive"] for name in ("nodeA", "nodeB")
                 if name in n["Resources"]}
        yield Cluster(address, {p.pid for p in processes}, nodes)
    finally:
        ray.shutdown()
        _stop(processes)


def write_sweep(folder: Path, engines: str, extra: str = "") -> Path:
    """A sweep of specscope servers on the bundled target model over two bundled workloads."""
    path = folder / "sweep.toml"
    path.write_text(
        f'output = "out"\nworkloads = ["{WORKLOADS / "chat.jsonl"}", "{WORKLOADS / "code.jsonl"}"]\n'
        'methods = ["none", "ngram"]\nk = [2]\nbatch_sizes = [2]\nmax_tokens = 16\nignore_eos = true\n'
        f"num_requests = 4\nlaunch_timeout_s = 120\n{extra}{engines}"
    )
    return path


def engine(name: str, resources: dict[str, int] | None = None) -> str:
    table = (f'\n[[engines]]\nname = "{name}"\nlaunch = "specscope"\nmodel = "{ZOO / "target"}"\n'
             'args = ["--threads", "1"]\n')
    if resources:
        table += "resources = { " + ", ".join(f'{k} = {v}' for k, v in resources.items()) + " }\n"
    return table
