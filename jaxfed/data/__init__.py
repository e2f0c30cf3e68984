"""Data sets shipped with jaxfed, each with its source and licence in a file next to it."""
