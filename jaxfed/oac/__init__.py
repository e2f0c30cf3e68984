"""Non-coherent over-the-air computation (docs/kmeans.md §B3–B4): balanced-number codec and channel.

- :mod:`jaxfed.oac.balanced`: ``encode`` / ``decode`` of balanced base-β numerals;
- :mod:`jaxfed.oac.channel`: resource mapping, transmitter, Rayleigh superposition
  (``explicit`` / ``aggregate`` / ``ideal``), energy detector and the entry point
  :func:`over_the_air_sum`.
"""

from jaxfed.oac import balanced, channel
from jaxfed.oac.balanced import decode, encode, max_level
from jaxfed.oac.channel import MODES, OverTheAirSum, n_resources, over_the_air_sum, resource_index

__all__ = [
    "balanced",
    "channel",
    "encode",
    "decode",
    "max_level",
    "MODES",
    "OverTheAirSum",
    "n_resources",
    "over_the_air_sum",
    "resource_index",
]
