"""Accelerator presets with the source of every value (astropy's rule: no reference, no constant).

An :class:`Accelerator` holds datasheet values (dense tensor-core peaks, HBM
bandwidth, memory as labelled and as seen by software) and, where published,
measured (achieved) values.  Every value is a :class:`Sourced` number whose
:class:`Source` says whether it is a datasheet figure, a measurement or derived,
where it comes from (precise to the table) and when.  Derived values such as the
ridge point are properties, never stored.

Each accelerator also carries its GPU-to-GPU links (:class:`Link`: NVLink through
NVSwitch or a bridge, AMD Infinity Fabric, PCIe) with bandwidth per GPU and per
direction, the latency of one all-reduce ring step, generation and reach, for
tensor parallelism (docs/conventions.md, "Tensor parallelism"), and, where a source gives it,
the NIC that joins one node (the scale-up domain) to the others (``Accelerator.network``:
InfiniBand NDR through one ConnectX-7 per GPU on DGX H100/H200/B200), for groups that span
nodes (docs/conventions.md, "Groups that span nodes").

Units: bytes, bytes/s, FLOP/s, s (docs/conventions.md, "Units").
Peak FLOP/s is always the **dense** figure; the 2:4 sparsity figure NVIDIA prints
is never used.

Facts: NVIDIA and AMD datasheets (each value's Source names the table), public
nvidia-smi / rocm-smi logs for the memory software sees, NCCL's and RCCL's ring
latency models for the link latencies.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Literal

import attrs

from ._checks import check_int, check_positive, name_key
from .errors import InvalidValueError, UnknownPresetError
from .units import GB, TB, GiB, MiB

__all__ = [
    "Source",
    "Sourced",
    "Link",
    "Accelerator",
    "ACCELERATORS",
    "accelerator_names",
    "accelerator_aliases",
    "get_accelerator",
    "GB",
    "GiB",
    "MiB",
    "TB",
]


#: The largest tensor-parallel group modelled over PCIe: one server of 8 cards (a node of a PCIe
#: part). A larger group crosses servers: it is priced over the part's ``network`` link where one
#: is sourced, and refused by name otherwise, never priced as PCIe (docs/conventions.md, "Tensor
#: parallelism" and "Groups that span nodes").
MAX_PCIE_GROUP = 8

SourceKind = Literal["datasheet", "measured", "derived", "published", "fitted"]
_KINDS = ("datasheet", "measured", "derived", "published", "fitted")


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
    kind : {"datasheet", "measured", "derived", "published", "fitted"}
        ``"published"``: a figure quoted from a public source other than a datasheet (the
        quote in ``citation``); ``"fitted"``: fitted on named calibration rows (named in
        ``citation``, the method in ``conditions``), docs/conventions.md "Bound and estimate".
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


def _sourced(instance: object, attribute: attrs.Attribute, value: object) -> None:
    if not isinstance(value, Sourced):
        raise InvalidValueError(attribute.name, value, "must be a Sourced value")


def _optional_link(instance: object, attribute: attrs.Attribute, value: object) -> None:
    if value is not None and not isinstance(value, Link):
        raise InvalidValueError(attribute.name, value, "must be a Link or None")


@attrs.frozen
class Link:
    """One GPU-to-GPU interconnect of an accelerator (NVLink, Infinity Fabric or PCIe), each value sourced.

    The ring all-reduce of tensor parallelism runs over one link kind
    (docs/conventions.md, "Tensor parallelism"): 2 (T - 1) steps, each paying
    ``latency`` and moving 1/T of the message at ``bandwidth``.

    Parameters
    ----------
    name : str
        The link as the field names it: ``"NVLink 4 (NVSwitch)"``, ``"PCIe Gen4 x16"``,
        ``"Infinity Fabric (xGMI)"``.
    bandwidth : Sourced [bytes/s]
        Per GPU, per direction (half the "bidirectional" total vendors print).
    latency : Sourced [s]
        Small-message latency of one ring step (the alpha of the alpha-beta model).
    generation : Sourced or None [generation]
        NVLink or PCIe generation (4 for NVLink 4, 5 for PCIe Gen5); None where the
        vendor numbers its link otherwise (Infinity Fabric).
    max_gpus : Sourced or None [GPUs]
        The most GPUs one group can span over this link (8 on an HGX board's NVSwitch,
        2 for an NVLink bridge, 72 in an NVL72 rack); None: no stated limit (PCIe
        through the host).
    """

    name: str = attrs.field(validator=_check_text)
    bandwidth: Sourced = attrs.field(validator=_sourced)
    latency: Sourced = attrs.field(validator=_sourced)
    generation: Sourced | None = attrs.field(default=None, validator=_optional_sourced)
    max_gpus: Sourced | None = attrs.field(default=None, validator=_optional_sourced)

    def spans(self, tensor_parallel_size: int) -> bool:
        """Whether a group of ``tensor_parallel_size`` GPUs can all-reduce over this link alone."""
        return self.max_gpus is None or tensor_parallel_size <= self.max_gpus.value

    def sources(self) -> dict[str, Sourced]:
        """Every stored value by field name (None fields left out)."""
        return {f.name: getattr(self, f.name) for f in attrs.fields(Link) if isinstance(getattr(self, f.name), Sourced)}


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
        the KV budget starts from this (docs/conventions.md, "Memory").
    hbm_bandwidth : Sourced [bytes/s]
        Peak HBM bandwidth from the datasheet.
    peak_bf16 : Sourced [FLOP/s]
        Dense BF16/FP16 tensor-core peak.
    peak_fp8 : Sourced or None [FLOP/s]
        Dense FP8 peak; None where the part has no FP8 tensor cores.
    peak_fp4 : Sourced or None [FLOP/s]
        Dense FP4 peak (NVFP4 / MXFP4 weights with FP4 activations); None where the part has no
        FP4 tensor cores (everything before Blackwell).
    measured_bandwidth, measured_bf16 : Sourced or None
        Achieved values, where a public measurement exists.
    scale_up : Link or None
        The GPU-to-GPU fabric inside a server or rack (NVLink through NVSwitch or a
        bridge, AMD Infinity Fabric); None for parts without one (L40S).
    pcie : Link or None
        The card's PCIe link (to the host, and between cards that have no scale-up
        fabric); None where the GPU reaches its host otherwise (GB200: NVLink-C2C).
    network : Link or None
        The GPU's NIC to other nodes (scale-out: InfiniBand or RoCE), bandwidth per GPU per
        direction [bytes/s] and latency of one ring step [s], each sourced; ``max_gpus`` None.
        None where no source gives it: then a group larger than one node
        (:attr:`node_gpus`) is refused by name.

    Notes
    -----
    The ridge point is ``peak_bf16 / hbm_bandwidth`` [FLOP/byte], a property.
    :meth:`link` picks the link a tensor-parallel group of T GPUs all-reduces over.
    """

    key: str
    name: str
    memory_label: Sourced
    memory_usable: Sourced
    hbm_bandwidth: Sourced
    peak_bf16: Sourced
    peak_fp8: Sourced | None = attrs.field(default=None, validator=_optional_sourced)
    peak_fp4: Sourced | None = attrs.field(default=None, validator=_optional_sourced)
    measured_bandwidth: Sourced | None = attrs.field(default=None, validator=_optional_sourced)
    measured_bf16: Sourced | None = attrs.field(default=None, validator=_optional_sourced)
    scale_up: Link | None = attrs.field(default=None, validator=_optional_link)
    pcie: Link | None = attrs.field(default=None, validator=_optional_link)
    network: Link | None = attrs.field(default=None, validator=_optional_link)

    @property
    def node_gpus(self) -> int:
        """GPUs in one node [GPUs]: the scale-up domain (``scale_up.max_gpus``: 8 on an HGX board, 72 in an
        NVL72 rack), at least one PCIe server of :data:`MAX_PCIE_GROUP` for a part with PCIe; 1 for a part
        with neither (docs/conventions.md, "Groups that span nodes")."""
        reach = self.scale_up.max_gpus.value if self.scale_up is not None and self.scale_up.max_gpus else 1
        return int(max(reach, MAX_PCIE_GROUP if self.pcie is not None else 1))

    def nodes(self, gpus: int) -> int:
        """Nodes a group of ``gpus`` GPUs spans [nodes], placed node by node: ceil(gpus / :attr:`node_gpus`).

        Raises
        ------
        InvalidValueError
            ``gpus`` not an integer >= 1.
        """
        check_int("gpus", gpus, minimum=1)
        return -(-int(gpus) // self.node_gpus)

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
        """Dense peak [FLOP/s] for ``dtype`` in {"bf16", "fp16", "fp8", "fp4"}.

        Raises
        ------
        InvalidValueError
            For an unknown dtype, or "fp8" ("fp4") on a part without FP8 (FP4) tensor cores.
        """
        if dtype in ("bf16", "fp16", "bfloat16", "float16"):
            return self.peak_bf16.value
        if dtype in ("fp8", "float8"):
            if self.peak_fp8 is None:
                raise InvalidValueError("dtype", dtype, f"{self.name} has no FP8 tensor cores")
            return self.peak_fp8.value
        if dtype in ("fp4", "nvfp4"):
            if self.peak_fp4 is None:
                raise InvalidValueError("dtype", dtype, f"{self.name} has no FP4 tensor cores")
            return self.peak_fp4.value
        raise InvalidValueError("dtype", dtype, "expected bf16, fp16, fp8 or fp4")

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

    def link(self, tensor_parallel_size: int) -> Link:
        """The link a tensor-parallel group of ``tensor_parallel_size`` GPUs all-reduces over.

        The scale-up fabric when the whole group fits on it (``Link.max_gpus``),
        else PCIe within one server (at most :data:`MAX_PCIE_GROUP` GPUs)
        (docs/conventions.md, "Tensor parallelism"). A group larger than one node
        (:attr:`node_gpus`) on a part with a sourced :attr:`network` all-reduces
        hierarchically: this returns the link inside each node (that of a whole node), and the
        inter-node ring runs over :attr:`network` (docs/conventions.md, "Groups that span
        nodes"; :func:`roofline.formulas.hierarchical_allreduce_time`). Such a group must fill
        whole nodes (T a multiple of :attr:`node_gpus`).

        Parameters
        ----------
        tensor_parallel_size : int >= 2 [GPUs]
            T; one GPU all-reduces nothing and needs no link.

        Returns
        -------
        Link

        Raises
        ------
        InvalidValueError
            T not an integer >= 2, or a part whose links cannot hold a group of T GPUs
            (no interconnect facts, or T above the fabric's reach with no PCIe link, or T
            above one node on a part without a sourced ``network``, or T above one node and
            not a multiple of it).

        Examples
        --------
        >>> get_accelerator("h100-pcie").link(2).name, get_accelerator("h100-pcie").link(4).name
        ('NVLink 4 (bridge)', 'PCIe Gen5 x16')
        """
        check_int("tensor_parallel_size", tensor_parallel_size, minimum=2)
        node = self.node_gpus
        if tensor_parallel_size > node and self.network is not None:
            if tensor_parallel_size % node:
                raise InvalidValueError(
                    "tensor_parallel_size", tensor_parallel_size,
                    f"{self.name}: a group larger than one node of {node} GPUs must fill whole nodes "
                    f"(a multiple of {node})")
            return self.link(node) if node > 1 else self.network
        if self.scale_up is not None and self.scale_up.spans(tensor_parallel_size):
            return self.scale_up
        if self.pcie is not None and tensor_parallel_size <= MAX_PCIE_GROUP and self.pcie.spans(tensor_parallel_size):
            return self.pcie
        reach = []
        if self.scale_up is not None and self.scale_up.max_gpus is not None:
            reach.append(f"its {self.scale_up.name} reaches {self.scale_up.max_gpus.value} GPUs")
        if self.pcie is not None:
            reach.append(f"PCIe groups stop at one server of {MAX_PCIE_GROUP} GPUs")
        raise InvalidValueError(
            "tensor_parallel_size",
            tensor_parallel_size,
            f"{self.name}: no modelled link holds a group of {tensor_parallel_size} GPUs"
            + (f" ({'; '.join(reach)}; no sourced network link between nodes for this part)" if reach else
               " (no interconnect facts)"),
        )

    def sources(self) -> dict[str, Sourced]:
        """Every stored value by field name (None fields left out); link values as ``"scale_up.bandwidth"``,
        ``"network.latency"``."""
        out = {
            f.name: getattr(self, f.name)
            for f in attrs.fields(Accelerator)
            if isinstance(getattr(self, f.name), Sourced)
        }
        for prefix in ("scale_up", "pcie", "network"):
            link = getattr(self, prefix)
            if link is not None:
                out.update({f"{prefix}.{name}": value for name, value in link.sources().items()})
        return out


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



# ----------------------------------------------------------------- interconnects (per GPU, per direction)

_PER_DIRECTION = "; per direction is half the bidirectional total"
_NCCL = (
    "NVIDIA/nccl src/graph/tuning.cc (commit b6475625), the latency model NCCL prices a ring all-reduce with: "
    "baseLat + 2 (nRanks - 1) x hwLat"
)
_NCCL_COND = (
    "NCCL's tuning-model constant for one ring step, LL protocol (what NCCL itself charges a small all-reduce); "
    "not a single benchmark run; the per-call base latency (6.6 us) is outside the ring formula"
)
_RCCL = "ROCm/rccl src/graph/tuning.cc (commit 0023b9b0), RCCL's ring latency model (AMD's fork of NCCL's)"
_RCCL_COND = "RCCL's tuning-model constant for one ring step, LL protocol; not a single benchmark run"


def _nccl_latency(hw: str, micro: Fraction) -> Sourced:
    return Sourced(
        micro / 10**6, "s",
        Source("measured", f"{_NCCL}: hwLat[{hw}][Ring][LL] = {float(micro):g} us", "2024", _NCCL_COND),
    )


_NVLINK_LAT = _nccl_latency("NVLINK", Fraction(6, 10))
_PCIE_LAT = _nccl_latency("PCI", Fraction(1))
_XGMI_LAT = Sourced(
    Fraction(23, 10**7), "s",
    Source("measured", _RCCL + ": hwLat[NVLINK (xGMI)][Ring][LL] = 2.3 us", "2023", _RCCL_COND),
)
_AMD_PCIE_LAT = Sourced(
    Fraction(13, 10**7), "s",
    Source("measured", _RCCL + ": hwLat[PCI][Ring][LL] = 1.3 us", "2023", _RCCL_COND),
)


def _pcie(gen: int, citation: str, date: str, latency: Sourced = _PCIE_LAT) -> Link:
    """A PCIe x16 link: Gen4 64 GB/s and Gen5 128 GB/s bidirectional (32 and 64 GB/s per direction)."""
    per_direction = {4: 32 * GB, 5: 64 * GB}[gen]
    return Link(
        name=f"PCIe Gen{gen} x16",
        bandwidth=_ds(per_direction, "bytes/s", citation + f" (PCIe Gen{gen}: {2 * per_direction // GB}GB/s)"
                      + _PER_DIRECTION, date),
        latency=latency,
        generation=_ds(gen, "generation", citation, date),
    )


def _nvlink(gen: int, total_gb: int, max_gpus: int, what: str, citation: str, date: str, reach: str) -> Link:
    """An NVLink of ``total_gb`` GB/s bidirectional per GPU, spanning ``max_gpus`` GPUs."""
    return Link(
        name=f"NVLink {gen} ({what})",
        bandwidth=_ds(total_gb * GB // 2, "bytes/s", citation + f" (NVLink: {total_gb}GB/s)" + _PER_DIRECTION,
                      date),
        latency=_NVLINK_LAT,
        generation=_ds(gen, "generation", citation + f": NVLink generation {gen}", date),
        max_gpus=_ds(max_gpus, "GPUs", reach, date),
    )


_DGX_HOPPER_NET = (
    "NVIDIA DGX BasePOD reference architecture, 'Core Components', DGX H200 and H100 systems: four OSFP ports "
    "serving eight single-port NVIDIA ConnectX-7 VPI, up to 400 Gb/s InfiniBand/Ethernet (one per GPU; DGX H100 "
    "User Guide, 'Network Modules', Table 6 maps each ConnectX-7 to its GPU)"
)
_DGX_B200_NET = (
    "NVIDIA DGX B200 User Guide, 'Hardware Overview', Network (Cluster) card: 4 x OSFP ports for 8 x NVIDIA "
    "ConnectX-7 Single Port Cards, InfiniBand (default) up to 400Gbps each (one per GPU)"
)
_GB200_NET = (
    "NVIDIA Mission Control, North-South network deployment guide (GB200 NVL72), 'GB200 Compute Tray': four "
    "OSFP (InfiniBand) ports per compute tray of 4 GPUs; NVIDIA Multi-Node Tuning Guide, 'Understanding Your "
    "Grace-Blackwell Systems': ConnectX-7 (CX7) on each compute tray, 400 Gb/s InfiniBand NDR (one per GPU)"
)
_NET_LAT = _nccl_latency("NET", Fraction(27, 10))


def _infiniband_ndr(citation: str, date: str) -> Link:
    """One 400 Gb/s ConnectX-7 InfiniBand NDR port per GPU: 50e9 bytes/s per direction (400e9 bits / 8)."""
    return Link(
        name="InfiniBand NDR (ConnectX-7)",
        bandwidth=_ds(50 * GB, "bytes/s", citation + "; 400 Gb/s is per direction (a full-duplex port): "
                      "400e9 / 8 = 50e9 bytes/s", date),
        latency=_NET_LAT,
    )


_HGX_H100 = "NVIDIA HGX H100/H200 8-GPU board: four NVSwitch chips connect all 8 GPUs (Hopper whitepaper, 'HGX H100')"
_HGX_A100 = "NVIDIA HGX A100 8-GPU board: six NVSwitch chips connect all 8 GPUs (A100 datasheet)"

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
    scale_up=_nvlink(4, 900, 8, "NVSwitch", _H100_DS, "2023", _HGX_H100),
    pcie=_pcie(5, _H100_DS, "2023"),
    network=_infiniband_ndr(_DGX_HOPPER_NET, "2024"),
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
    scale_up=_nvlink(
        4, 600, 2, "bridge", _H100_PCIE_DS, "2023",
        "NVIDIA H100 PCIe product brief PB-11133-001: the NVLink bridge joins two adjacent H100 PCIe cards",
    ),
    pcie=_pcie(5, _H100_PCIE_DS, "2023"),
)

