"""Non-coherent over-the-air computation (docs/kmeans.md §B3–B4): balanced-number codec and channel.

- :mod:`jaxfed.oac.balanced`: ``encode`` / ``decode`` of balanced base-β numerals;
- :mod:`jaxfed.oac.channel`: resource mapping, transmitter, the registry of channel models
  (``channel.register`` / ``get`` / ``names``; built in: Rayleigh ``explicit`` / ``aggregate``, and
  ``ideal``), energy detector and the entry point :func:`over_the_air_sum`;
- :mod:`jaxfed.oac.antennas`: M receive antennas with energy combining (``combining-2``,
  ``combining-4``), a model added through the registry;
- :mod:`jaxfed.oac.impairments`: channels the paper assumes away (``power-control``,
  ``rician-fading``, ``block-fading``), with the detector's derived mean and variance;
- :mod:`jaxfed.oac.aggregators`: aggregation back-ends as values (``ideal``, ``quantized``, ``oac``), and
  the registry of the k-means experiments' aggregation methods (``aggregators.register`` / ``get`` /
  ``names``);
- :mod:`jaxfed.oac.kmeans`: federated k-means rounds over these aggregation back-ends, adaptive
  v_max and re-initialisation, and Lloyd's algorithm.
"""

from jaxfed.oac import aggregators, antennas, balanced, channel, impairments, kmeans
from jaxfed.oac.balanced import decode, encode, max_level
from jaxfed.oac.channel import (
    MODES,
    ChannelModel,
    OverTheAirSum,
    n_resources,
    over_the_air_sum,
    resolve_channel,
    resource_index,
)

__all__ = [
    "aggregators",
    "antennas",
    "balanced",
    "channel",
    "impairments",
    "kmeans",
    "ChannelModel",
    "resolve_channel",
    "encode",
    "decode",
    "max_level",
    "MODES",
    "OverTheAirSum",
    "n_resources",
    "over_the_air_sum",
    "resource_index",
]
