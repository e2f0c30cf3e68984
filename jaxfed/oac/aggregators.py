"""Aggregation back-ends as values (docs/kmeans.md §B2; adding one: §B7): how the edge
server (ES) obtains Σ_k v_k from the values v_k (K, Q) of the active edge devices (EDs).

An :class:`Aggregator` is a pair of functions; the factories build the paper's three:

- :func:`ideal`: the exact sum (an error-free channel carrying real numbers);
- :func:`quantized`: the balanced-number codec of docs/kmeans.md §B3 without a channel, the exact sum
  of the quantised values;
- :func:`oac`: non-coherent over-the-air computation through a registered channel model
  (:func:`jaxfed.oac.over_the_air_sum`, docs/kmeans.md §B4).

Static: what a factory's arguments fix in the code, β, D and the channel (Python values, closed
over). Traced: the SNR and E_s (closed over too, so build the aggregator inside the traced function
to sweep them with ``vmap``), and the round's key, values, active mask and v_max (arguments).

A user-made aggregator is any ``Aggregator(aggregate, quantize)`` with the signatures below; the
k-means round (:func:`jaxfed.oac.kmeans.federated_round`, through ``Settings.aggregator``) needs nothing
else. A *named* one joins the k-means experiments' methods (a sweep label's ``method``, beside
``"centralized"``) through the registry: :func:`register`, :func:`get`, :func:`names`
(:mod:`jaxfed.registry`); the built-in methods ``"ideal"``, ``"quantized"`` and ``"oac"`` are
registered the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxfed import validation
from jaxfed.oac import balanced
from jaxfed.oac import channel as _channel
from jaxfed.registry import Registry

__all__ = ["Aggregator", "ideal", "quantized", "oac", "Method", "register", "get", "names"]


class Aggregator(NamedTuple):
    """An aggregation back-end.

    ``aggregate(key, values, active, vmax) -> (Q,)``: the ES's estimate of Σ_k values[k] over the
    active EDs, from values (K, Q), a (K,) bool mask, the round's v_max (a traced scalar; 0 when
    ``quantize`` is None) and a PRNG key for the channel's draws.
    ``quantize(values, vmax) -> (K, Q)``: the values as the EDs' codec represents them, or None
    for a back-end that sends them exactly and needs no v_max (the round then computes none).
    """

    aggregate: Callable[..., jax.Array]
    quantize: Callable[..., jax.Array] | None = None


def ideal() -> Aggregator:
    """Exact sums Σ_k v_k (inactive EDs hold zeros).

    Returns:
        The aggregator, an :class:`Aggregator` whose ``aggregate(key, values (K, Q), active (K,), vmax)``
            is the (Q,) exact sum.
    """
    return Aggregator(lambda key, values, active, vmax: jnp.sum(values, axis=0))


def _quantizer(beta: int, digits: int):
    """v ↦ (v_max/ξ)(n − ξ), the value the codec of β, D represents (docs/kmeans.md §B3)."""
    beta, digits = balanced.check_base(beta, digits)
    return lambda values, vmax: balanced.quantize(values, beta, digits, vmax)


def quantized(beta: int, digits: int) -> Aggregator:
    """Σ_{k active} Q(v_k): the exact sum of the quantised values (the codec without a channel).

    Args:
        beta: base β, odd int >= 3 (static).
        digits: D >= 1 (static).

    Returns:
        The aggregator, an :class:`Aggregator` whose ``aggregate(key, values (K, Q), active (K,), vmax)``
            is the (Q,) sum of the active EDs' quantised values.

    Raises:
        ValueError: a bad β or D.
    """
    quantize = _quantizer(beta, digits)

    def aggregate(key, values, active, vmax):
        decoded = quantize(values, vmax)
        return jnp.sum(jnp.where(active[:, None], decoded, 0.0), axis=0)

    return Aggregator(aggregate, quantize)


def oac(channel, beta: int, digits: int, snr_db, symbol_energy=None) -> Aggregator:
    """Over-the-air computation: v̂_q = (v_max/ξ) Σ_d β^d Σ_j s_j K̂_{q,d,j} through the channel model
    ``channel`` (:func:`jaxfed.oac.over_the_air_sum`).

    Args:
        channel: a registered channel's name (:func:`jaxfed.oac.channels`), ``"NAME:key=value,…"``
            or a :class:`~jaxfed.oac.channel.ChannelModel` (its parameters may be traced or per ED).
        beta: base β, odd int >= 3 (static).
        digits: D >= 1 (static).
        snr_db: SNR of one ED at the ES in dB (traced scalar; ignored by a noise-free channel).
        symbol_energy: E_s (traced); None: β (docs/kmeans.md §B4 [choice]).

    Returns:
        The aggregator, an :class:`Aggregator` whose ``aggregate(key, values (K, Q), active (K,), vmax)``
            is the (Q,) estimate.

    Raises:
        ValueError: for an unregistered channel, a bad β or D, or a concrete SNR or E_s that
            :func:`jaxfed.oac.over_the_air_sum` would reject.
    """
    quantize = _quantizer(beta, digits)
    channel = _channel.resolve_channel(channel)
    if channel.noisy:
        _channel._check_snr_db(snr_db)
    if symbol_energy is not None:
        validation.positive("symbol_energy", symbol_energy)

    def aggregate(key, values, active, vmax):
        return _channel.over_the_air_sum(
            key, values, beta, digits, vmax, snr_db, channel, active=active, symbol_energy=symbol_energy
        ).estimate

    return Aggregator(aggregate, quantize)


# --------------------------------------------------------------------------- named methods
class Method(NamedTuple):
    """A named aggregation method of the k-means experiments (:func:`register`).

    ``build(beta, digits, snr_db, symbol_energy, channel) -> Aggregator``: the back-end of a point
    (β and D static; the SNR in dB and E_s traced scalars; ``channel`` the point's
    :class:`~jaxfed.oac.channel.ChannelModel`), built inside the trial. ``label(lab) -> str``: the
    legend text of a sweep label. ``over_channel``: the back-end sends through ``channel``, so the
    channel's variance formula predicts its error (the ``centroid_noise_pred`` diagnostic; 0 for
    other methods) and a ``channel_sweep`` repeats its points.
    """

    build: Callable[..., Aggregator]
    label: Callable[[dict], str]
    over_channel: bool = False


_METHODS: Registry[Method] = Registry("aggregation method")


def register(name: str, build: Callable[..., Aggregator], label=None, over_channel: bool = False) -> Method:
    """Registers the k-means aggregation method ``name`` (see :class:`Method`; ``label`` None: the
    name) and returns it; a sweep label ``{"method": name, "digits": D, "snr_db": ...}`` then runs it.

    Args:
        name: the method's name.
        build: ``build(beta, digits, snr_db, symbol_energy, channel) -> Aggregator``.
        label: ``label(label dict) -> str`` for plots and tables, or None (the name).
        over_channel: whether the method goes through a channel (an SNR and a channel apply).

    Returns:
        The registered :class:`Method`.

    Raises:
        ValueError: ``build`` or ``label`` is not callable.

    Examples:
        >>> names(), get("quantized").label({"digits": 2})
        (('ideal', 'quantized', 'oac'), 'quantisation only D=2')
    """
    validation.check("build", build, callable(build), "a function (beta, digits, snr_db, symbol_energy, channel)")
    validation.check("label", label, label is None or callable(label), "a function (label dict) -> str, or None")
    return _METHODS.register(name, Method(build, label or (lambda lab: name), bool(over_channel)))


def get(name: str) -> Method:
    """The aggregation method called ``name``; ValueError listing the registered ones otherwise.

    Args:
        name: a registered method's name.

    Returns:
        The method, a :class:`Method`.

    Raises:
        ValueError: no method is registered as ``name``.
    """
    return _METHODS.get(name)


def names() -> tuple[str, ...]:
    """The registered aggregation methods' names, built-ins first.

    Returns:
        A tuple of names.
    """
    return _METHODS.names()


register("ideal", lambda beta, digits, snr_db, symbol_energy, channel: ideal(), lambda lab: "ideal federated")
register(
    "quantized",
    lambda beta, digits, snr_db, symbol_energy, channel: quantized(beta, digits),
    lambda lab: f"quantisation only D={lab['digits']}",
)
register(
    "oac",
    lambda beta, digits, snr_db, symbol_energy, channel: oac(channel, beta, digits, snr_db, symbol_energy),
    lambda lab: f"OAC D={lab['digits']} {lab['snr_db']:g} dB",
    over_channel=True,
)
