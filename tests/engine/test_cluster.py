"""Clusters without flags (issue 24, parts 5 and 7): the processes a scheduler started (SLURM's
srun, Open MPI's mpirun) are found from its variables and joined by jax.distributed, the explicit
options win, and on a CPU every usable core is a host device by default; results are the same bit
for bit."""

import json
import os
import socket
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

from jaxfed import cli, engine
from jaxfed.engine import devices

SMALL = ["run", "gfvl-topologies", "--trials", "300", "--chunk-size", "128", "--set", "n_slots=60", "--quiet"]


def slurm_step(task: int, tasks: int = 2, per_node: str = "2", node: int = 0) -> dict:
    """The variables srun sets for task ``task`` of a job step of ``tasks`` tasks on one node
    (those JAX's SlurmCluster reads, and the step's task counts)."""
    return {
        "SLURM_JOB_ID": "4242",
        "SLURM_NTASKS": str(tasks),
        "SLURM_STEP_NUM_TASKS": str(tasks),
        "SLURM_STEP_NODELIST": "localhost",
        "SLURM_STEP_TASKS_PER_NODE": per_node,
        "SLURM_NODEID": str(node),
        "SLURM_PROCID": str(task),
        "SLURM_LOCALID": str(task),
    }


def open_mpi_rank(rank: int, size: int = 2, with_uri: bool = True) -> dict:
    """The variables mpirun (Open MPI 4, with its ORTE URI) sets for ``rank`` of ``size`` on one host."""
    env = {
        "OMPI_COMM_WORLD_SIZE": str(size),
        "OMPI_COMM_WORLD_RANK": str(rank),
        "OMPI_COMM_WORLD_LOCAL_RANK": str(rank),
        "OMPI_COMM_WORLD_LOCAL_SIZE": str(size),
    }
    if with_uri:
        env["OMPI_MCA_orte_hnp_uri"] = "1531576320.0;tcp://127.0.0.1:34911"
    return env


# --------------------------------------------------------------------------- reading the scheduler
@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),
        (slurm_step(1), devices.SchedulerProcesses("slurm", 2, 1, 2, True)),
        (slurm_step(5, tasks=8, per_node="2(x3),2", node=3), devices.SchedulerProcesses("slurm", 8, 5, 2, True)),
        (slurm_step(0, tasks=3, per_node="2,1", node=1), devices.SchedulerProcesses("slurm", 3, 0, 1, True)),
        (slurm_step(0, tasks=1, per_node="1"), None),  # one task: nothing to join
        (open_mpi_rank(1), devices.SchedulerProcesses("ompi", 2, 1, 2, True)),
        (open_mpi_rank(0, with_uri=False), devices.SchedulerProcesses("ompi", 2, 0, 2, False)),  # Open MPI 5
        ({"OMPI_COMM_WORLD_SIZE": "1", "OMPI_COMM_WORLD_RANK": "0"}, None),
    ],
    ids=["none", "slurm", "slurm-nodes", "slurm-uneven", "slurm-one", "ompi", "ompi5", "ompi-one"],
)
def test_scheduler_processes_are_read_from_the_schedulers_variables(environ, expected):
    assert devices.scheduler_processes(environ) == expected


def test_a_batch_script_without_srun_is_one_process():
    """sbatch's own shell counts the allocation's tasks (SLURM_NTASKS=4) but is one process: no step
    node list, so nothing is joined (JAX's detection needs the step's node list too)."""
    batch = {k: v for k, v in slurm_step(0, tasks=4).items() if not k.startswith("SLURM_STEP_")}
    assert devices.scheduler_processes(batch) is None


