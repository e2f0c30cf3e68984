"""A run's shards as Dask tasks, with real processes (issue 46, parts 3 and 4): a scheduler and two
single-thread worker processes on localhost, started here; one worker SIGKILLed while it runs a
task; the run completes, and its merged metrics.npz equals a one-process `jaxfed run`'s byte for
byte, raw and summary."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time
from typing import NamedTuple

import distributed
import pytest
from support import SMALL, one_line_error, run_cli

from jaxfed.runs import distributed as on_dask

NAME = "gfvl-topologies"
SETS = SMALL[NAME]  # n_slots=20: a run of a few seconds
TRIALS = 640  # 10 blocks of 64 trials: the default 4 tasks per worker thread gives 8 tasks


class Cluster(NamedTuple):
    address: str
    client: distributed.Client
    workers: dict  # worker name -> its process
    scheduler: subprocess.Popen


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(args: list, log: pathlib.Path, cwd: pathlib.Path) -> subprocess.Popen:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    with open(log, "w") as out:
        return subprocess.Popen([sys.executable, "-m", *args], env=env, stdout=out, stderr=subprocess.STDOUT, cwd=cwd)


@pytest.fixture
def cluster(tmp_path, request):
    """A Dask scheduler and two worker processes of one thread each (no nanny: the process killed is
    the worker itself), started on localhost for the test and stopped after it; parametrized
    indirectly, the threads of each worker (``(2,)``: one worker of two threads)."""
    threads = getattr(request, "param", (1, 1))
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    scheduler = ["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"]
    processes = [_start(scheduler, tmp_path / "scheduler.log", tmp_path)]
    workers = {}
    for i, name in enumerate(("w0", "w1")[: len(threads)]):
        worker = [
            "distributed.cli.dask_worker",
            address,
            "--nthreads",
            str(threads[i]),
            "--nworkers",
            "1",
            "--no-nanny",
        ]
        worker += ["--no-dashboard", "--name", name, "--local-directory", str(tmp_path / name)]
        workers[name] = _start(worker, tmp_path / f"{name}.log", tmp_path)
        processes.append(workers[name])
    try:
        with distributed.Client(address, timeout=60) as client:
            client.wait_for_workers(len(threads), timeout=60)
            yield Cluster(address, client, workers, processes[0])
    finally:  # (the workers hold nothing to keep: killed; the scheduler stopped)
        for process in processes:
            process.send_signal(signal.SIGKILL if process is not processes[0] else signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def one_process(tmp_path, keep: str) -> bytes:
    """metrics.npz of ``jaxfed run`` in one process (a subprocess, as a user runs it)."""
    out = tmp_path / f"one-process-{keep}"
    sets = [arg for name, value in SETS.items() for arg in ("--set", f"{name}={value}")]
    done = run_cli("run", NAME, "--trials", str(TRIALS), *sets, "--keep", keep, "--out", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    return (out / "metrics.npz").read_bytes()


class KillBusyWorker:
    """``on_done`` hook: once a task has finished, SIGKILLs a worker that the scheduler says is
    running a task (at the first finished task where one is: tasks remain, checked), and records
    which worker and how many tasks were left."""

    def __init__(self, cluster: Cluster, client: distributed.Client):
        self.cluster, self.client, self.killed, self.left = cluster, client, None, None

    def __call__(self, index: int, finished: int, count: int) -> None:
        if self.killed is not None or finished == count:
            return
        client = self.client
        names = {address: worker["name"] for address, worker in client.scheduler_info()["workers"].items()}
        busy = sorted(names[address] for address, keys in client.processing().items() if keys)
        if busy:  # (else both workers are between tasks: the next finished task tries again)
            self.address = next(address for address, name in names.items() if name == busy[0])
            self.cluster.workers[busy[0]].send_signal(signal.SIGKILL)
            self.cluster.workers[busy[0]].wait()
            self.killed, self.left = busy[0], count - finished


def test_a_worker_killed_mid_run_changes_no_byte(cluster, tmp_path, capfd, caplog):  # ~20 s on 2 cores at load 7
    """Raw mode, the default task count (4 per worker thread: 8 tasks over 10 blocks): one worker
    is SIGKILLed while it runs a task; the scheduler gives its tasks to the other worker, which
    resumes them from their shard directories, and one warning line names the worker and the task
    rerun; the merge equals one process byte for byte."""
    kill = KillBusyWorker(cluster, cluster.client)
    out = tmp_path / "on-dask"
    with caplog.at_level("WARNING", logger="jaxfed"):
        returned = on_dask.run_on_dask(cluster.client, NAME, TRIALS, str(out), sets=SETS, keep="raw", on_done=kill)
    assert returned == str(out)
    assert kill.killed is not None and kill.left >= 1
    assert len(cluster.client.nthreads()) == 1  # the scheduler lost the killed worker
    told = [r.getMessage() for r in caplog.records if r.name == "jaxfed" and "was lost" in r.getMessage()]
    assert len(told) == 1, told  # one line for the lost worker
    assert re.fullmatch(
        rf"{NAME}: Dask worker {kill.address} was lost holding task\(s\) [1-8](, [1-8])* of 8; they are rerun on "
        r"the other workers, each resuming from its shard's finished chunks",
        told[0],
    ), told[0]
    assert not [r for r in caplog.records if "gather" in r.getMessage()]  # (a task's path is never fetched)
    shards = sorted(p.name for p in pathlib.Path(f"{out}.shards").iterdir())
    assert shards == [f"{i:05d}-of-00008" for i in range(8)]
    err = capfd.readouterr().err.splitlines()
    assert f"{NAME}: 2 Dask worker(s) of 2 thread(s) in all: 8 tasks -> {out}.shards" in err  # (the start line)
    lines = [line for line in err if line.startswith(f"{NAME}: task ")]
    assert len(lines) == 8 and lines[-1].startswith(f"{NAME}: task ") and "(8/8 finished" in lines[-1]
    assert (out / "metrics.npz").read_bytes() == one_process(tmp_path, "raw")


@pytest.mark.parametrize("cluster", [(2,)], indirect=True)
def test_a_worker_of_two_threads_runs_tasks_side_by_side(cluster, tmp_path, monkeypatch):
    """One worker process of two threads: two tasks (two engine runs) at once in one process, each
    compiling in its own thread on one compilation cache; the merge equals one process byte for
    byte. (Before the JAX seams were installed once per process, the second task wrapped the
    first's seam and waited on its own compile lock: the run hung.) The caller writes the report
    from the merged values it holds, never reading the result it has just written (issue 58, part 6)."""
    from jaxfed.store import rundir

    read: list = []
    real = rundir.load_results

    def load_results(*args, **kwargs):  # (counted when it read a result: a directory without one is refused)
        loaded = real(*args, **kwargs)
        read.append(args)
        return loaded

    monkeypatch.setattr(rundir, "load_results", load_results)
    out = tmp_path / "on-dask"
    on_dask.run_on_dask(cluster.client, NAME, TRIALS, str(out), sets=SETS, keep="raw", tasks=4, quiet=True)
    assert read == [] and (out / "report.md").is_file()
    assert cluster.client.nthreads() and list(cluster.client.nthreads().values()) == [2]
    assert (out / "metrics.npz").read_bytes() == one_process(tmp_path, "raw")


@pytest.mark.slow  # a cluster of its own and three runs: ~25 s on 2 cores at load 7
def test_summary_mode_through_an_address_with_a_kill(cluster, tmp_path):
    """Summary mode, the client made from a ``dask://`` address (and closed after the run), quiet; a
    worker killed mid-run; the merge equals one process byte for byte, and a rerun of the same call
    (one worker now: its default would be 4 tasks) takes the 8 tasks on disk, resumes the finished
    shards and writes the same bytes. The fixture's client stays open beside the run's own (Dask's
    ``as_completed`` takes the default client's event loop unless given one)."""
    kill = KillBusyWorker(cluster, cluster.client)
    out = tmp_path / "on-dask"
    address = "dask://" + cluster.address.removeprefix("tcp://")
    args = (NAME, TRIALS, str(out))
    on_dask.run_on_dask(address, *args, sets=SETS, keep="summary", quiet=True, on_done=kill)
    assert kill.killed is not None and kill.left >= 1
    merged = (out / "metrics.npz").read_bytes()
    assert merged == one_process(tmp_path, "summary")
    on_dask.run_on_dask(address, *args, sets=SETS, keep="summary", quiet=True)
    assert sorted(p.name for p in pathlib.Path(f"{out}.shards").iterdir()) == [f"{i:05d}-of-00008" for i in range(8)]
    assert (out / "metrics.npz").read_bytes() == merged


@pytest.mark.slow  # a cluster of its own and two runs: ~12 s on 2 cores at load 7
def test_the_command_line_runs_on_the_cluster(cluster, tmp_path):
    """``jaxfed run NAME --executor dask://HOST:PORT --tasks 3`` (a process of its own, with its own
    client): the merged run's metrics.npz equals one process's, and the report is written."""
    out = tmp_path / "on-dask"
    executor = "dask://" + cluster.address.removeprefix("tcp://")
    sets = [arg for name, value in SETS.items() for arg in ("--set", f"{name}={value}")]
    args = ["run", NAME, "--trials", str(TRIALS), *sets, "--keep", "raw", "--executor", executor, "--tasks", "3"]
    args += ["--wait-for-workers", "2"]
    done = run_cli(*args, "--out", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in pathlib.Path(f"{out}.shards").iterdir()) == [f"{i:05d}-of-00003" for i in range(3)]
    assert (out / "report.md").exists()
    assert (out / "metrics.npz").read_bytes() == one_process(tmp_path, "raw")


def test_the_scheduler_killed_mid_run_ends_the_command_in_one_line(cluster, tmp_path):
    """``jaxfed run --executor`` whose scheduler is SIGKILLed once a task has finished (40 tasks,
    most left): exit status 2 and one line, no traceback, saying how many shards are stored (as
    many as the finished shard directories) and that the same command resumes."""
    out = tmp_path / "on-dask"
    executor = "dask://" + cluster.address.removeprefix("tcp://")
    sets = [arg for name, value in SETS.items() for arg in ("--set", f"{name}={value}")]
    args = ["run", NAME, "--trials", str(4 * TRIALS), *sets, "--executor", executor, "--tasks", "40", "--out", str(out)]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    command = [sys.executable, "-m", "jaxfed.cli", *args]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as process:
        said = []
        for line in process.stderr:
            said.append(line.rstrip("\n"))
            if line.startswith(f"{NAME}: task "):
                cluster.scheduler.send_signal(signal.SIGKILL)
                cluster.scheduler.wait()
                break
        said += process.stderr.read().splitlines()
        assert process.wait(timeout=120) == 2
    assert not any("Traceback" in line for line in said), "\n".join(said)
    last = said[-1]
    match = re.fullmatch(
        rf"jaxfed: error: tcp://127\.0\.0\.1:\d+: the Dask scheduler was lost mid-run; (\d+) of 40 shards are stored "
        rf"in {re.escape(str(out))}\.shards \(the others keep their finished chunks\); rerun the same command to "
        r"resume from them",
        last,
    )
    assert match is not None, "\n".join(said)
    finished = sum((p / "config.json").exists() for p in pathlib.Path(f"{out}.shards").iterdir())
    assert 1 <= int(match.group(1)) <= finished < 40
    assert [line for line in said if line.startswith("jaxfed")] == [last]  # (the task lines, then this one)


@pytest.mark.slow  # a cluster of its own: ~8 s
def test_a_failing_task_raises_its_error_after_its_retries(cluster, tmp_path):
    """A task that fails on its worker (its shard directory cannot be made: OUT.shards is a file) is
    retried by Dask, then its error reaches the caller; nothing is merged."""
    out = tmp_path / "on-dask"
    pathlib.Path(f"{out}.shards").write_text("not a directory")
    with pytest.raises(ValueError, match=r"on-dask.shards/0000[01]-of-00002: cannot be used as a result directory"):
        on_dask.run_on_dask(cluster.client, NAME, TRIALS, str(out), sets=SETS, tasks=2, retries=1, quiet=True)
    assert not out.exists()


# --------------------------------------------------------------------------- without processes
def test_without_dask_the_error_is_one_line_naming_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "distributed", None)  # (import distributed then raises ImportError)
    with pytest.raises(ImportError) as error:
        on_dask.run_on_dask("dask://127.0.0.1:1", NAME, TRIALS, str(tmp_path / "out"))
    assert str(error.value) == on_dask.MISSING_EXTRA and '".[dask]"' in str(error.value)
    assert len(str(error.value).splitlines()) == 1


def test_importing_jaxfed_and_the_module_does_not_load_dask():
    code = "import sys, jaxfed, jaxfed.runs.distributed; print('distributed' in sys.modules, 'dask' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]


class FakeClient:
    """A ``distributed.Client``'s ``nthreads`` and ``wait_for_workers``: when waited for, a worker of
    two threads joins."""

    def __init__(self, threads: list[int]):
        self.threads = threads

    def nthreads(self) -> dict:
        return {f"tcp://w{i}": n for i, n in enumerate(self.threads)}

    def wait_for_workers(self, n_workers: int) -> None:
        self.threads = [2] if not self.threads else self.threads + [1] * max(0, n_workers - len(self.threads))


@pytest.mark.parametrize(
    ("threads", "n_trials", "expected"),
    [([1, 1], 640, 8), ([1, 1], 100, 2), ([4, 4, 4], 100_000, 48), ([1], 1, 1), ([], 10_000, 8)],
    ids=["two-workers", "few-blocks", "many-threads", "one-trial", "no-worker-yet"],
)
def test_default_task_count(tmp_path, threads, n_trials, expected):
    """4 tasks per worker thread, at most one per 64-trial block (waiting for a first worker when
    there is none)."""
    assert on_dask.default_tasks(FakeClient(threads), n_trials, str(tmp_path / "none")) == expected


def test_the_task_count_is_taken_after_the_workers_asked_for(tmp_path):
    """A cluster still starting (one worker of 8 asked for has joined): without ``wait_for_workers``
    the run is cut for the one worker present; with it, for the 8 (4 tasks per thread); ``tasks``
    as given, after the wait."""
    root = str(tmp_path / "none")
    assert on_dask.task_count(FakeClient([1]), 100_000, root, None, None) == 4
    assert on_dask.task_count(FakeClient([1]), 100_000, root, None, 8) == 32
    waited = FakeClient([1])
    assert on_dask.task_count(waited, 100_000, root, 5, 8) == 5 and len(waited.threads) == 8
    with pytest.raises(ValueError, match="wait_for_workers must be a positive number of workers, got 0"):
        on_dask.task_count(FakeClient([1]), 100_000, root, None, 0)


def test_a_rerun_keeps_the_task_count_on_disk(tmp_path):
    root = tmp_path / "run.shards"
    for i in range(3):
        (root / on_dask.shard_dir("x", i, 3).split("/", 1)[1]).mkdir(parents=True)
    assert on_dask.existing_count(str(root)) == 3
    assert on_dask.default_tasks(FakeClient([1, 1]), 640, str(root)) == 3
    (root / "00000-of-00004").mkdir()
    assert on_dask.existing_count(str(root)) is None  # two counts: the default again
    assert on_dask.existing_count(str(tmp_path / "nothing")) is None


@pytest.mark.parametrize(
    ("name", "sets", "tasks", "message"),
    [
        ("no-such-experiment", {}, 2, "unknown experiment 'no-such-experiment'"),
        (NAME, {"no_such_field": "1"}, 2, "unknown parameter 'no_such_field'"),
        (NAME, SETS, 11, "tasks must be from 1 to 10 for 640 trials"),
        (NAME, SETS, 0, "tasks must be from 1 to 10"),
    ],
    ids=["experiment", "parameter", "too-many-tasks", "no-task"],
)
def test_what_every_task_would_refuse_is_refused_before_submitting(tmp_path, name, sets, tasks, message):
    """The client has no ``submit``: a refusal comes before any task is submitted."""
    with pytest.raises(ValueError, match=message):
        on_dask.run_on_dask(FakeClient([1, 1]), name, TRIALS, str(tmp_path / "out"), sets=sets, tasks=tasks)


def test_addresses_and_user_files():
    assert on_dask.scheduler_address("dask://node7:8786") == "tcp://node7:8786"
    assert on_dask.scheduler_address("tls://node7:8786") == "tls://node7:8786"
    assert on_dask.scheduler_address("dask://[::1]:8786") == "tcp://[::1]:8786"
    name, imports = on_dask._absolute_user_files("mine/exp.py:MINE", ["chan.py"])
    assert name == os.path.abspath("mine/exp.py") + ":MINE" and imports == (os.path.abspath("chan.py"),)
    assert on_dask._absolute_user_files("gfvl-topologies", ()) == ("gfvl-topologies", ())


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("dask://127.0.0.1:abc", "the port must be an integer from 1 to 65535, got 'abc'"),
        ("dask://127.0.0.1:99999", "the port must be an integer from 1 to 65535, got '99999'"),
        ("dask://127.0.0.1", "a host and a port are needed"),
        ("dask://:8786", "a host and a port are needed"),
        ("127.0.0.1:8786", "expected dask://HOST:PORT"),
        ("http://127.0.0.1:8786", "expected dask://HOST:PORT"),
    ],
    ids=["port-text", "port-too-big", "no-port", "no-host", "no-scheme", "other-scheme"],
)
def test_a_bad_executor_address_is_refused_at_once_in_one_line(capsys, address, message):
    """Before anything is looked up, computed or connected (the port 99999 waited 30 s for Dask's
    connect timeout; ``abc`` gave Python's ``int()`` error)."""
    start = time.perf_counter()
    err = one_line_error(capsys, ["run", NAME, "--trials", "64", "--executor", address, "--out", "/nonexistent/x"])
    assert err.startswith(f"jaxfed: error: scheduler address {address!r}: ") and message in err
    assert time.perf_counter() - start < 5
    with pytest.raises(ValueError, match=re.escape(message)):
        on_dask.run_on_dask(address, NAME, 64, "/nonexistent/x")