H200_SXM = Accelerator(
    key="h200-sxm",
    name="NVIDIA H200 SXM 141GB",
    memory_label=_ds(141 * GB, "bytes", _H200_DS + " (141 GB HBM3e)", "2024"),
    memory_usable=Sourced(143_771 * MiB, "bytes", Source("measured", _SMI + ": 143,771 MiB", "2024")),
    hbm_bandwidth=_ds(4_800_000_000_000, "bytes/s", _H200_DS, "2024"),
    peak_bf16=_ds(989_400_000_000_000, "FLOP/s", _H200_DS + _DENSE, "2024"),
    peak_fp8=_ds(1_978_900_000_000_000, "FLOP/s", _H200_DS + _DENSE, "2024"),
    scale_up=_nvlink(4, 900, 8, "NVSwitch", _H200_DS, "2024", _HGX_H100),
    pcie=_pcie(5, _H200_DS, "2024"),
    network=_infiniband_ndr(_DGX_HOPPER_NET, "2024"),
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
    scale_up=_nvlink(3, 600, 8, "NVSwitch", _A100_DS, "2020", _HGX_A100),
    pcie=_pcie(4, _A100_DS, "2020"),
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
    scale_up=_nvlink(3, 600, 8, "NVSwitch", _A100_DS, "2021", _HGX_A100),
    pcie=_pcie(4, _A100_DS, "2021"),
)

