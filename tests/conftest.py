import atexit
import os
import shutil
import tempfile

# Tests run on the CPU with the default float32; a test that needs float64 uses `jax.enable_x64`.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# A fresh compilation cache per test session: tests neither read nor fill the user's cache, and the
# suite's time is that of a first run.
if "JAXFED_COMPILATION_CACHE" not in os.environ:
    os.environ["JAXFED_COMPILATION_CACHE"] = tempfile.mkdtemp(prefix="jaxfed-test-xla-")
    atexit.register(shutil.rmtree, os.environ["JAXFED_COMPILATION_CACHE"], ignore_errors=True)
