"""The device: importing PyTorch, resolving a device, its free memory and facts, and timing calls on it.

PyTorch is imported inside the functions, never at module level, so that this module
imports (and its doctests run) without it; a function that needs it raises
:class:`roofline.errors.MissingExtraError` saying to install ``roofline[calibrate]``.
"""

from __future__ import annotations

import math
import os
import platform
import re
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import InvalidValueError, MissingExtraError
from ..hardware import GiB, get_accelerator

__all__ = [
    "import_torch",
    "resolve_device",
    "resolve_torch_device",
    "torch_dtype",
    "time_calls",
    "timing_summary",
    "free_memory",
    "device_info",
    "preset_for_device",
    "spread",
]


def import_torch() -> Any:
    """Import and return :mod:`torch`.

    Returns
    -------
    module
        The ``torch`` module.

    Raises
    ------
    MissingExtraError
        PyTorch is not installed; the message says to install ``roofline[calibrate]``.
    """
    try:
        import torch
    except ImportError:
        raise MissingExtraError("PyTorch", "calibrate", "roofline calibrate needs it") from None
    return torch


def torch_dtype(torch: Any, name: str, field: str) -> Any:
    """The ``torch.dtype`` a dtype name stands for (``"bfloat16"``, ``"bf16"``, ``"torch.float16"``...).

    Raises
    ------
    InvalidValueError
        Naming ``field``, for anything but bfloat16, float16 or float32.
    """
    table = {
        "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
        "float16": torch.float16, "fp16": torch.float16,
        "float32": torch.float32, "fp32": torch.float32,
    }
    key = name.strip().lower().removeprefix("torch.")
    if key not in table:
        raise InvalidValueError(field, name, "calibrate measures bfloat16, float16 or float32 only")
    return table[key]


def resolve_device(device: str = "auto") -> Any:
    """The :class:`torch.device` that ``device`` names.

    Parameters
    ----------
    device : str
        ``"auto"`` (CUDA when PyTorch sees a GPU, else CPU), ``"cpu"``, ``"cuda"`` or
        ``"cuda:N"``.

    Returns
    -------
    torch.device
        With an index for CUDA.

    Raises
    ------
    MissingExtraError
        PyTorch missing (install roofline[calibrate]); InvalidValueError for another
        device type, or CUDA asked for where there is none.
    """
    return resolve_torch_device(import_torch(), device)


def resolve_torch_device(torch: Any, device: str) -> Any:
    """:func:`resolve_device` with the ``torch`` module given (for callers that imported it already)."""
    if not isinstance(device, str):
        raise InvalidValueError("device", device, "expected 'auto', 'cpu', 'cuda' or 'cuda:N'")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise InvalidValueError("device", device, f"not a device: {exc}") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise InvalidValueError("device", device, "CUDA is not available (PyTorch sees no GPU)")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
    elif dev.type != "cpu":
        raise InvalidValueError("device", device, "calibrate supports 'cpu' and 'cuda' devices")
    return dev


def _sync(torch: Any, dev: Any) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def time_calls(torch: Any, dev: Any, fn: Callable[[], Any], *, warmup: int, repetitions: int) -> list[float]:
    """Run ``fn`` warmup times, then time each of ``repetitions`` runs [s].

    CUDA: a pair of ``torch.cuda.Event`` per repetition; CPU: ``time.perf_counter``.
    Every time is at least 1e-9 s (a timer can read 0 for a very short call).
    """
    for _ in range(warmup):
        fn()
    _sync(torch, dev)
    if dev.type == "cuda":
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(repetitions)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(repetitions)]
        for start, end in zip(starts, ends, strict=True):
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(dev)
        times = [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends, strict=True)]
    else:
        times = []
        for _ in range(repetitions):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    # A timer can read 0 for a very short call; never report a zero time.
    return [max(t, 1e-9) for t in times]


def timing_summary(times: Sequence[float]) -> dict[str, Any]:
    """``times_s`` (the list), ``best_s`` (minimum), ``median_s`` [s] and ``spread`` [1] of repeated timings."""
    return {
        "times_s": list(times),
        "best_s": min(times),
        "median_s": statistics.median(times),
        "spread": spread(times),
    }


def free_memory(torch: Any, dev: Any) -> int:
    """Free memory of the device [bytes]: ``torch.cuda.mem_get_info`` on CUDA, available RAM on CPU."""
    if dev.type == "cuda":
        free, _total = torch.cuda.mem_get_info(dev)
        return int(free)
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 8 * GiB