# ------------------------------------------------------------ accelerators people buy now

_B200_DS = (
    "NVIDIA HGX B200 datasheet, 'Technical Specifications' table, individual Blackwell GPU (HGX B200 column): "
    "FP4 Tensor Core 18 PFLOPS, FP16/BF16 Tensor Core 4.5 PFLOPS, FP8/FP6 9 PFLOPS, 180GB HBM3E | 7.7TB/s, "
    "5th Generation NVLink 1.8TB/s, PCIe Gen5 128GB/s"
)
_GB200_DS = (
    "NVIDIA GB200 NVL72 datasheet, 'Technical Specifications' table, individual Blackwell GPU (GB200 NVL72 column): "
    "FP4 Tensor Core 20 PFLOPS, FP16/BF16 Tensor Core 5 PFLOPS, FP8/FP6 10 PFLOPS, 186GB HBM3E | 8TB/s, "
    "5th Generation NVLink 1.8TB/s"
)
_SPARSE = "; tensor figures printed with sparsity (footnote), dense is half"
_H20_DS = (
    "NVIDIA HGX H20 specifications as published by NVIDIA partners: 96GB HBM3, 4.0TB/s, FP16/BF16 Tensor Core "
    "148 TFLOPS and FP8 296 TFLOPS dense (about 15 % of H100), NVLink 900GB/s, PCIe Gen5 128GB/s"
)
_L40S_DS = (
    "NVIDIA L40S datasheet, specifications table: 48GB GDDR6 with ECC, 864GB/s, BFLOAT16 Tensor Core "
    "362.05 | 733* TFLOPS, FP8 Tensor Core 733 | 1,466* TFLOPS (* with sparsity), "
    "PCIe Gen4 x16: 64GB/s bidirectional, no NVLink"
)
_MI300X_DS = (
    "AMD Instinct MI300X data sheet, specifications: 192 GB HBM3, 5.3 TB/s peak memory bandwidth, peak FP16/BF16 "
    "1,307.4 TFLOPs (2,614.9 with sparsity), peak FP8 2,614.9 TFLOPs (5,229.8 with sparsity), 7 AMD Infinity "
    "Fabric links at 128 GB/s peak each (896 GB/s), PCIe Gen5 x16 128 GB/s"
)
_MI325X_DS = (
    "AMD Instinct MI325X data sheet, specifications: 256 GB HBM3E, 6 TB/s peak memory bandwidth, peak FP16/BF16 "
    "1,307.4 TFLOPs, peak FP8 2,614.9 TFLOPs (sparsity doubles both), 7 AMD Infinity Fabric links at 128 GB/s "
    "peak each (896 GB/s), PCIe Gen5 x16 128 GB/s"
)
_HGX_B200 = "NVIDIA HGX B200: two NVLink Switch chips connect all 8 GPUs (NVLink domain of 8)"
_NVL72 = "NVIDIA GB200 NVL72: 72 GPUs in one NVLink domain (18 NVLink Switch trays)"
_AMD_PLATFORM = "AMD Instinct MI300X/MI325X platform: 8 GPUs fully connected by Infinity Fabric (UBB 2.0 board)"


