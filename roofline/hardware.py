"""Accelerator presets with the source of every value (astropy's rule: no reference, no constant).

An :class:`Accelerator` holds datasheet values (dense tensor-core peaks, HBM
bandwidth, memory as labelled and as seen by software) and, where published,
measured (achieved) values.  Every value is a :class:`Sourced` number whose
:class:`Source` says whether it is a datasheet figure, a measurement or derived,
where it comes from (precise to the table) and when.  Derived values such as the
ridge point are properties, never stored.

Units: bytes, bytes/s, FLOP/s (conventions: ../shared/design/CONVENTIONS.md, Units).
Peak FLOP/s is always the **dense** figure; the 2:4 sparsity figure NVIDIA prints
is never used.

Facts: ../shared/design/CONSTANTS.md ("Accelerators", "Measured (achieved) values").
"""

from __future__ import annotations

from fractions import Fraction
from typing import Literal

import attrs

from ._checks import check_positive
from .errors import InvalidValueError, UnknownPresetError
from .units import GB, TB, GiB, MiB

__all__ = [
    "Source",
    "Sourced",
    "Accelerator",
    "ACCELERATORS",
    "accelerator_names",
    "get_accelerator",
    "GB",
    "GiB",
    "MiB",
    "TB",
]


SourceKind = Literal["datasheet", "measured", "derived"]
_KINDS = ("datasheet", "measured", "derived")


def _check_kind(instance: object, attribute: attrs.Attribute, value: str) -> None:
    if value not in _KINDS:
        raise InvalidValueError(attribute.name, value, f"must be one of {', '.join(_KINDS)}")


