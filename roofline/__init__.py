"""roofline: an analytic model of LLM decode serving, derived with SymPy and checked.

Public names (importing this package does not import SymPy; ``roofline.symbolic``
does, on first use):

* :class:`ModelConfig`, :func:`get_model`, :func:`load_model`, :func:`model_names`
* :class:`Accelerator`, :class:`Source`, :class:`Sourced`, :func:`get_accelerator`,
  :func:`accelerator_names`
* :class:`Deployment`, :class:`Parallelism` (a model on its accelerators: tensor-parallel size,
  FLOPs convention, bound or estimate)
* :mod:`roofline.formulas` (numeric fast paths) and its ``REGISTRY``
* :mod:`roofline.estimate` (the formulas applied to a model on an accelerator)
* :func:`plan` (roofline.plan: the cheapest deployment that meets a latency SLO, searched over a grid)
* errors: :class:`RooflineError` (a ValueError) and its subclasses

Conventions: docs/conventions.md (units: bytes, seconds, FLOP).
"""

from __future__ import annotations

from . import formulas
from .deployment import Deployment, Parallelism
from .errors import ConfigError, InvalidValueError, RooflineError, TraceError, UnknownPresetError
from .hardware import Accelerator, Source, Sourced, accelerator_names, get_accelerator
from .models import ModelConfig, get_model, load_model, model_names
from .plan import plan

__version__ = "0.1.0.dev0"

__all__ = [
    "__version__",
    "formulas",
    "ModelConfig",
    "get_model",
    "load_model",
    "model_names",
    "Accelerator",
    "Source",
    "Sourced",
    "get_accelerator",
    "accelerator_names",
    "Deployment",
    "Parallelism",
    "RooflineError",
    "InvalidValueError",
    "ConfigError",
    "UnknownPresetError",
    "TraceError",
    "plan",
]