def _smi(mib: int, where: str, date: str) -> Sourced:
    return Sourced(mib * MiB, "bytes", Source("measured", f"nvidia-smi total memory {mib:,} MiB ({where})", date))


def _infinity_fabric(citation: str, date: str) -> Link:
    """AMD Infinity Fabric: 7 links x 128 GB/s bidirectional = 896 GB/s, 448 GB/s per direction per GPU."""
    return Link(
        name="Infinity Fabric (xGMI)",
        bandwidth=_ds(448 * GB, "bytes/s", citation + " (7 x 128 GB/s = 896 GB/s)" + _PER_DIRECTION, date),
        latency=_XGMI_LAT,
        max_gpus=_ds(8, "GPUs", _AMD_PLATFORM, date),
    )


B200 = Accelerator(
    key="b200",
    name="NVIDIA B200 (HGX, 180GB)",
    memory_label=_ds(180 * GB, "bytes", _B200_DS, "2025"),
    memory_usable=_smi(183_359, "NVIDIA/TensorRT-LLM#10278, 8x B200", "2025-12"),
    hbm_bandwidth=_ds(7_700_000_000_000, "bytes/s", _B200_DS + " (the 2024 launch figure was 8TB/s)", "2025"),
    peak_bf16=_ds(2_250_000_000_000_000, "FLOP/s", _B200_DS + _SPARSE, "2025"),
    peak_fp8=_ds(4_500_000_000_000_000, "FLOP/s", _B200_DS + _SPARSE, "2025"),
    peak_fp4=_ds(9_000_000_000_000_000, "FLOP/s", _B200_DS + _SPARSE, "2025"),
    scale_up=_nvlink(5, 1800, 8, "NVSwitch", _B200_DS, "2025", _HGX_B200),
    pcie=_pcie(5, _B200_DS, "2025"),
    network=_infiniband_ndr(_DGX_B200_NET, "2025"),
)

