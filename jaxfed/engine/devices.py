"""Devices and processes: the 1-D mesh trials are sharded over, the default memory budget, and
the collectives that keep every process on process 0's plan."""

from __future__ import annotations

import os

import jax
import numpy as np
from jax.sharding import Mesh

from jaxfed import validation
from jaxfed.store import StoreError

MICRO_BATCH = {"cpu": 512, "gpu": 16384, "tpu": 16384}
"""Trials per micro-batch, by platform: every trial is computed in a micro-batch of one point ×
this many trials (see :func:`jaxfed.engine.compiled.batched_metrics`), and a device's share of a
chunk is a multiple of it. It enters the compiled shape of a trial, so it is part of a stored
run's identity."""

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


def micro_batch_width(mesh: Mesh | None) -> int:
    """The micro-batch width (trials) on the mesh's platform (:data:`MICRO_BATCH`)."""
    return MICRO_BATCH.get(platform(mesh), MICRO_BATCH["gpu"])


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
        from jax.experimental import multihost_utils

        tree = multihost_utils.process_allgather(tree, tiled=True)
    return jax.tree.map(np.asarray, tree)


def broadcast_from_0(array: np.ndarray) -> np.ndarray:
    """Process 0's value of a small int64 array on every process (the work plan)."""
    if jax.process_count() == 1:
        return array
    from jax.experimental import multihost_utils

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
