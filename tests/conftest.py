import os

# Tests run on the CPU with the default float32; a test that needs float64 uses `jax.enable_x64`.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