GB200 = Accelerator(
    key="gb200",
    name="NVIDIA GB200 (NVL72, one Blackwell GPU, 186GB)",
    memory_label=_ds(186 * GB, "bytes", _GB200_DS, "2025"),
    memory_usable=_smi(189_471, "public logs of GB200 NVL72 trays, driver 580", "2025"),
    hbm_bandwidth=_ds(8_000_000_000_000, "bytes/s", _GB200_DS, "2025"),
    peak_bf16=_ds(2_500_000_000_000_000, "FLOP/s", _GB200_DS + _SPARSE, "2025"),
    peak_fp8=_ds(5_000_000_000_000_000, "FLOP/s", _GB200_DS + _SPARSE, "2025"),
    peak_fp4=_ds(10_000_000_000_000_000, "FLOP/s", _GB200_DS + _SPARSE, "2025"),
    scale_up=_nvlink(5, 1800, 72, "NVL72", _GB200_DS, "2025", _NVL72),
    network=_infiniband_ndr(_GB200_NET, "2025"),
)

H20 = Accelerator(
    key="h20",
    name="NVIDIA H20 96GB",
    memory_label=_ds(96 * GB, "bytes", _H20_DS, "2024"),
    memory_usable=_smi(97_871, "deepseek-ai/DeepEP#17, 8x H20, driver 535", "2025-02"),
    hbm_bandwidth=_ds(4_000_000_000_000, "bytes/s", _H20_DS, "2024"),
    peak_bf16=_ds(148_000_000_000_000, "FLOP/s", _H20_DS, "2024"),
    peak_fp8=_ds(296_000_000_000_000, "FLOP/s", _H20_DS, "2024"),
    scale_up=_nvlink(4, 900, 8, "NVSwitch", _H20_DS, "2024", "NVIDIA HGX H20 8-GPU board (NVSwitch, as HGX H100)"),
    pcie=_pcie(5, _H20_DS, "2024"),
)

