"""The names experiment files have imported from ``jaxfed.experiments.base``, kept there for them.

The code lives by concern: the experiment type and its parameters in
:mod:`jaxfed.experiments.spec`, running one in :mod:`jaxfed.experiments.runner`, the result
directory in :mod:`jaxfed.rundir`, the G-FVL experiments' parameter checks in
:mod:`jaxfed.experiments.gfvl_checks`. New code imports from :mod:`jaxfed.experiments` or those.
"""

from __future__ import annotations

from jaxfed.experiments.gfvl_checks import check_bernoulli_setting, check_loss_normalisation, check_natgrad_setting
from jaxfed.experiments.runner import run_experiment
from jaxfed.experiments.spec import (
    JSON_TYPES,
    PARAMETER_TYPES,
    Experiment,
    Reading,
    Sweep,
    band_table,
    check,
    check_config_class,
    check_finite,
    check_json,
    check_representable,
    check_sweep,
    make_config,
    preset_variant,
)
from jaxfed.rundir import AXES_NUMBERED_FROM_1, axis_coords, load_results, nonfinite_lines

__all__ = [
    "AXES_NUMBERED_FROM_1",
    "JSON_TYPES",
    "PARAMETER_TYPES",
    "Experiment",
    "Reading",
    "Sweep",
    "axis_coords",
    "band_table",
    "check",
    "check_bernoulli_setting",
    "check_config_class",
    "check_finite",
    "check_json",
    "check_loss_normalisation",
    "check_natgrad_setting",
    "check_representable",
    "check_sweep",
    "load_results",
    "make_config",
    "nonfinite_lines",
    "preset_variant",
    "run_experiment",
]
