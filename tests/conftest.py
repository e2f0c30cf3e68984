import atexit
import os
import shutil
import tempfile

# Tests run on the CPU with the default float32; a test that needs float64 uses
# `jaxfed.jaxcompat.enable_x64` (`jax.enable_x64` is new in JAX 0.8).
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The `jaxfed run` subprocesses keep one host device: pytest already runs a worker per core, and
# several host devices per process would only share those cores. The every-core default has its
# own tests, which set or clear XLA_FLAGS themselves (test_determinism, test_cluster).
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=1")
# A fresh compilation cache per test session: tests neither read nor fill the user's cache, and the
# suite's time is that of a first run.
if "JAXFED_COMPILATION_CACHE" not in os.environ:
    os.environ["JAXFED_COMPILATION_CACHE"] = tempfile.mkdtemp(prefix="jaxfed-test-xla-")
    atexit.register(shutil.rmtree, os.environ["JAXFED_COMPILATION_CACHE"], ignore_errors=True)


import functools  # noqa: E402 (the environment above must be set before JAX starts)

import pytest  # noqa: E402

from jaxfed import engine  # noqa: E402


@pytest.fixture
def unjitted(monkeypatch):
    """``engine.run`` op by op (``use_jit=False``): for tests of the result directory's bookkeeping,
    which would otherwise compile a program per test."""
    monkeypatch.setattr(engine, "run", functools.partial(engine.run, use_jit=False))