L40S = Accelerator(
    key="l40s",
    name="NVIDIA L40S 48GB",
    memory_label=_ds(48 * GB, "bytes", _L40S_DS, "2023"),
    memory_usable=_smi(46_068, "akash-network/provider-configs#99, driver 595", "2026-09"),
    hbm_bandwidth=_ds(864 * GB, "bytes/s", _L40S_DS + " (GDDR6, not HBM)", "2023"),
    peak_bf16=_ds(362_050_000_000_000, "FLOP/s", _L40S_DS, "2023"),
    peak_fp8=_ds(733_000_000_000_000, "FLOP/s", _L40S_DS, "2023"),
    pcie=_pcie(4, _L40S_DS, "2023"),
)

MI300X = Accelerator(
    key="mi300x",
    name="AMD Instinct MI300X 192GB",
    memory_label=_ds(192 * GB, "bytes", _MI300X_DS, "2023-12"),
    memory_usable=Sourced(
        205_822_885_888,
        "bytes",
        Source("measured", "rocm-smi --showmeminfo vram 'VRAM Total Memory (B): 205822885888' in public logs "
               "(192 GiB less 320 MiB); torch.cuda.mem_get_info reports the same total", "2025"),
    ),
    hbm_bandwidth=_ds(5_300_000_000_000, "bytes/s", _MI300X_DS, "2023-12"),
    peak_bf16=_ds(1_307_400_000_000_000, "FLOP/s", _MI300X_DS, "2023-12"),
    peak_fp8=_ds(2_614_900_000_000_000, "FLOP/s", _MI300X_DS, "2023-12"),
    scale_up=_infinity_fabric(_MI300X_DS, "2023-12"),
    pcie=_pcie(5, _MI300X_DS, "2023-12", _AMD_PCIE_LAT),
)

