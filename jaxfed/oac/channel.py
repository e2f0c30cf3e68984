"""Non-coherent over-the-air computation of a sum (docs/kmeans.md §B4): resources, channel, energy detector.

K edge devices (EDs) each hold Q real values; the edge server (ES) wants Σ_k values[k, q].
Each ED encodes value q into D balanced numerals (:mod:`jaxfed.oac.balanced`) and, for digit d,
activates the one of β resources whose numeral value s_j = j − (β−1)/2 equals its numeral:

    resource l = β D q + β d + j,        L = Q β D resources per round, whatever K;
    x_{k,l} = √E_s · r_{k,l} · 1[η_{k,q,d} = s_j],   r a uniform random QPSK symbol;
    y_l = Σ_k h_{k,l} x_{k,l} + w_l,      h ~ CN(0, 1) i.i.d. (Rayleigh), w ~ CN(0, σ²), σ² = 1/SNR.

The ES detects energies and decodes linearly:

    K̂_l = (|y_l|² − σ²)/E_s,   σ̂_{q,d} = Σ_j s_j K̂_{q,d,j},   v̂_q = (v_max/ξ) Σ_d β^d σ̂_{q,d}.

**[choice] symbol energy** (docs/kmeans.md §B4): amplitude √E_s with E_s = β by default, i.e. energy β on
the active resource and unit average energy per resource. The document names E_s = √β; pass
``symbol_energy`` to use another value (the transmitter and the detector use the same one).

Channel models live in a registry (:func:`register`, :func:`get`, :func:`names`; :mod:`jaxfed.registry`):
each is a :class:`ChannelModel`, a function with one signature that turns the numerals into the
resources' received energies, with the detector that reads the counts back. The built-in ones
(:data:`MODES`):

- ``"explicit"``: the per-ED reference. Only the active resource of each (k, q, d) carries
  energy, so one fading coefficient and one QPSK symbol are drawn per (k, q, d) (the fading of
  silent resources multiplies zero) and superposed on their resources; O(K Q D) random numbers.
- ``"aggregate"``: given the count K_l of EDs active on l, y_l ~ CN(0, E_s K_l + σ²) exactly for
  i.i.d. Rayleigh fading, so |y_l|² = (E_s K_l + σ²)·Exp(1): one random number per resource.
- ``"ideal"``: no fading and no noise, |y_l|² = E_s K_l: the estimate is exactly the sum of the
  quantised values (isolates the quantisation error). ``snr_db`` is ignored.

A new model is registered, not added here: ``oac.channel.register("name", energy_fn, ...)`` from any
module (docs/kmeans.md, "Adding a channel"); :mod:`jaxfed.oac.antennas` is one built that way.

Static: β, D, the channel and the shapes (K, Q). Traced: the key, the values, v_max, ``snr_db``,
``symbol_energy`` and the ``active`` mask, so a grid of SNRs or keys is a ``vmap``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxfed import validation
from jaxfed.oac.balanced import check_base, encode
from jaxfed.oac.physical import (
    SUPERPOSITIONS,
    activation,
    aggregate_energy,
    detect,
    estimate_sum,
    explicit_energy,
    n_resources,
    noise_variance,
    numeral_values,
    qpsk,
    rayleigh_count_variance,
    resource_counts,
    resource_index,
)
from jaxfed.registry import Registry

__all__ = [
    "MODES",
    "ChannelModel",
    "register",
    "get",
    "names",
    "resolve_channel",
    "rayleigh_count_variance",
    "SNR_DB_RANGE",
    "OverTheAirSum",
    "n_resources",
    "resource_index",
    "activation",
    "noise_variance",
    "qpsk",
    "aggregate_energy",
    "SUPERPOSITIONS",
    "detect",
    "estimate_sum",
    "estimate_variance",
    "over_the_air_sum",
]

MODES = ("explicit", "aggregate", "ideal")  # the built-in channel models
# Concrete `snr_db` values outside this range are rejected as a likely linear SNR (a linear 1000
# is 30 dB); +inf is accepted and means no noise.
SNR_DB_RANGE = (-100.0, 100.0)


class OverTheAirSum(NamedTuple):
    """Result of one over-the-air round."""

    estimate: jax.Array  # (Q,) float: v̂_q, the ES's estimate of Σ_k values[k, q]
    energy: jax.Array  # (L,) float, L = QβD: received energy |y_l|² on resource l = βDq + βd + j


# --------------------------------------------------------------------------- the channel registry
class ChannelModel(NamedTuple):
    """A channel model: how the resources' energies arise, and how the ES reads the counts back.

    ``energy(key, numerals, beta, noise_var, symbol_energy, active) -> (L,)`` received energies:
    numerals (K, Q, D) int from :func:`jaxfed.oac.balanced.encode`, β static, σ² and E_s traced
    scalars (their float dtype sets the precision), ``active`` a (K,) bool mask of transmitting
    EDs or None (all), resources in the order l = βDq + βd + j (:func:`resource_index`).
    ``detect(energy, noise_var, symbol_energy) -> (L,)`` unbiased estimates K̂_l of the counts.
    ``variance(counts, noise_var, symbol_energy)``: Var K̂_l given K_l (elementwise), or None when
    the model has no formula. ``noisy``: False for a noise-free model, which gets σ² = 0 and whose
    SNR is neither used nor checked.
    """

    energy: Callable[..., jax.Array]
    detect: Callable[..., jax.Array] = detect
    variance: Callable[..., jax.Array] | None = rayleigh_count_variance
    noisy: bool = True
    # The model's parameters with their values, passed to energy, and to detect and variance unless
    # they are the built-in ones, as keyword arguments (a model without parameters gets none). Values may be traced, and arrays: a (K,)
    # array is per ED (e.g. residual power-control gains), so a sweep over a parameter is a vmap.
    params: Mapping[str, Any] = MappingProxyType({})
    # check(**params): raises a one-line ValueError naming a parameter whose value is not allowed
    # (e.g. validation.non_negative("k_factor", k_factor)); called by with_params with every
    # parameter, traced ones included (the validation functions pass those through). None: no check.
    check: Callable[..., Any] | None = None
    # per_trial(key, n_devices, **params) -> {parameter: value}: state drawn once per trial and kept
    # for every round (e.g. per-ED residual gains, a (K,) array), set on the model by the k-means
    # trial layer from a key of its own stream; None: no per-trial state.
    per_trial: Callable[..., Mapping[str, Any]] | None = None

    def with_params(self, **values) -> ChannelModel:
        """The same model with some parameters set (each must be one of ``params``; the model's
        ``check`` refuses a value it does not allow).

        Args:
            **values: parameter name -> value (may be traced).

        Returns:
            A new :class:`ChannelModel`.

        Raises:
            ValueError: a name that is not a parameter, or a value the model's ``check`` refuses.
        """
        for key in values:
            validation.check("channel parameter", key, key in self.params, f"one of {sorted(self.params)}")
        params = {**self.params, **values}
        if self.check is not None:
            self.check(**params)
        return self._replace(params=MappingProxyType(params))

    def received_energy(self, key, numerals, beta, noise_var, symbol_energy, active) -> jax.Array:
        """``energy(...)``, checked once where it is traced: (L,) = (β·D·Q,) real floating values,
        else a one-line ValueError naming the function and its file (a complex or integer result
        used to surface as a JAX traceback, or as NaN in every trial).

        Args:
            key: a PRNG key (traced).
            numerals: (K, Q, D) int numerals of each ED's values.
            beta: base β (static).
            noise_var: σ² (traced).
            symbol_energy: E_s (traced).
            active: (K,) bool, the EDs that transmit.

        Returns:
            (L,) = (β·D·Q,) real received energies.

        Raises:
            ValueError: the model's ``energy`` returned another shape or a non-real dtype.
        """
        out = self.energy(key, numerals, beta, noise_var, symbol_energy, active, **self.params)
        _, n_values, digits = numerals.shape
        shape, dtype = getattr(out, "shape", None), getattr(out, "dtype", None)
        if shape != (beta * digits * n_values,) or dtype is None or not jnp.issubdtype(dtype, jnp.floating):
            code = getattr(self.energy, "__code__", None)
            where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
            name = getattr(self.energy, "__qualname__", repr(self.energy))
            raise ValueError(
                f"channel energy {name}{where} returned {dtype}{list(shape) if shape is not None else ''}, expected "
                f"real floating energies of shape ({beta * digits * n_values},) (L = beta*D*Q resources)"
            )
        return out

    def check_output(self, name: str, n_devices: int = 2, beta: int = 3) -> None:
        """Runs ``energy`` once, concretely, at zero noise on a small example (``n_devices`` EDs, one
        value of one numeral each, every ED active; per-trial state drawn when the model has some):
        a one-line ValueError naming the channel ``name`` and its function's file when the result is
        not (β,) real floating values, or not finite: a channel that returns NaN or ±inf without
        noise would make every over-the-air trial NaN, far from its cause. A model that cannot run on
        its registered parameters alone (a hook sets them per trial) is checked where it is traced.

        Args:
            name: the channel's name, for the message.
            n_devices: number of EDs of the example.
            beta: base β of the example.

        Raises:
            ValueError: the energy is not (β,) real floating values, or not finite.
        """
        key = jax.random.key(0)
        model = self
        if self.per_trial is not None:
            model = self.with_params(**self.per_trial(jax.random.fold_in(key, 1), n_devices, **self.params))
        numerals = jnp.ones((n_devices, 1, 1), jnp.int32)
        active = jnp.ones((n_devices,), bool)
        try:
            out = model.energy(key, numerals, beta, jnp.float32(0.0), jnp.float32(1.0), active, **model.params)
        except Exception:  # noqa: BLE001  (its parameters are given per trial by a hook: checked where traced)
            return
        out = model.received_energy(key, numerals, beta, jnp.float32(0.0), jnp.float32(1.0), active)
        if not bool(jnp.all(jnp.isfinite(out))):
            code = getattr(self.energy, "__code__", None)
            where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
            raise ValueError(
                f"channel {name!r}: its energy function{where} returned non-finite values at zero noise "
                f"({[float(x) for x in jnp.ravel(out)[:4]]}); every over-the-air trial would be NaN"
            )

    def detected_counts(self, energy, noise_var, symbol_energy) -> jax.Array:
        """The model's detector: K̂_l = ``detect(energy, noise_var, symbol_energy, **params)``.

        Args:
            energy: (L,) received energies.
            noise_var: σ² (traced).
            symbol_energy: E_s (traced).

        Returns:
            (L,) estimated counts K̂_l.
        """
        params = {} if self.detect is detect else self.params  # the built-in detector takes none
        return self.detect(energy, noise_var, symbol_energy, **params)

    def count_variance(self, counts, noise_var, symbol_energy) -> jax.Array:
        """The model's ``variance(counts, noise_var, symbol_energy, **params)`` (it must have one).

        Args:
            counts: (L,) counts K_l.
            noise_var: σ² (traced).
            symbol_energy: E_s (traced).

        Returns:
            (L,) Var K̂_l given K_l.
        """
        assert self.variance is not None
        params = {} if self.variance is rayleigh_count_variance else self.params  # (as the detector)
        return self.variance(counts, noise_var, symbol_energy, **params)


_CHANNELS: Registry[ChannelModel] = Registry("channel")


def register(
    name: str,
    energy,
    detect=detect,
    variance=rayleigh_count_variance,
    noisy: bool = True,
    params=None,
    check=None,
    per_trial=None,
) -> ChannelModel:
    """Registers a channel model under ``name`` (see :class:`ChannelModel` for the signatures) and
    returns it; the name then works wherever a channel is named (:func:`over_the_air_sum`,
    :func:`jaxfed.oac.aggregators.oac`, the k-means experiments' ``channel`` parameter).

    The defaults are the Rayleigh energy detector and its variance: a model that changes the law
    of |y_l|² passes its own ``variance`` (or None). Registering a name again replaces its model.
    ``params`` ({name: default}) makes a family of channels: the functions take the parameters as
    keyword arguments, and ``"NAME:key=value,…"`` (:func:`resolve_channel`) or
    ``get(NAME).with_params(key=value)`` sets them; a parameter may be traced, so it can
    be swept like the SNR. ``check(**params)`` (optional) raises a ValueError for a value a
    parameter may not take; it runs whenever parameters are set, and once on the defaults.
    ``per_trial(key, n_devices, **params) -> {parameter: value}`` (optional) draws state once per
    trial (per-ED gains, a (K,) array), which the k-means experiments set on the model before the
    rounds (:func:`jaxfed.experiments.kmeans.trials.make_trial`), so that a built-in experiment takes
    such a channel by name (``--set channel=NAME``).

    Args:
        name: the channel's name, a non-empty string.
        energy: ``energy(key, numerals, beta, noise_var, symbol_energy, active, **params) -> (L,)``.
        detect: ``detect(energy, noise_var, symbol_energy, **params) -> (L,)``.
        variance: ``variance(counts, noise_var, symbol_energy, **params) -> (L,)``, or None.
        noisy: whether the channel adds noise (an SNR applies).
        params: {parameter: default}, or None.
        check: ``check(**params)`` raising ValueError for a bad value, or None.
        per_trial: ``per_trial(key, n_devices, **params) -> {parameter: value}``, or None.

    Returns:
        The registered :class:`ChannelModel`.

    Raises:
        ValueError: a bad ``name`` or a non-callable hook, or defaults ``check`` refuses.

    Examples:
        >>> import jax, jax.numpy as jnp
        >>> from jaxfed import oac
        >>> def no_fading(key, numerals, beta, noise_var, symbol_energy, active):
        ...     counts = oac.channel.resource_counts(numerals, beta, active).astype(jnp.float32)
        ...     noise = jax.random.exponential(key, counts.shape) * noise_var  # |w_l|², w ~ CN(0, σ²)
        ...     return symbol_energy * counts + noise  # mean E_s K_l + σ²
        >>> _ = oac.channel.register("line-of-sight", no_fading, variance=None)
        >>> out = oac.over_the_air_sum(jax.random.key(0), jnp.ones((4, 2)), 3, 2, 4.0, 60.0, "line-of-sight")
        >>> [round(float(v), 3) for v in out.estimate]
        [4.0, 4.0]
    """
    validation.check("name", name, isinstance(name, str) and bool(name), "a non-empty string (the channel's name)")
    validation.check("energy", energy, callable(energy), "a function")
    validation.check("detect", detect, callable(detect), "a function")
    validation.check("variance", variance, variance is None or callable(variance), "a function or None")
    validation.check("params", params, params is None or isinstance(params, Mapping), "a dict {name: default}")
    validation.check("check", check, check is None or callable(check), "a function or None")
    validation.check("per_trial", per_trial, per_trial is None or callable(per_trial), "a function or None")
    model = ChannelModel(energy, detect, variance, bool(noisy), MappingProxyType(dict(params or {})), check, per_trial)
    if check is not None:
        check(**model.params)
    return _CHANNELS.register(name, model)


def get(name: str) -> ChannelModel:
    """The registered model called ``name``; ValueError listing the registered names otherwise
    (the one place channel names are validated).

    Args:
        name: a registered channel's name.

    Returns:
        The model, a :class:`ChannelModel`.

    Raises:
        ValueError: no channel is registered as ``name``.
    """
    return _CHANNELS.get(name)


def resolve_channel(channel) -> ChannelModel:
    """A channel given as a :class:`ChannelModel` (returned as it is), a registered name, or
    ``"NAME:key=value,key=value"`` (a registered model with those parameters, as floats).

    Args:
        channel: a :class:`ChannelModel`, a registered name or ``"NAME:key=value,…"``.

    Returns:
        The model, a :class:`ChannelModel`.

    Raises:
        ValueError: an unregistered name, a malformed setting, or a value the model refuses.

    Examples:
        >>> resolve_channel("aggregate").params
        mappingproxy({})
    """
    if isinstance(channel, ChannelModel):
        return channel
    validation.check(
        "channel", channel, isinstance(channel, str), "a registered name, 'NAME:key=value' or a ChannelModel"
    )
    name, _, settings = channel.partition(":")
    model = get(name)
    values = {}
    for item in filter(None, settings.split(",")):
        key, sep, text = item.partition("=")
        validation.check("channel", channel, bool(sep and key), "NAME:key=value[,key=value…]")
        try:
            values[key.strip()] = float(text)
        except ValueError:
            validation.fail(f"channel parameter {key.strip()}", text, "a number")
    return model.with_params(**values)


def names() -> tuple[str, ...]:
    """Names of the registered channel models, built-ins (:data:`MODES`) first.

    Returns:
        A tuple of names.
    """
    return _CHANNELS.names()


def _explicit(key, numerals, beta, noise_var, symbol_energy, active):
    return explicit_energy(key, numerals, beta, noise_var, symbol_energy, active)


def _aggregate(key, numerals, beta, noise_var, symbol_energy, active):
    return aggregate_energy(key, resource_counts(numerals, beta, active), noise_var, symbol_energy)


def _ideal(key, numerals, beta, noise_var, symbol_energy, active):
    """|y_l|² = E_s K_l: no fading, no noise."""
    return symbol_energy * resource_counts(numerals, beta, active).astype(jnp.result_type(symbol_energy))


register("explicit", _explicit)
register("aggregate", _aggregate)
register("ideal", _ideal, variance=lambda counts, noise_var, symbol_energy: jnp.zeros_like(counts), noisy=False)


def _in_snr_range(snr_db):
    """True for an SNR within :data:`SNR_DB_RANGE` or +inf (False for NaN)."""
    low, high = SNR_DB_RANGE
    return ((snr_db >= low) & (snr_db <= high)) | (snr_db == jnp.inf)


def _check_snr_db(snr_db) -> None:
    validation.shape("snr_db", snr_db, (), "() (a scalar in dB; vmap over a grid of SNRs)")
    if validation.is_traced(snr_db):
        return
    value = float(snr_db)
    low, high = SNR_DB_RANGE
    allowed = f"in decibels within [{low}, {high}] or +inf (no noise; a linear SNR s is 10*log10(s) dB)"
    validation.check("snr_db", value, low <= value <= high or value == math.inf, allowed)


def estimate_variance(
    counts, beta: int, digits: int, vmax, noise_var, symbol_energy, mode: str = "aggregate"
) -> jax.Array:
    """Variance of the estimate v̂_q given the counts K_l, under the channel ``mode``:

        Var(v̂_q) = (v_max/ξ)² Σ_d β^{2d} Σ_j s_j² Var K̂_{q,d,j},

    with Var K̂_l = (K_l + σ²/E_s)² for Rayleigh fading (:func:`rayleigh_count_variance`). Its
    K_{q,d,j}² part is the fading's self-noise: it does not shrink with the SNR, so the estimate
    keeps a variance of at least (v_max/ξ)² Σ_d β^{2d} Σ_j s_j² K_{q,d,j}² at any SNR.

    Args:
        counts: (..., L) counts K_l in the order l = βDq + βd + j.
        beta, digits: β and D (static).
        vmax: v_max, scalar or (Q,).
        noise_var: σ² (0 for the noise-free limit).
        symbol_energy: E_s.
        mode: a channel (:func:`resolve_channel`: a name, ``"NAME:key=value"`` or a
            :class:`ChannelModel`) whose model states its detector's variance.

    Returns:
        (..., Q) variances.

    Raises:
        ValueError: for a channel that is not registered or registered without a variance.
    """
    beta, digits = check_base(beta, digits)
    model = resolve_channel(mode)
    if model.variance is None:
        validation.fail("channel", mode, "a channel registered with a variance formula")
    counts = jnp.asarray(counts)
    dtype = jnp.result_type(counts, vmax, noise_var, symbol_energy, jnp.float32)
    grid = counts.astype(dtype).reshape(counts.shape[:-1] + (-1, digits, beta))
    per_count = model.count_variance(grid, jnp.asarray(noise_var, dtype), jnp.asarray(symbol_energy, dtype))
    per_digit = jnp.sum(per_count * jnp.square(numeral_values(beta, dtype)), axis=-1)  # (..., Q, D)
    xi = (beta**digits - 1) // 2
    powers = jnp.asarray(float(beta) ** (2 * np.arange(digits)), dtype)
    return jnp.square(jnp.asarray(vmax, dtype) / xi) * jnp.sum(per_digit * powers, axis=-1)


def over_the_air_sum(
    key: jax.Array,
    values,
    beta: int,
    digits: int,
    vmax,
    snr_db,
    mode: str = "aggregate",
    *,
    active=None,
    symbol_energy=None,
) -> OverTheAirSum:
    """One over-the-air round: K EDs send Q values each; the ES estimates the Q sums.

    Encodes (docs/kmeans.md §B3), transmits on L = QβD resources, superposes through the channel of
    ``mode`` (docs/kmeans.md §B4) and applies the energy detector and linear decoder:
    v̂_q = (v_max/ξ) Σ_d β^d Σ_j s_j (|y_{q,d,j}|² − σ²)/E_s. In the ``explicit`` and
    ``aggregate`` modes v̂ is unbiased for the sum of the quantised values, with variance
    (v_max/ξ)² Σ_d β^{2d} Σ_j s_j² (K_{q,d,j} + σ²/E_s)².

    Args:
        key: a PRNG key (traced; unused in ``ideal`` mode).
        values: (K, Q) values, one row per ED; float32 by default, float64 under
            ``jax_enable_x64`` with float64 values (the fading is then complex128).
        beta: base β, static odd int >= 3.
        digits: number of digits D, static int >= 1.
        vmax: v_max > 0, scalar or (Q,), shared by all EDs (traced).
        snr_db: SNR = 1/σ² of one ED at the ES, **in dB** (traced scalar; +inf: no noise).
        mode: the channel (static structure): a registered name, ``"explicit"``, ``"aggregate"``,
            ``"ideal"`` (see the module docstring) or one added by :func:`register`;
            ``"NAME:key=value,…"``; or a :class:`ChannelModel` whose ``params`` may be traced.
        active: optional (K,) bool mask; inactive EDs transmit nothing (traced).
        symbol_energy: E_s, energy on an active resource (traced); default β (docs/kmeans.md §B4 [choice]).

    Returns:
        :class:`OverTheAirSum` with ``estimate`` (Q,) and ``energy`` (L,).

    Invalid inputs never give a plausible number: concrete ones raise; traced ones (under jit)
    make the affected estimates NaN: all of them for a v_max or E_s that is not finite and > 0
    or an SNR outside :data:`SNR_DB_RANGE` (+inf allowed), estimate q for a NaN or infinite
    value q of an active ED.

    Raises:
        ValueError: for an invalid β, D, values or v_max shape, no ED or no value (K or
            Q = 0), concrete non-finite values, a concrete v_max or E_s that is not finite and
            > 0, a concrete ``snr_db`` that is not a scalar within :data:`SNR_DB_RANGE` (nor +inf),
            or a ``mode`` that is not a registered channel.
    """
    beta, digits = check_base(beta, digits)
    model = resolve_channel(mode)
    if model.noisy:
        _check_snr_db(snr_db)
    values = jnp.asarray(values)
    n_devices, n_values = validation.shape("values", values, (None, None), "(K, Q) (devices, values)")
    shape_ok = jnp.shape(vmax) in ((), (1,), (n_values,))
    validation.check("vmax", jnp.shape(vmax), shape_ok, f"of shape (), (1,) or (Q,) = ({n_values},)")
    allowed = "of shape (K, Q) with at least one ED and one value (K, Q >= 1)"
    validation.check("values", values.shape, n_devices >= 1 and n_values >= 1, allowed)
    if active is not None:
        validation.shape("active", active, (n_devices,), f"(K,) = ({n_devices},)")
    validation.positive("vmax", vmax)
    if symbol_energy is not None:
        validation.positive("symbol_energy", symbol_energy)
    validation.finite_array("values", values)  # the first ED (row) with a NaN or infinite value

    dtype = jnp.result_type(values, vmax, jnp.float32)
    numerals = encode(values, beta, digits, vmax)
    e_s = jnp.asarray(beta if symbol_energy is None else symbol_energy, dtype)
    noise_var = noise_variance(snr_db, dtype) if model.noisy else jnp.zeros((), dtype)
    energy = model.received_energy(key, numerals, beta, noise_var, e_s, active)
    estimate = estimate_sum(model.detected_counts(energy, noise_var, e_s), beta, digits, vmax)
    return OverTheAirSum(_poison(estimate, values, vmax, snr_db, e_s, active, model.noisy), energy)


def _poison(estimate, values, vmax, snr_db, symbol_energy, active, noisy: bool):
    """NaN where an input that could not be checked under jit is invalid, so that it cannot pass
    for a plausible sum: every estimate for a v_max or E_s that is not finite and > 0 or an SNR
    outside :data:`SNR_DB_RANGE` (a noise-free channel ignores the SNR), and estimate q where an active
    ED's value q is NaN or infinite (the encoder would clamp or silently map it to a numeral)."""
    dtype = estimate.dtype
    ok = jnp.all(jnp.isfinite(vmax) & (vmax > 0)) & jnp.isfinite(symbol_energy) & (symbol_energy > 0)
    if noisy:
        ok = ok & _in_snr_range(jnp.asarray(snr_db, dtype))
    zero_if_finite = values * 0  # NaN exactly where a value is NaN or ±inf
    if active is not None:
        zero_if_finite = jnp.where(jnp.asarray(active, bool)[:, None], zero_if_finite, 0)
    return jnp.where(ok, estimate, jnp.nan) + jnp.sum(zero_if_finite, axis=0).astype(dtype)