def _nvidia_smi(index: int) -> dict[str, Any]:
    query = "driver_version,power.limit"
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", "-i", str(index)],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {}
    parts = [p.strip() for p in out.split(",")]
    info: dict[str, Any] = {}
    if parts and parts[0]:
        info["driver"] = parts[0]
    if len(parts) > 1:
        try:
            info["power_limit_w"] = float(parts[1])
        except ValueError:
            pass
    return info


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return "CPU: " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "CPU: " + (platform.processor() or platform.machine() or "unknown")


def device_info(torch: Any, dev: Any, accelerator: str | None) -> dict[str, Any]:
    """The calibration file's ``device`` object: name, memory [bytes], driver and, for CUDA, SMs and power limit.

    ``preset`` is ``accelerator`` when given (checked with
    :func:`roofline.hardware.get_accelerator`), else recognised from a CUDA device's name
    (:func:`preset_for_device`), else None; ``preset_from`` says which.
    """
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        name = torch.cuda.get_device_name(dev)
        info: dict[str, Any] = {
            "type": "cuda",
            "index": dev.index,
            "name": name,
            "memory_total_bytes": int(props.total_memory),
            "multiprocessors": int(props.multi_processor_count),
            "capability": f"{props.major}.{props.minor}",
            "driver": None,
            "power_limit_w": None,
        }
        info.update(_nvidia_smi(dev.index))
    else:
        try:
            total = int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
            total = 1
        name = _cpu_name()
        info = {
            "type": "cpu",
            "name": name,
            "memory_total_bytes": total,
            "threads": int(torch.get_num_threads()),
            "driver": None,
        }
    if accelerator is not None:
        info["preset"] = get_accelerator(accelerator).key
        info["preset_from"] = "given (--accelerator)"
    else:
        info["preset"] = preset_for_device(name) if dev.type == "cuda" else None
        info["preset_from"] = "device name" if info["preset"] else "no preset matches this device"
    return info


def spread(times: Sequence[float]) -> float:
    """Relative spread of repeated timings: (max - min) / median [dimensionless, >= 0].

    Parameters
    ----------
    times : sequence of float [s], non-empty, each > 0

    Returns
    -------
    float, >= 0 (0 when every repetition took the same time).

    Raises
    ------
    InvalidValueError
        For an empty sequence or a time that is not a finite number > 0.

    Examples
    --------
    >>> spread([1.0, 2.0, 4.0])
    1.5
    """
    if len(times) == 0:
        raise InvalidValueError("times", list(times), "needs at least one timing")
    for t in times:
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
            raise InvalidValueError("times", t, "every time must be a finite number > 0")
    return (max(times) - min(times)) / statistics.median(times)


# Device names as PyTorch reports them -> preset keys. Order matters (first match).
_DEVICE_PATTERNS: tuple[tuple[str, str | None], ...] = (
    (r"h100.*(pcie)", "h100-pcie"),
    (r"h100.*(nvl)", None),
    (r"h100", "h100-sxm"),  # "NVIDIA H100 80GB HBM3" is the SXM5 part
    (r"h200.*(nvl)", None),
    (r"h200", "h200-sxm"),
    (r"a100.*pcie", None),  # A100 PCIe (1,935 GB/s for 80 GB): no preset
    (r"a100.*80", "a100-80gb"),
    (r"a100.*40", "a100-40gb"),
)


def preset_for_device(name: str) -> str | None:
    """The accelerator preset key for a device name as PyTorch reports it, or None.

    Parameters
    ----------
    name : str
        ``torch.cuda.get_device_name()``, e.g. ``"NVIDIA H100 80GB HBM3"``.

    Returns
    -------
    str or None
        A key of :data:`roofline.hardware.ACCELERATORS`; None for parts without a
        preset (PCIe A100, NVL variants, CPUs), so that no datasheet is assumed.

    Examples
    --------
    >>> preset_for_device("NVIDIA H100 80GB HBM3")
    'h100-sxm'
    >>> preset_for_device("NVIDIA A100-SXM4-80GB")
    'a100-80gb'
    >>> preset_for_device("cpu") is None
    True
    """
    low = name.lower()
    for pattern, key in _DEVICE_PATTERNS:
        if re.search(pattern, low):
            return key
    return None