def _check_text(instance: object, attribute: attrs.Attribute, value: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise InvalidValueError(attribute.name, value, "must be a non-empty string")


@attrs.frozen
class Source:
    """Where a value comes from.

    Parameters
    ----------
    kind : {"datasheet", "measured", "derived"}
    citation : str
        Document and table or section (or, for a measurement, the tool and file).
    date : str
        Publication or measurement date, ISO form (``YYYY`` or ``YYYY-MM`` or ``YYYY-MM-DD``).
    conditions : str
        For measurements: software versions, repetitions, power cap; empty otherwise.
    """

    kind: str = attrs.field(validator=_check_kind)
    citation: str = attrs.field(validator=_check_text)
    date: str = attrs.field(validator=_check_text)
    conditions: str = ""


def _positive_value(instance: object, attribute: attrs.Attribute, value: object) -> None:
    check_positive(attribute.name, value)


@attrs.frozen
class Sourced:
    """A positive number with its unit and its :class:`Source`.

    ``value`` is an ``int`` or ``fractions.Fraction`` (exact), in the SI unit named
    by ``unit`` (bytes, bytes/s, FLOP/s).
    """

    value: int | Fraction = attrs.field(validator=_positive_value)
    unit: str
    source: Source

    def __float__(self) -> float:
        return float(self.value)


def _optional_sourced(instance: object, attribute: attrs.Attribute, value: object) -> None:
    if value is not None and not isinstance(value, Sourced):
        raise InvalidValueError(attribute.name, value, "must be a Sourced value or None")


@attrs.frozen
class Accelerator:
    """One accelerator: datasheet figures, optional measured figures, each with its Source.

    Parameters
    ----------
    key : str
        Preset name (``"h100-sxm"``).
    name : str
        Human-readable name.
    memory_label : Sourced [bytes]
        Memory as printed on the datasheet (80 GB = 80e9 bytes).
    memory_usable : Sourced [bytes]
        Memory as seen by software (``torch.cuda.mem_get_info`` total or nvidia-smi);
        the KV budget starts from this (CONVENTIONS.md, Memory).
    hbm_bandwidth : Sourced [bytes/s]
        Peak HBM bandwidth from the datasheet.
    peak_bf16 : Sourced [FLOP/s]
        Dense BF16/FP16 tensor-core peak.
    peak_fp8 : Sourced or None [FLOP/s]
        Dense FP8 peak; None where the part has no FP8 tensor cores.
    measured_bandwidth, measured_bf16 : Sourced or None
        Achieved values, where a public measurement exists.

    Notes
    -----
    The ridge point is ``peak_bf16 / hbm_bandwidth`` [FLOP/byte], a property.
    """

    key: str
    name: str
    memory_label: Sourced
    memory_usable: Sourced
    hbm_bandwidth: Sourced
    peak_bf16: Sourced
    peak_fp8: Sourced | None = attrs.field(default=None, validator=_optional_sourced)
    measured_bandwidth: Sourced | None = attrs.field(default=None, validator=_optional_sourced)
    measured_bf16: Sourced | None = attrs.field(default=None, validator=_optional_sourced)

    @property
    def bandwidth(self) -> int | Fraction:
        """HBM bandwidth [bytes/s] used by the model (datasheet unless this is a measured copy)."""
        return self.hbm_bandwidth.value

    @property
    def peak_flops(self) -> int | Fraction:
        """Dense BF16 peak [FLOP/s] used by the model."""
        return self.peak_bf16.value

    @property
    def ridge_point(self) -> Fraction:
        """Ridge point I* = peak / bandwidth [FLOP/byte], exact (derived)."""
        return Fraction(self.peak_bf16.value) / Fraction(self.hbm_bandwidth.value)

    @property
    def usable_memory(self) -> int | Fraction:
        """Memory seen by software [bytes]."""
        return self.memory_usable.value

    def step_terms(self, dtype: str = "bf16") -> dict[str, int | Fraction]:
        """The accelerator's inputs to the step-time formulas, keyed by their keyword names.

        The twin of :meth:`roofline.ModelConfig.step_terms`: ``bandwidth`` [bytes/s] and
        ``peak_flops`` [FLOP/s] (the dense peak for ``dtype``, see :meth:`peak`), exact
        (int or Fraction). Pass both with ``**`` to any fast path of
        :mod:`roofline.formulas.step_time` or :mod:`roofline.formulas.intensity`.

        Raises
        ------
        InvalidValueError
            For a dtype :meth:`peak` does not know.

        Examples
        --------
        >>> get_accelerator("h100-sxm").step_terms()
        {'bandwidth': 3350000000000, 'peak_flops': 989400000000000}
        """
        return {"bandwidth": self.bandwidth, "peak_flops": self.peak(dtype)}

    def peak(self, dtype: str = "bf16") -> int | Fraction:
        """Dense peak [FLOP/s] for ``dtype`` in {"bf16", "fp16", "fp8"}.

        Raises
        ------
        InvalidValueError
            For an unknown dtype, or "fp8" on a part without FP8 tensor cores.
        """
        if dtype in ("bf16", "fp16", "bfloat16", "float16"):
            return self.peak_bf16.value
        if dtype in ("fp8", "float8"):
            if self.peak_fp8 is None:
                raise InvalidValueError("dtype", dtype, f"{self.name} has no FP8 tensor cores")
            return self.peak_fp8.value
        raise InvalidValueError("dtype", dtype, "expected bf16, fp16 or fp8")

    def measured(self) -> Accelerator:
        """A copy whose bandwidth and BF16 peak are the measured (achieved) values.

        Values without a measurement keep their datasheet figure (and Source), so a
        caller can see from each Source which are measured.
        """
        return attrs.evolve(
            self,
            key=self.key + ":measured",
            name=self.name + " (measured)",
            hbm_bandwidth=self.measured_bandwidth or self.hbm_bandwidth,
            peak_bf16=self.measured_bf16 or self.peak_bf16,
        )

    def sources(self) -> dict[str, Sourced]:
        """Every stored value by field name (None fields left out)."""
        return {
            f.name: getattr(self, f.name)
            for f in attrs.fields(Accelerator)
            if isinstance(getattr(self, f.name), Sourced)
        }


# --------------------------------------------------------------------------- presets

_H100_DS = "NVIDIA H100 Tensor Core GPU datasheet, 'Technical Specifications' table (SXM column)"
_H100_PCIE_DS = "NVIDIA H100 Tensor Core GPU datasheet, 'Technical Specifications' table (PCIe column)"
_HOPPER_WP = "NVIDIA H100 Tensor Core GPU Architecture whitepaper (Hopper), Table 3"
_DENSE = "; tensor figures printed 'with sparsity', dense is half"
_H200_DS = "NVIDIA H200 product brief, specifications table; MLPerf Inference v4.1 H200 system description"
_A100_DS = "NVIDIA A100 Tensor Core GPU datasheet, 'Specifications' table"
_VLLM_LOGS = "public vLLM memory-profiling log lines (torch.cuda total memory)"
_SMI = "nvidia-smi total memory in public logs"
_STAS = (
    "stas00/ml-engineering, compute/accelerator/README.md, "
    "'Maximum Achievable Matmul FLOPS' table"
)


def _ds(value: int | Fraction, unit: str, citation: str, date: str) -> Sourced:
    return Sourced(value, unit, Source("datasheet", citation, date))


H100_SXM = Accelerator(
    key="h100-sxm",
    name="NVIDIA H100 SXM5 80GB",
    memory_label=_ds(80 * GB, "bytes", _H100_DS + " (80 GB HBM3)", "2023"),
    memory_usable=Sourced(
        Fraction(792, 10) * GiB,
        "bytes",
        Source("measured", _VLLM_LOGS + ": about 79.2 GiB; nvidia-smi shows 81,559 MiB", "2024"),
    ),
    hbm_bandwidth=_ds(3_350_000_000_000, "bytes/s", _H100_DS + "; whitepaper 3,352 GB/s", "2023"),
    peak_bf16=_ds(989_400_000_000_000, "FLOP/s", _HOPPER_WP + _DENSE, "2022"),
    peak_fp8=_ds(1_978_900_000_000_000, "FLOP/s", _HOPPER_WP + _DENSE, "2022"),
    measured_bandwidth=Sourced(
        3_000_000_000_000,
        "bytes/s",
        Source(
            "measured",
            "deepseek-ai/FlashMLA README: up to 3,000 GB/s on H800 SXM5 "
            "(same HBM3, 3.35 TB/s, as H100 SXM)",
            "2025-02",
            "FlashMLA decode kernel, CUDA 12.8, memory-bound configuration",
        ),
    ),
    measured_bf16=Sourced(
        794_500_000_000_000,
        "FLOP/s",
        Source("measured", _STAS, "2025", "PyTorch 2.7, CUDA 12.6, best shape, mean of 100 iterations"),
    ),
)

H100_PCIE = Accelerator(
    key="h100-pcie",
    name="NVIDIA H100 PCIe 80GB",
    memory_label=_ds(80 * GB, "bytes", _H100_PCIE_DS + " (80 GB HBM2e)", "2023"),
    memory_usable=Sourced(
        Fraction(792, 10) * GiB,
        "bytes",
        Source("measured", _VLLM_LOGS + ": same 80 GB class as H100 SXM, about 79.2 GiB", "2024"),
    ),
    hbm_bandwidth=_ds(2_000_000_000_000, "bytes/s", _H100_PCIE_DS, "2023"),
    peak_bf16=_ds(756_000_000_000_000, "FLOP/s", _H100_PCIE_DS + _DENSE, "2023"),
    peak_fp8=_ds(1_513_000_000_000_000, "FLOP/s", _H100_PCIE_DS + _DENSE, "2023"),
)

H200_SXM = Accelerator(
    key="h200-sxm",
    name="NVIDIA H200 SXM 141GB",
    memory_label=_ds(141 * GB, "bytes", _H200_DS + " (141 GB HBM3e)", "2024"),
    memory_usable=Sourced(143_771 * MiB, "bytes", Source("measured", _SMI + ": 143,771 MiB", "2024")),
    hbm_bandwidth=_ds(4_800_000_000_000, "bytes/s", _H200_DS, "2024"),
    peak_bf16=_ds(989_400_000_000_000, "FLOP/s", _H200_DS + _DENSE, "2024"),
    peak_fp8=_ds(1_978_900_000_000_000, "FLOP/s", _H200_DS + _DENSE, "2024"),
)

_A100_GEMM = Sourced(
    271_200_000_000_000,
    "FLOP/s",
    Source("measured", _STAS + " (A100 SXM row)", "2025", "PyTorch 2.7, CUDA 12.6, best shape, mean of 100 iterations"),
)

A100_40GB = Accelerator(
    key="a100-40gb",
    name="NVIDIA A100 SXM4 40GB",
    memory_label=_ds(40 * GB, "bytes", _A100_DS + " (40 GB HBM2)", "2020"),
    memory_usable=Sourced(
        Fraction(395, 10) * GiB,
        "bytes",
        Source("measured", _VLLM_LOGS + ": 39.5 GiB; nvidia-smi shows 40,960 MiB", "2024"),
    ),
    hbm_bandwidth=_ds(1_555_000_000_000, "bytes/s", _A100_DS, "2020"),
    peak_bf16=_ds(312_000_000_000_000, "FLOP/s", _A100_DS + _DENSE, "2020"),
    measured_bf16=_A100_GEMM,
)

A100_80GB = Accelerator(
    key="a100-80gb",
    name="NVIDIA A100 SXM4 80GB",
    memory_label=_ds(80 * GB, "bytes", _A100_DS + " (80 GB HBM2e)", "2021"),
    memory_usable=Sourced(81_920 * MiB, "bytes", Source("measured", _SMI + ": 81,920 MiB", "2024")),
    hbm_bandwidth=_ds(2_039_000_000_000, "bytes/s", _A100_DS, "2021"),
    peak_bf16=_ds(312_000_000_000_000, "FLOP/s", _A100_DS + _DENSE, "2021"),
    measured_bandwidth=Sourced(
        1_700_000_000_000,
        "bytes/s",
        Source(
            "measured",
            "pytorch-labs/gpt-fast README: about 1,700 GB/s peak at a 330 W power cap",
            "2023-11",
            "A100 80GB capped at 330 W",
        ),
    ),
    measured_bf16=_A100_GEMM,
)

ACCELERATORS: dict[str, Accelerator] = {
    a.key: a for a in (H100_SXM, H100_PCIE, H200_SXM, A100_40GB, A100_80GB)
}

_ALIASES = {
    "h100": "h100-sxm",
    "h100-sxm5": "h100-sxm",
    "h100-sxm-80gb": "h100-sxm",
    "h200": "h200-sxm",
    "a100": "a100-80gb",
    "a100-80": "a100-80gb",
    "a100-40": "a100-40gb",
}


def accelerator_names() -> list[str]:
    """The preset keys, sorted."""
    return sorted(ACCELERATORS)


def get_accelerator(name: str) -> Accelerator:
    """The accelerator preset called ``name`` (case-insensitive; a few aliases such as "h100").

    Parameters
    ----------
    name : str
        A key of :data:`ACCELERATORS` (``"h100-sxm"``, ``"h100-pcie"``, ``"h200-sxm"``,
        ``"a100-40gb"``, ``"a100-80gb"``) or an alias.

    Returns
    -------
    Accelerator

    Raises
    ------
    UnknownPresetError
        If no preset has that name; the message lists the known ones.

    Examples
    --------
    >>> round(float(get_accelerator("h100-sxm").ridge_point), 1)
    295.3
    """
    if not isinstance(name, str):
        raise UnknownPresetError("accelerator", repr(name), accelerator_names())
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    key = _ALIASES.get(key, key)
    try:
        return ACCELERATORS[key]
    except KeyError:
        raise UnknownPresetError("accelerator", name, accelerator_names()) from None
