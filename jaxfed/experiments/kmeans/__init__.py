"""The wireless federated k-means experiments (docs/kmeans.md): the mall figures, the ablation and
the studies beyond the paper, and the trial layer they share (:mod:`jaxfed.experiments.kmeans.trials`)."""
