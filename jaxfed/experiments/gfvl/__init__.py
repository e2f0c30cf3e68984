"""The G-FVL experiments (docs/gfvl.md): Fig. 3–6 of the paper and the studies beyond it, and the
trial layer they share (:mod:`jaxfed.experiments.gfvl.trials`)."""
