"""The package's version, in a module of its own so that every module may import it (the package
root imports every layer) and packaging reads it from here (pyproject.toml)."""

__version__ = "0.1.0"