#: amdgpu reserves 320 MiB of an MI300X's 192 GiB (192 GiB - 205,822,885,888 B); the same rule on 256 GiB.
_AMDGPU_RESERVED = 192 * GiB - 205_822_885_888

MI325X = Accelerator(
    key="mi325x",
    name="AMD Instinct MI325X 256GB",
    memory_label=_ds(256 * GB, "bytes", _MI325X_DS, "2024-10"),
    memory_usable=Sourced(
        256 * GiB - _AMDGPU_RESERVED,
        "bytes",
        Source("derived", "256 GiB of HBM3E less the 320 MiB amdgpu keeps on an MI300X "
               "(192 GiB - 205,822,885,888 B) = 274,542,362,624 B; a public amdgpu sysfs capture of an MI325X "
               "(mem_info_vram_total) shows the same number", "2026"),
    ),
    hbm_bandwidth=_ds(6_000_000_000_000, "bytes/s", _MI325X_DS, "2024-10"),
    peak_bf16=_ds(1_307_400_000_000_000, "FLOP/s", _MI325X_DS, "2024-10"),
    peak_fp8=_ds(2_614_900_000_000_000, "FLOP/s", _MI325X_DS, "2024-10"),
    scale_up=_infinity_fabric(_MI325X_DS, "2024-10"),
    pcie=_pcie(5, _MI325X_DS, "2024-10", _AMD_PCIE_LAT),
)