def test_host_devices_flag_and_the_default_count(monkeypatch):
    flag = devices.HOST_DEVICE_FLAG
    assert devices.host_devices_asked("") is None
    assert devices.host_devices_asked(f"--xla_cpu_x=1 {flag}=3 {flag}=5") == 5  # XLA takes the last
    cores = devices.usable_cores()
    assert 1 <= cores <= (os.cpu_count() or 1)
    monkeypatch.setattr(devices.os, "sched_getaffinity", lambda pid: set(range(os.cpu_count() or 1)))
    assert devices.default_host_devices({}) == (os.cpu_count() or 1)
    # processes that share an unbound machine share its cores; bound ones keep their own
    assert devices.default_host_devices(slurm_step(0, tasks=2)) == max(1, (os.cpu_count() or 1) // 2)
    monkeypatch.setattr(devices.os, "cpu_count", lambda: 64)
    monkeypatch.setattr(devices.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert devices.default_host_devices(slurm_step(0, tasks=2)) == 4


def test_use_all_cores_respects_the_users_flag_and_refuses_after_jax_started(monkeypatch):
    jnp.zeros(1)  # JAX's backends are started in this process
    monkeypatch.setenv("XLA_FLAGS", f"{devices.HOST_DEVICE_FLAG}=3")
    assert engine.use_all_cores() == 3
    monkeypatch.setenv("XLA_FLAGS", "")
    with pytest.raises(RuntimeError, match="before JAX initialises its backends"):
        engine.use_all_cores()
    assert os.environ["XLA_FLAGS"] == ""


# --------------------------------------------------------------------------- the command line
@pytest.fixture
def no_scheduler(monkeypatch):
    """This process's environment without any scheduler's variables."""
    for name in list(os.environ):
        if name.startswith(("SLURM_", "OMPI_", "JAXFED_")):
            monkeypatch.delenv(name)


@pytest.fixture
def joined(monkeypatch, no_scheduler):
    """The calls of devices.start_distributed the command line makes (nothing is started)."""
    calls: list = []
    monkeypatch.setattr(devices, "start_distributed", lambda *args, **kw: calls.append(args))
    return calls


@pytest.fixture
def start(capsys):
    """``jaxfed run x ARGV`` through the command's entry point: the processes are set up, then the
    command stops at the unknown experiment ``x``; a refusal of the set-up raises its ValueError."""

    def run_x(*argv):
        assert cli.main(["run", "x", *argv]) == 2
        err = capsys.readouterr().err
        if "unknown experiment 'x'" not in err:
            raise ValueError(err)

    return run_x


def test_the_command_line_joins_a_schedulers_processes_and_the_given_options_win(monkeypatch, joined, start):
    start()
    assert joined == []  # no scheduler: one process
    for name, value in slurm_step(1).items():
        monkeypatch.setenv(name, value)
    start()
    assert joined[-1] == (None, None, None)  # all found by JAX's SlurmCluster
    start("--coordinator", "10.0.0.1:1234", "--num-processes", "2")
    assert joined[-1] == ("10.0.0.1:1234", 2, None)  # given values win, the rest found
    n = len(joined)
    start("--distributed", "off")
    start("--num-processes", "1")
    assert len(joined) == n  # off, or one process asked for: nothing joined


def test_processes_started_by_hand_still_need_the_coordinator_and_index(joined, start):
    with pytest.raises(ValueError, match="needs --coordinator host:port and --process-id"):
        start("--num-processes", "2")
    start("--num-processes", "2", "--coordinator", "127.0.0.1:1", "--process-id", "1")
    assert joined == [("127.0.0.1:1", 2, 1)]


def test_open_mpi_5_without_a_coordinator_is_one_line(monkeypatch, no_scheduler):
    for name, value in open_mpi_rank(0, with_uri=False).items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=r"ompi: 2 processes, but JAX cannot find their coordinator.*--coordinator"):
        devices.start_distributed(None, None, None)


def test_the_engine_refuses_to_run_alone_in_one_of_a_schedulers_processes(monkeypatch, joined):
    for name, value in slurm_step(0).items():
        monkeypatch.setenv(name, value)

    def walk(key, point):
        return {"x": jnp.cumsum(jnp.ones(3) * point["scale"])}

    points = [{"scale": jnp.float32(1.0)}]
    with pytest.raises(ValueError, match=r"process is 0 of the 2 that slurm started.*distributed='off'"):
        engine.run(walk, points, 4)
    out = engine.run(walk, points, 4, distributed="off")
    np.testing.assert_array_equal(out["x"][0, 0], [1, 2, 3])


# --------------------------------------------------------------------------- two processes, no flags
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(args: list, out, env: dict | None = None) -> subprocess.Popen:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "JAXFED_"))}
    return subprocess.Popen(
        [sys.executable, "-m", "jaxfed.cli", *args, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**clean, **(env or {})},
    )


def _finished(procs: list) -> None:
    outputs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outputs):
        if p.returncode != 0 and "collective" in err.lower() and "not" in err.lower():
            pytest.skip(f"this jaxlib cannot run CPU collectives across processes: {err.strip().splitlines()[-1]}")
        assert p.returncode == 0, err


def _metrics(out) -> dict:
    with np.load(out / "metrics.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    out = tmp_path_factory.mktemp("one") / "run"
    _finished([_run([*SMALL, "--keep", "summary"], out)])
    return out


@pytest.mark.slow  # two processes joined over loopback: ~10 s
@pytest.mark.parametrize("scheduler", ["slurm", "ompi"])
def test_processes_a_scheduler_started_are_joined_without_flags(one_process, tmp_path, scheduler):
    """Two processes with srun's (or mpirun's) variables and no process flags: JAX's own detection
    finds the coordinator, the count and each index, and the summary equals one process's bit for
    bit. JAX_COORDINATOR_PORT (JAX's own variable) gives a free port instead of the job's."""
    port = _free_port()
    variables = slurm_step if scheduler == "slurm" else open_mpi_rank
    out = tmp_path / "two"
    _finished(
        [
            _run([*SMALL, "--keep", "summary"], out, {**variables(i), "JAX_COORDINATOR_PORT": str(port)})
            for i in range(2)
        ]
    )
    record = json.loads((out / "config.json").read_text())["engine"]
    # two processes that share this machine, not bound to cores of their own: one host device each
    assert record["processes"] == 2 and record["devices"] == 2 * max(1, devices.usable_cores() // 2)
    a, b = _metrics(one_process), _metrics(out)
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].tobytes() == b[name].tobytes(), name
