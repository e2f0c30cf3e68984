"""What benchmarks and tests reach inside the engine for: the bare chunk function (the kernel a
benchmark times against ``engine.run``), the mesh, the micro-batch widths, the memory budget and
the compilation-cache switches. Not part of the public API (no ``__all__``, not in the API
reference): these follow the engine's internals and may change with them."""

from jaxfed.engine.cache import compilation_cache_dir as compilation_cache_dir
from jaxfed.engine.cache import use_compilation_cache as use_compilation_cache
from jaxfed.engine.devices import default_memory_budget as default_memory_budget
from jaxfed.engine.devices import make_mesh as make_mesh
from jaxfed.engine.sizing import MICRO_BATCH as MICRO_BATCH
from jaxfed.engine.sizing import chunk_function as chunk_function
from jaxfed.engine.sizing import micro_batch_width as micro_batch_width