def test_wait_for_workers_goes_with_an_executor(capsys):
    err = one_line_error(capsys, ["run", NAME, "--trials", "64", "--wait-for-workers", "4", "--out", "/nonexistent/x"])
    assert (
        err
        == "jaxfed: error: --wait-for-workers N goes with --executor dask://HOST:PORT (the workers of that scheduler)"
    )


def test_no_scheduler_at_the_address_is_one_line(tmp_path):
    """A port where nothing listens: a ConnectionError of one line naming the address (after Dask's
    connect timeout, here 1 s)."""
    import dask

    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        with pytest.raises(ConnectionError) as error:
            on_dask.run_on_dask(f"dask://127.0.0.1:{free_port()}", NAME, TRIALS, str(tmp_path / "out"), quiet=True)
    assert len(str(error.value).splitlines()) == 1
    assert re.match(r"tcp://127\.0\.0\.1:\d+: no Dask scheduler answered there \(", str(error.value)), error.value


def test_a_worker_builds_a_call_once_and_compiles_its_program_once(tmp_path, monkeypatch):
    """The tasks of one call that a worker process runs one after another take the sweep it built
    for the first, so the engine's kept program serves them (one chunk function made, for the
    first); another call builds anew. The shards merge to the one-process bytes."""
    from jaxfed.engine import compiled

    made: list = []
    real = compiled.make_chunk_fn
    monkeypatch.setattr(compiled, "make_chunk_fn", lambda *a, **k: made.append(a[2]) or real(*a, **k))
    compiled._KEPT.clear()
    shards = [str(tmp_path / f"s{i}") for i in range(3)]
    for i, shard in enumerate(shards):
        on_dask._shard_task(NAME, TRIALS, i, 3, shard, SETS, 0, "raw", (), "call-1")
    assert len(made) == 1
    first = on_dask._built("call-1", NAME, SETS, ())
    assert on_dask._built("call-1", NAME, SETS, ()) is first
    assert on_dask._built("call-2", NAME, SETS, ())[3] is not first[3]
    out = tmp_path / "merged"
    on_dask.sharding.merge(shards, str(out))
    assert (out / "metrics.npz").read_bytes() == one_process(tmp_path, "raw")
