"""The dask-jobqueue recipe of docs/clusters.md (issue 58, part 2), built as the page writes it: the
page's own code block runs here up to ``cluster.scale`` (nothing is submitted: no SLURM is needed),
with the user's two choices, the shared path and the network interface, set to this machine's; the
job script it generates sets the shared compilation cache, binds the workers to the interface and
points them at a scheduler listening on that interface's address, 8 workers of one thread a job."""

from __future__ import annotations

import pathlib
import re

import pytest
from dask_jobqueue import SLURMCluster

ROOT = pathlib.Path(__file__).resolve().parents[2]
SECTION = "### Dask, with dask-jobqueue"


def recipe() -> str:
    """The first Python code block of the page's dask-jobqueue section."""
    text = (ROOT / "docs" / "clusters.md").read_text()
    section = text[text.index(SECTION) :]
    return re.search(r"^```python\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL).group(1)


def until_submission(code: str, shared: str, interface: str) -> str:
    """The recipe up to ``cluster.scale`` (which would submit jobs), with ``SHARED`` and
    ``INTERFACE`` given; each must be set once in the recipe."""
    code = code[: code.index("cluster.scale(")]
    for name, value in (("SHARED", shared), ("INTERFACE", interface)):
        code, n = re.subn(rf"^{name} = .*$", f"{name} = {value!r}", code, flags=re.MULTILINE)
        assert n == 1, f"the recipe sets {name} once"
    return code


@pytest.fixture
def recipe_cluster(tmp_path):
    """The recipe's SLURMCluster on the loopback interface (its scheduler started here, no job)."""
    names: dict = {}
    exec(compile(until_submission(recipe(), str(tmp_path / "shared"), "lo"), "docs/clusters.md", "exec"), names)
    cluster = names["cluster"]
    try:
        yield cluster, names
    finally:
        cluster.close()


def test_the_recipe_runs_on_dask_after_waiting_for_every_worker():
    code = recipe()
    assert "client.wait_for_workers(JOBS * WORKERS_PER_JOB)" in code
    assert code.index("client.wait_for_workers(") < code.index("run_on_dask(client")
    assert "cluster.scale(jobs=JOBS)" in code


def test_the_job_script_sets_the_shared_cache_and_binds_the_interface(recipe_cluster, tmp_path):
    cluster, names = recipe_cluster
    assert isinstance(cluster, SLURMCluster)
    script = cluster.job_script()
    lines = script.splitlines()
    cache = f"export JAXFED_COMPILATION_CACHE={tmp_path / 'shared'}/jaxfed-xla-cache"
    worker = next(line for line in lines if "distributed.cli.dask_worker" in line)
    assert cache in lines and lines.index(cache) < lines.index(worker)  # (set before the workers start)
    assert cluster.scheduler_address == "tcp://127.0.0.1:" + cluster.scheduler_address.rsplit(":", 1)[1]
    assert f" {cluster.scheduler_address} " in worker  # (the scheduler listens on the interface's address)
    assert re.search(r"--interface lo(\s|$)", worker) and "--no-dashboard" in worker
    assert "--nthreads 1" in worker and "--nworkers 8" in worker
    assert "#SBATCH --cpus-per-task=8" in lines and "#SBATCH -t 02:00:00" in lines
    assert names["JOBS"] * names["WORKERS_PER_JOB"] == 200