ACCELERATORS: dict[str, Accelerator] = {
    a.key: a
    for a in (H100_SXM, H100_PCIE, H200_SXM, A100_40GB, A100_80GB, B200, GB200, H20, L40S, MI300X, MI325X)
}

_ALIASES = {
    "h100": "h100-sxm",
    "h100-sxm5": "h100-sxm",
    "h100-sxm-80gb": "h100-sxm",
    "h200": "h200-sxm",
    "a100": "a100-80gb",
    "a100-80": "a100-80gb",
    "a100-40": "a100-40gb",
    "b200-sxm": "b200",
    "h20-96gb": "h20",
    "l40s-48gb": "l40s",
    "mi300": "mi300x",
    "mi325": "mi325x",
}


def accelerator_names() -> list[str]:
    """The preset keys, sorted."""
    return sorted(ACCELERATORS)


def accelerator_aliases() -> dict[str, list[str]]:
    """The other names :func:`get_accelerator` reads, by preset key: ``{"h100-sxm": ["h100", ...], ...}``
    (every key present, sorted; an empty list where a preset has none)."""
    out: dict[str, list[str]] = {key: [] for key in accelerator_names()}
    for alias, key in sorted(_ALIASES.items()):
        out[key].append(alias)
    return out


def get_accelerator(name: str) -> Accelerator:
    """The accelerator preset called ``name`` (case-insensitive; a few aliases such as "h100").

    Parameters
    ----------
    name : str
        A key of :data:`ACCELERATORS` (``"h100-sxm"``, ``"h100-pcie"``, ``"h200-sxm"``,
        ``"a100-40gb"``, ``"a100-80gb"``, ``"b200"``, ``"gb200"``, ``"h20"``, ``"l40s"``,
        ``"mi300x"``, ``"mi325x"``) or an alias.

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
    if not isinstance(name, str):  # its type, not its repr (an Accelerator's runs to many lines of citations)
        raise UnknownPresetError("accelerator", f"a {type(name).__name__}, not a name", accelerator_names())
    key = name_key(name).replace("_", "-").replace(" ", "-")
    key = _ALIASES.get(key, key)
    try:
        return ACCELERATORS[key]
    except KeyError:
        raise UnknownPresetError("accelerator", name, accelerator_names(), aliases=_ALIASES) from None
