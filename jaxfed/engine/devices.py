"""Devices and processes: the 1-D mesh trials are sharded over, the default memory budget, the
collectives that keep every process on process 0's plan, and the set-up before JAX starts: host
devices for every core (:func:`use_all_cores`) and a cluster scheduler's processes joined by
``jax.distributed`` (:func:`scheduler_processes`, :func:`start_distributed`)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, MutableMapping
from typing import NamedTuple

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh

from jaxfed import jaxcompat, validation
from jaxfed.store import StoreError

MEMORY_FRACTION = 0.25  # default budget: this fraction of the device's (or host's) memory


def make_mesh(devices: int | None = None) -> Mesh:
    """1-D mesh (axis ``"trials"``) over the devices the engine shards trials across.

    Args:
        devices: number of local devices per process (default: all). Under
            ``jax.distributed`` the mesh spans every process's devices.

    Raises:
        ValueError: more devices asked for than present (on CPU, more host devices need
            ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` before JAX starts; the
            ``--devices`` flag of the CLI sets it).
    """
    local = jax.local_devices()
    n = len(local) if devices is None else devices
    validation.integer(
        "devices",
        n,
        1,
        len(local),
        note=" (the local devices present; on CPU, XLA_FLAGS=--xla_force_host_platform_device_count=N "
        "creates N host devices)",
    )
    # The first n devices of every process, in process order.
    by_process = [[d for d in jax.devices() if d.process_index == p][:n] for p in range(jax.process_count())]
    chosen = [d for devs in by_process for d in devs]
    return Mesh(np.array(chosen), ("trials",))


def platform(mesh: Mesh | None) -> str:
    """The platform ("cpu", "gpu", …) of the mesh's devices, or of the default device without a mesh."""
    return (mesh.devices.flat[0] if mesh is not None else jax.devices()[0]).platform


def default_memory_budget(mesh: Mesh) -> int:
    """Bytes per device for one chunk: a quarter of the device's memory (host RAM on CPU)."""
    device = mesh.devices.flat[0]
    try:
        limit = device.memory_stats()["bytes_limit"]
    except (AttributeError, KeyError, TypeError, jax.errors.JaxRuntimeError):
        limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // max(1, len(jax.local_devices()))
    return int(MEMORY_FRACTION * limit)


def to_host(tree):
    """The chunk function's outputs (a pytree) as NumPy arrays on process 0, gathered from every process."""
    if jax.process_count() > 1:
        tree = multihost_utils.process_allgather(tree, tiled=True)
    return jax.tree.map(np.asarray, tree)


def broadcast_from_0(array: np.ndarray) -> np.ndarray:
    """Process 0's value of a small int64 array on every process (the work plan)."""
    if jax.process_count() == 1:
        return array
    n = multihost_utils.broadcast_one_to_all(np.int64(array.size))
    padded = np.zeros(int(n), np.int64)
    if jax.process_index() == 0:
        padded[:] = array.ravel()
    # A writable copy: the caller updates it (a summary run's per-point trial counts).
    return np.array(multihost_utils.broadcast_one_to_all(padded)).reshape(-1, *array.shape[1:])


def raise_on_every_process(refusal: StoreError | None) -> None:
    """Raises process 0's refusal of the store on every process: the others would otherwise wait
    for it in the next collective until JAX's heartbeat timeout."""
    if jax.process_count() > 1:
        refused = int(broadcast_from_0(np.asarray([refusal is not None], np.int64))[0])
        if refused and refusal is None:
            raise StoreError("process 0 refused the result directory (its error line names the file)")
    if refusal is not None:
        raise refusal


# --------------------------------------------------------------------------- before JAX starts
HOST_DEVICE_FLAG = "--xla_force_host_platform_device_count"
"""The XLA flag (in ``XLA_FLAGS``) that makes the CPU platform N host devices; read once, when JAX
initialises its backends."""


def backends_started() -> bool:
    """Whether JAX has initialised its backends (after which ``XLA_FLAGS`` and
    ``jax.distributed.initialize`` have no effect). JAX offers no public test of it: False where its
    private one is missing (:func:`jaxfed.jaxcompat.backends_started`)."""
    return jaxcompat.backends_started()


def host_devices_asked(flags: str) -> int | None:
    """The host device count ``flags`` (an ``XLA_FLAGS`` value) asks for (the last one given), or None."""
    found = re.findall(re.escape(HOST_DEVICE_FLAG) + r"=(\d+)", flags)
    return int(found[-1]) if found else None


def ask_host_devices(n: int, environ: MutableMapping[str, str] | None = None) -> None:
    """Adds ``HOST_DEVICE_FLAG=n`` to ``XLA_FLAGS`` (after any flags there; XLA takes the last).
    Affects only the CPU platform: on a GPU machine the GPUs stay the default devices."""
    environ = os.environ if environ is None else environ
    environ["XLA_FLAGS"] = f"{environ.get('XLA_FLAGS', '')} {HOST_DEVICE_FLAG}={n}".strip()


def usable_cores() -> int:
    """The CPU cores this process may run on: its affinity (a scheduler's or ``taskset``'s binding),
    else every core of the machine."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # (no affinity outside Linux)
        return os.cpu_count() or 1


def default_host_devices(environ: Mapping[str, str] | None = None) -> int:
    """Host devices that use every core this process may run on, one per core: the usable cores
    (:func:`usable_cores`), divided among the processes a scheduler started on this machine
    (:func:`scheduler_processes`) when they are not bound to cores of their own (their affinity is
    the whole machine)."""
    cores = usable_cores()
    cluster = scheduler_processes(os.environ if environ is None else environ)
    if cluster is not None and cluster.local > 1 and cores >= (os.cpu_count() or cores):
        cores //= cluster.local
    return max(1, cores)


def use_all_cores() -> int:
    """Makes the CPU platform one host device per core (:func:`default_host_devices`), so that
    :func:`jaxfed.engine.run` shards trials over every core; call it before anything uses JAX.

    ``import jaxfed`` never changes process-global XLA flags: a Python caller opts in with this
    function (``jaxfed run`` and ``jaxfed reproduce`` do it themselves unless ``--devices`` is
    given). It does nothing when ``XLA_FLAGS`` already holds ``HOST_DEVICE_FLAG`` (the user's
    choice stands). Results are bit-identical to one device's (a trial's values do not depend on
    the device count); only the speed changes.

    Returns:
        The host device count the CPU platform will have.

    Raises:
        RuntimeError: JAX has already initialised its backends (the flag would have no effect).
    """
    asked = host_devices_asked(os.environ.get("XLA_FLAGS", ""))
    if asked is not None:
        return asked
    if backends_started():
        raise RuntimeError(
            "use_all_cores() must run before JAX initialises its backends (before any array is made or "
            f"jax.devices() is called); or start Python with XLA_FLAGS={HOST_DEVICE_FLAG}={default_host_devices()}"
        )
    n = default_host_devices()
    ask_host_devices(n)
    return n


class SchedulerProcesses(NamedTuple):
    """Processes a cluster scheduler started for one run, read from its environment variables."""

    scheduler: str  # "slurm" or "ompi" (the names of jax._src.clusters' detectors)
    n_processes: int  # processes in the run
    process_id: int  # this process's index in [0, n_processes)
    local: int  # processes on this machine (this one included)
    detected_by_jax: bool  # JAX's own cluster detection finds the coordinator too


def scheduler_processes(environ: Mapping[str, str]) -> SchedulerProcesses | None:
    """The processes a scheduler started, when it started more than one: under SLURM a job step's
    tasks (``srun``: ``SLURM_JOB_ID``, ``SLURM_STEP_NODELIST``, ``SLURM_STEP_NUM_TASKS`` or
    ``SLURM_NTASKS`` > 1, ``SLURM_PROCID``, this node's count in ``SLURM_STEP_TASKS_PER_NODE``),
    under Open MPI the ranks of ``mpirun`` (``OMPI_COMM_WORLD_SIZE`` > 1, ``OMPI_COMM_WORLD_RANK``,
    ``OMPI_COMM_WORLD_LOCAL_SIZE``); None otherwise.

    A batch script itself (``sbatch``, no ``srun``) is one process although ``SLURM_NTASKS`` counts
    the allocation's tasks: it has no ``SLURM_STEP_NODELIST``, which JAX's detection needs too.
    Open MPI 5 sets no ``OMPI_MCA_orte_hnp_uri``, from which JAX's detection reads the coordinator
    (``detected_by_jax`` False: the coordinator must be given).
    """
    if "SLURM_JOB_ID" in environ and "SLURM_STEP_NODELIST" in environ:
        count = _int(environ.get("SLURM_STEP_NUM_TASKS") or environ.get("SLURM_NTASKS"))
        if count > 1:
            local = _tasks_on_node(environ.get("SLURM_STEP_TASKS_PER_NODE") or environ.get("SLURM_TASKS_PER_NODE"), _int(environ.get("SLURM_NODEID")))  # fmt: skip
            return SchedulerProcesses("slurm", count, _int(environ.get("SLURM_PROCID")), local, True)
    count = _int(environ.get("OMPI_COMM_WORLD_SIZE"))
    if count > 1:
        local = max(1, _int(environ.get("OMPI_COMM_WORLD_LOCAL_SIZE")))
        detected = "OMPI_MCA_orte_hnp_uri" in environ
        return SchedulerProcesses("ompi", count, _int(environ.get("OMPI_COMM_WORLD_RANK")), local, detected)
    return None


def _int(text: str | None) -> int:
    """A scheduler variable's integer; 0 when unset or not an integer."""
    try:
        return int(text or 0)
    except ValueError:
        return 0


def _tasks_on_node(per_node: str | None, node: int) -> int:
    """SLURM's tasks on node ``node`` from a tasks-per-node list such as ``2(x3),1``; 1 when unknown."""
    counts: list[int] = []
    for item in (per_node or "").split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", item.strip())
        if match is None:
            return 1
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts[node] if 0 <= node < len(counts) else 1


def start_distributed(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    timeout: float = 120,
) -> None:
    """``jax.distributed.initialize``: the values given, the rest found by JAX's own cluster
    detection (SLURM's ``srun``, Open MPI's ``mpirun``; see :func:`scheduler_processes`); call it
    before anything uses JAX. Under Open MPI 5 the process count and index come from its
    variables and the coordinator (process 0's ``host:port``) must be given.

    Args:
        coordinator: process 0's ``host:port`` (default: found by JAX).
        num_processes: how many processes take part (default: found).
        process_id: this process's index in [0, num_processes) (default: found).
        timeout: seconds to wait for the coordinator and the other processes.

    Raises:
        ValueError: no coordinator given and none that JAX can find.
    """
    cluster = scheduler_processes(os.environ)
    if cluster is not None and not cluster.detected_by_jax:
        num_processes = cluster.n_processes if num_processes is None else num_processes
        process_id = cluster.process_id if process_id is None else process_id
        if coordinator is None:
            raise ValueError(
                f"{cluster.scheduler}: {cluster.n_processes} processes, but JAX cannot find their coordinator from this "
                "scheduler's variables (Open MPI 5 sets no OMPI_MCA_orte_hnp_uri); give --coordinator HOST:PORT "
                "(process 0's host and a free port)"
            )
    jax.distributed.initialize(
        coordinator_address=coordinator,
        num_processes=num_processes,
        process_id=process_id,
        initialization_timeout=int(timeout),
    )


def check_joined(distributed: str) -> None:
    """Refuses (``distributed="auto"``) to run alone in one of a scheduler's processes: each would
    run the whole sweep and write the same results.

    Raises:
        ValueError: a scheduler started several processes but ``jax.distributed`` is not initialised.
    """
    cluster = scheduler_processes(os.environ)
    if distributed == "auto" and cluster is not None and jax.process_count() == 1:
        raise ValueError(
            f"this process is {cluster.process_id} of the {cluster.n_processes} that {cluster.scheduler} started, but "
            "jax.distributed is not initialised, so each would run the whole sweep: call "
            "jaxfed.engine.start_distributed() before anything uses JAX (jaxfed run does), or pass "
            "distributed='off' (--distributed off) to run every process on its own"
        )
