"""A study with per-ED channel state: residual power-control gains in over-the-air k-means.

Truncated channel inversion leaves each edge device (ED) k with a residual amplitude gain: its
contributions arrive with energy g_k E_s instead of E_s, g_k log-normal with a spread of s dB
(g_k = 10^(s ε_k / 10), ε_k ~ N(0, 1), drawn once per trial and kept for every round). The ES's
energy detector then estimates Σ_k g_k v_k, not Σ_k v_k. Nothing in the package changes:

- a channel with a per-ED parameter, registered here: |y_l|² ~ (E_s Σ_k g_k 1[k on l] + σ²)·Exp(1)
  (the "aggregate" law with weighted counts; g = 1 is that channel bit for bit);
- the mall trial's ``channel_for`` hook draws the gains per trial from its own key
  (``kmeans_trials.mall_sweep(cfg, labels, channel_for=…)``);
- the spread is swept as a traced channel parameter (``channel_sweep``), so one compiled program
  serves every spread.

    jaxfed run docs/examples/power_gains.py:EXPERIMENT --trials 200 --out results/gains
    jaxfed report results/gains --experiment docs/examples/power_gains.py:EXPERIMENT
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxfed import oac, plotting, stats
from jaxfed.experiment import Experiment, Reading
from jaxfed.experiments.kmeans.trials import SWEPT, MallConfig, final_values, mall_sweep, parse_channel_sweep


def residual_gain_energy(key, numerals, beta, noise_var, symbol_energy, active, gain, spread_db):
    """(E_s Σ_k g_k 1[k on l] + σ²)·Exp(1); ``gain`` (K,) or a scalar, ``spread_db`` only labels the model."""
    weighted = jnp.broadcast_to(jnp.asarray(gain, noise_var.dtype), (numerals.shape[0],))
    counts = weighted @ oac.channel.activation(numerals, beta, active).astype(noise_var.dtype)
    return oac.channel.aggregate_energy(key, counts, noise_var, symbol_energy)


oac.channel.register("residual-gains", residual_gain_energy, variance=None, params={"gain": 1.0, "spread_db": 0.0})


@dataclasses.dataclass(frozen=True)
class Config(MallConfig):
    """The mall (MallConfig) with OAC at one SNR and D, swept over the gains' spread s (dB)."""

    digits: int = 4  # D
    snr_db: float = 20.0  # SNR of one ED at the ES (dB)
    channel: str = "residual-gains"  # the channel registered above
    channel_sweep: str = "spread_db=0,1,3"  # spreads s of the residual gains (dB), one OAC point each


def gains_for(key, point):
    """The trial's channel: per-ED gains drawn once per trial with the point's spread (traced)."""
    spread = point.get(SWEPT, 0.0)  # (the centralized point has none: it uses no channel)
    gains = 10 ** (spread * jax.random.normal(key, (point["rows"] * point["cols"],)) / 10)
    return oac.channel.get("residual-gains").with_params(gain=gains, spread_db=spread)


def build(cfg: Config):
    labels = [{"method": "centralized"}, {"method": "oac", "digits": cfg.digits, "snr_db": cfg.snr_db}]
    return mall_sweep(cfg, labels, channel_for=gains_for)


def _spreads(cfg):
    return parse_channel_sweep(cfg.channel_sweep)[1]


def plot(cfg, labels, results, path):
    band = stats.band(results["loss"])
    fig, ax = plotting.figure(1, 1, figsize=(6, 4))
    spreads = np.asarray(_spreads(cfg))
    rows = [p for p, lab in enumerate(labels) if lab["method"] == "oac"]
    ax.plot(spreads, band.median[rows, -1], marker="o", label=f"OAC D={cfg.digits}, {cfg.snr_db:g} dB")
    ax.fill_between(spreads, band.lower[rows, -1], band.upper[rows, -1], alpha=0.2, lw=0)
    ax.axhline(band.median[0, -1], color="k", lw=1.2, label="centralized (median)")
    ax.set_xlabel("spread of the residual power-control gains s (dB)")
    ax.set_ylabel("final loss per customer (m²)")
    ax.legend(fontsize=8)
    plotting.save(fig, path)


def report(cfg, labels, results):
    final = final_values(results)
    if final is None:
        return Reading("Verdicts need every trial's values: rerun with `--keep raw`.\n")
    rows = [p for p, lab in enumerate(labels) if lab["method"] == "oac"]
    spreads = _spreads(cfg)
    verdict = stats.paired_verdict(
        final[rows[-1]],
        final[rows[0]],
        f"OAC final loss larger with gains spread {spreads[-1]:g} dB than {spreads[0]:g} dB (ratio)",
        transform="log_ratio",
    )
    medians = ", ".join(f"{s:g} dB: {np.median(final[p]):.1f} m²" for s, p in zip(spreads, rows))
    text = (
        f"Median final loss of OAC D = {cfg.digits} at {cfg.snr_db:g} dB by spread of the residual gains: {medians} "
        f"(centralized {np.median(final[0]):.1f} m²).\n\n" + stats.verdict_table([verdict], "median ratio") + "\n"
    )
    return Reading(text, (verdict,))


EXPERIMENT = Experiment(
    name="power-gains",
    description="OAC k-means with per-ED residual power-control gains (a per-ED channel parameter)",
    config_cls=Config,
    build=build,
    plot=plot,
    report=report,
    default_trials=200,
    common_random_numbers=True,
)
