"""Variance of the natural-gradient estimate vs the dimension d for each gradient estimator (not a timing).

For d = n_features + 1 in ``--dims``: the breast-cancer training split over K = 10 agents i.i.d. (the
``gfvl-logistic`` defaults), q = the centralised optimum q* of the mean-field Gaussian family (float64), and
agent 0's loss; tr Cov[FIM⁻¹ ĝ] over ``--repeats`` independent estimates with S = ``--samples`` samples,
for REINFORCE with the constant (c = 0), leave-one-out and control-variate baselines and for the
reparameterisation gradient (:func:`jaxfed.gfvl.natgrad.estimator_variance`).

    python benchmarks/gfvl_estimator_variance.py [--dims 2 5 10 20 30] [--samples 20] [--repeats 400] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import machine, write_json  # noqa: E402

from jaxfed.experiment import make_config  # noqa: E402
from jaxfed.experiments.gfvl import logistic as gfvl_logistic
from jaxfed.gfvl import expfam, logistic, natgrad  # noqa: E402


def variance_table(dims, n_samples: int, n_repeats: int) -> dict:
    rows = {}
    for d in dims:
        cfg = make_config(gfvl_logistic.Config, {"n_features": str(d - 1), "splits": "iid"})
        problem = gfvl_logistic.prepare(cfg)
        family = expfam.mean_field_normal(d, 1.0 / cfg.prior_var)
        eta = jnp.asarray(np.asarray(problem["target"]["iid"]), float)
        agent = jax.tree.map(lambda a: jnp.asarray(np.asarray(a[0]), float), problem["data"]["iid"])

        def loss(theta, agent=agent):
            return logistic.likelihood().loss(agent, theta)

        rows[d] = {}
        for estimator in natgrad.ESTIMATORS:
            fn = jax.jit(
                lambda key, est=estimator: natgrad.estimator_variance(
                    key, family, eta, loss, n_samples, est, 0.0, n_repeats
                )
            )
            rows[d][estimator] = float(fn(jax.random.key(d)))
        print(d, {k: f"{v:.3g}" for k, v in rows[d].items()})
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[2, 5, 10, 20, 30])
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=400)
    parser.add_argument(
        "--out", default=os.path.join(os.path.dirname(__file__), "results", "gfvl_estimator_variance.json")
    )
    args = parser.parse_args(argv)
    rows = variance_table(args.dims, args.samples, args.repeats)
    write_json(
        args.out,
        {
            "n_samples": args.samples,
            "n_repeats": args.repeats,
            "trace_cov_natural_gradient": rows,
            "machine": machine(),
        },
    )


if __name__ == "__main__":
    main()
