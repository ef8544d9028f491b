"""What ``roofline calibrate`` measures: :class:`CalibrationPlan` and the CPU path's :data:`TINY_MODEL`."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs

from ..errors import InvalidValueError
from ..hardware import GiB, MiB
from ..models import ModelConfig

__all__ = ["TINY_MODEL", "CalibrationPlan", "check_shapes"]


#: Tiny decoder shapes for the CPU path (2 layers, GQA 4:2, gated MLP): seconds on a laptop.
TINY_MODEL = ModelConfig(
    name="tiny-calibrate",
    num_hidden_layers=2,
    hidden_size=256,
    intermediate_size=512,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    vocab_size=1024,
    source="roofline.calibrate.TINY_MODEL: tiny shapes for the CPU path",
)


def _ints(minimum: int) -> Callable[[Any, attrs.Attribute, Any], None]:
    def check(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if not isinstance(value, tuple) or not value:
            raise InvalidValueError(attribute.name, value, "must be a non-empty tuple of integers")
        for v in value:
            if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
                raise InvalidValueError(attribute.name, value, f"every entry must be an integer >= {minimum}")

    return check


def _int_at_least(minimum: int) -> Callable[[Any, attrs.Attribute, Any], None]:
    def check(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise InvalidValueError(attribute.name, value, f"must be an integer >= {minimum}")

    return check


def check_shapes(field: str, value: Any) -> None:
    """Check a non-empty tuple of matmul shapes ``(m, n, k)``, integers >= 1.

    Raises
    ------
    InvalidValueError
        Naming ``field``, for an empty or non-tuple value or a bad shape.
    """
    if not isinstance(value, tuple) or not value:
        raise InvalidValueError(field, value, "must be a non-empty tuple of (m, n, k)")
    for shape in value:
        if (
            not isinstance(shape, tuple)
            or len(shape) != 3
            or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in shape)
        ):
            raise InvalidValueError(field, shape, "each shape must be (m, n, k), integers >= 1")


def _shapes(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    check_shapes(attribute.name, value)


def _max_seconds(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InvalidValueError(attribute.name, value, "must be a finite number of seconds > 0, or None")


def _model(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, ModelConfig):
        raise InvalidValueError(attribute.name, value, "must be a ModelConfig")


@attrs.frozen
class CalibrationPlan:
    """What ``roofline calibrate`` measures, and how many times.

    Parameters
    ----------
    model : ModelConfig
        Shapes of the decode steps (random weights in ``weight_dtype``).
    batches : tuple of int (>= 1)
        Batch sizes of the decode steps.
    contexts : tuple of int (>= 1)
        Context of every sequence [tokens], the new token's KV included.
    repetitions : int (>= 1)
        Timed repetitions of every measurement.
    warmup : int (>= 0)
        Untimed runs before them.
    bandwidth_bytes : int [bytes] (>= 1 MiB)
        Size of the buffer read and copied by the bandwidth measurement; it must
        exceed the last-level cache many times over (GPU default 2 GiB; H100 L2 is 50 MB).
    matmul_shapes : tuple of (m, n, k)
        Matmuls [m, k] x [k, n] timed in the model's weight dtype.
    cuda_graphs : bool
        Replay each decode step from a CUDA graph (CUDA only), as serving engines do.
    max_seconds : float [s] or None
        Decode points not started within this time of the run's start are skipped
        (and listed with the reason); None for no limit.

    Raises
    ------
    InvalidValueError
        For an empty or non-integer list, a value below its minimum, or a bad shape.
    """

    model: ModelConfig = attrs.field(validator=_model)
    batches: tuple[int, ...] = attrs.field(validator=_ints(1))
    contexts: tuple[int, ...] = attrs.field(validator=_ints(1))
    repetitions: int = attrs.field(validator=_int_at_least(1))
    warmup: int = attrs.field(validator=_int_at_least(0))
    bandwidth_bytes: int = attrs.field(validator=_int_at_least(MiB))
    matmul_shapes: tuple[tuple[int, int, int], ...] = attrs.field(validator=_shapes)
    cuda_graphs: bool = False
    max_seconds: float | None = attrs.field(default=None, validator=_max_seconds)

    @classmethod
    def default(cls, device_type: str, model: ModelConfig | None = None) -> CalibrationPlan:
        """The default plan for a device type.

        Parameters
        ----------
        device_type : {"cuda", "cpu"} (anything but "cuda" gets the CPU plan)
        model : ModelConfig, optional
            Overrides the default shapes (GPU: Llama 3.1 8B; CPU: :data:`TINY_MODEL`).

        Returns
        -------
        CalibrationPlan
            GPU: batches 1, 2, 4, ..., 256; contexts 128, 1,000 and 4,096; 5 warm-up
            and 20 timed repetitions; 2 GiB bandwidth buffer; matmuls 4096^3, 8192^3
            and 8192 x 14336 x 4096; CUDA graphs; decode points stop at 150 s, so the
            whole run stays within 3 minutes on an H100-class GPU.
            CPU: tiny shapes, batches 1, 2, 4, contexts 16 and 64, 3 warm-up + 5 timed,
            256 MiB buffer, matmuls 128^3 and 256^3: a few seconds.

        Examples
        --------
        >>> CalibrationPlan.default("cpu").batches
        (1, 2, 4)
        >>> CalibrationPlan.default("cuda").contexts
        (128, 1000, 4096)
        """
        if device_type == "cuda":
            from ..models import get_model

            return cls(
                model=model or get_model("llama-3.1-8b"),
                batches=(1, 2, 4, 8, 16, 32, 64, 128, 256),
                contexts=(128, 1000, 4096),
                repetitions=20,
                warmup=5,
                bandwidth_bytes=2 * GiB,
                matmul_shapes=((4096, 4096, 4096), (8192, 8192, 8192), (8192, 14336, 4096)),
                cuda_graphs=True,
                max_seconds=150.0,
            )
        return cls(
            model=model or TINY_MODEL,
            batches=(1, 2, 4),
            contexts=(16, 64),
            repetitions=5,
            warmup=3,
            bandwidth_bytes=256 * MiB,
            matmul_shapes=((128, 128, 128), (256, 256, 256)),
            cuda_graphs=False,
            max_seconds=None,
        )
