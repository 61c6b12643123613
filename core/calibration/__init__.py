"""Simulation-based calibration (Talts et al. 2018): does the whole pipeline, prior +
likelihood + sampler + settings, return calibrated posteriors?

For each simulation, hyperparameters and a field are drawn from the config's prior, data
are simulated from them with the config's likelihood, mask and noise, the config's sampler
runs on those data, and the rank of each true test quantity among M posterior draws is
recorded. A calibrated pipeline gives uniform ranks; this package judges them.

numpy/scipy only (the GUI imports it); the simulate-and-sample program is
``core.engine.calibrate``. Modules: ``plan`` (simulations, batches, seeds, draws and the
test quantities' names), ``ranks`` (ranks and central-interval coverage), ``bands`` (the
simultaneous ECDF bands of Sailynoja et al. 2022 and the p-value of uniformity),
``verdict`` (which quantities fail, the family held to 5 %), ``store``
(``DIR/calibration.zarr``, its writer and reader).
"""

from __future__ import annotations

from core.calibration.bands import EcdfBand, ecdf_counts, simultaneous_band, uniformity_pvalue
from core.calibration.plan import CalibrationPlan, PlanError, fixed_voxels, make_plan, plan_for_config, quantity_names
from core.calibration.ranks import LEVELS, coverage, expected_coverage, ranks_of
from core.calibration.store import STORE_NAME, CalibrationReader, CalibrationStoreError, CalibrationWriter
from core.calibration.verdict import ALPHA, Verdict, judge

__all__ = ["EcdfBand", "ecdf_counts", "simultaneous_band", "uniformity_pvalue", "CalibrationPlan", "PlanError",
           "fixed_voxels", "make_plan", "plan_for_config", "quantity_names", "LEVELS", "coverage", "expected_coverage", "ranks_of",
           "STORE_NAME", "CalibrationReader", "CalibrationStoreError", "CalibrationWriter", "ALPHA", "Verdict",
           "judge"]
