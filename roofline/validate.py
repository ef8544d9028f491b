"""Predicted against measured decode step times: the names of ``roofline.calibrate``'s comparison, re-exported.

The measurement side is one package, :mod:`roofline.calibrate`: the published points
live in :mod:`roofline.calibrate.published`, the predictions and their errors in
:mod:`roofline.calibrate.compare`, and ``roofline validate``'s table in
:mod:`roofline.commands.validate`. This module keeps ``from roofline.validate import
...`` working.
"""

from __future__ import annotations

from .calibrate.compare import (
    LEFT_OUT,
    Report,
    Row,
    calibration_measurements,
    default_measurements,
    estimate_step,
    predict,
    validate,
)
from .calibrate.fit import EngineProfile, engine_profiles, get_engine_profile, validate_with_estimates
from .calibrate.published import (
    PUBLISHED_KIND,
    PendingPoint,
    load_published,
    pending_published,
    published_path,
)
from .calibrate.schema import Measurement

__all__ = [
    "LEFT_OUT",
    "PUBLISHED_KIND",
    "Measurement",
    "PendingPoint",
    "Row",
    "Report",
    "published_path",
    "load_published",
    "pending_published",
    "calibration_measurements",
    "default_measurements",
    "predict",
    "estimate_step",
    "validate",
    "EngineProfile",
    "engine_profiles",
    "get_engine_profile",
    "validate_with_estimates",
]
