"""Micro-benchmarks: achievable memory bandwidth (a large copy and a large read) and dense matmul FLOP/s."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from ..errors import InvalidValueError
from ..hardware import GiB, MiB
from .device import free_memory, import_torch, resolve_torch_device, time_calls, timing_summary, torch_dtype
from .plan import check_shapes

__all__ = ["measure_bandwidth", "measure_matmul"]


# --------------------------------------------------------------------------- bandwidth


def measure_bandwidth(
    device: str = "auto", *, nbytes: int = 2 * GiB, repetitions: int = 20, warmup: int = 3
) -> dict[str, Any]:
    """Achievable memory bandwidth of a device, by a large copy and a large read.

    Parameters
    ----------
    device : str
        ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
    nbytes : int [bytes], >= 1 MiB
        Size of the float32 buffer (rounded down to a multiple of 4). It must dwarf
        the last-level cache (H100 L2: 50 MB), or the cache is measured instead.
    repetitions : int, >= 1
    warmup : int, >= 0

    Returns
    -------
    dict
        ``value`` [bytes/s]: the best repetition of the better method; ``typical``
        [bytes/s]: that method's median repetition; ``method``; ``buffer_bytes``;
        ``methods``: for ``"copy"`` (``dst.copy_(src)``: reads and writes the buffer,
        2 x nbytes counted) and ``"read"`` (``torch.sum(src)``: nbytes counted),
        ``bytes_per_repetition``, ``times_s``, ``best`` and ``median`` [bytes/s],
        ``spread`` [1].

    Raises
    ------
    RooflineError
        PyTorch missing (install roofline[calibrate]); InvalidValueError for a bad
        argument or a buffer that does not fit in free memory.

    Notes
    -----
    Decode streams weights and KV (reads), so the read figure is the closer one;
    both are kept and the better is used as the achievable bandwidth.
    """
    torch = import_torch()
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < MiB:
        raise InvalidValueError("nbytes", nbytes, "must be an integer >= 1 MiB (1,048,576)")
    _check_counts(repetitions, warmup)
    dev = resolve_torch_device(torch, device)
    n = nbytes // 4
    size = 4 * n
    if 2 * size > 0.9 * free_memory(torch, dev):
        raise InvalidValueError("nbytes", nbytes, "two buffers of this size do not fit in free memory")
    methods = _bandwidth_methods(torch, dev, n, warmup=warmup, repetitions=repetitions)
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    best = max(methods, key=lambda m: methods[m]["best"])
    return {
        "value": methods[best]["best"],
        "typical": methods[best]["median"],
        "method": best,
        "buffer_bytes": size,
        "methods": methods,
    }


def _bandwidth_methods(torch: Any, dev: Any, n: int, *, warmup: int, repetitions: int) -> dict[str, Any]:
    """Time a copy and a read of ``n`` float32 elements; the buffers are freed on return."""
    size = 4 * n
    src = torch.empty(n, dtype=torch.float32, device=dev).fill_(1.0)
    dst = torch.empty_like(src)

    def copy() -> Any:
        return dst.copy_(src)

    def read() -> Any:
        return torch.sum(src)

    methods = {}
    for name, fn, moved in (("copy", copy, 2 * size), ("read", read, size)):
        s = timing_summary(time_calls(torch, dev, fn, warmup=warmup, repetitions=repetitions))
        methods[name] = {
            "bytes_per_repetition": moved,
            "times_s": s["times_s"],
            "best": moved / s["best_s"],
            "median": moved / s["median_s"],
            "spread": s["spread"],
        }
    return methods


def _check_counts(repetitions: Any, warmup: Any) -> None:
    if isinstance(repetitions, bool) or not isinstance(repetitions, int) or repetitions < 1:
        raise InvalidValueError("repetitions", repetitions, "must be an integer >= 1")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise InvalidValueError("warmup", warmup, "must be an integer >= 0")


# --------------------------------------------------------------------------- matmul


def measure_matmul(
    device: str = "auto",
    *,
    shapes: Sequence[tuple[int, int, int]] = ((4096, 4096, 4096), (8192, 8192, 8192)),
    dtype: str = "bfloat16",
    repetitions: int = 20,
    warmup: int = 5,
) -> dict[str, Any]:
    """Dense matmul FLOP/s over a few shapes: best and typical.

    Parameters
    ----------
    device : str
        ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
    shapes : sequence of (m, n, k), integers >= 1
        ``torch.mm`` of an [m, k] and a [k, n] matrix into a preallocated [m, n] output.
    dtype : {"bfloat16", "float16", "float32"}
    repetitions : int, >= 1
    warmup : int, >= 0

    Returns
    -------
    dict
        ``value`` [FLOP/s]: best over shapes of 2 m n k / (fastest repetition);
        ``typical`` [FLOP/s]: median over shapes of 2 m n k / (median repetition);
        ``dtype``; ``shapes``: per shape ``m``, ``n``, ``k``, ``flops`` [FLOP],
        ``times_s``, ``best`` and ``median`` [FLOP/s], ``spread`` [1].

    Raises
    ------
    RooflineError
        PyTorch missing (install roofline[calibrate]); InvalidValueError for a bad
        shape, dtype or count.

    Notes
    -----
    The dense figure: no 2:4 sparsity (docs/conventions.md, Units). Inputs are random
    normal values (tensor-core speed does not depend on them on GPUs; zeros or
    denormals could change CPU speed).
    """
    torch = import_torch()
    try:
        dims: Any = tuple(tuple(s) for s in shapes)
    except TypeError:
        raise InvalidValueError("shapes", shapes, "must be a sequence of (m, n, k)") from None
    check_shapes("shapes", dims)
    _check_counts(repetitions, warmup)
    dev = resolve_torch_device(torch, device)
    tdtype = torch_dtype(torch, dtype, "dtype")
    with torch.inference_mode():
        results = [
            _time_matmul(torch, dev, tdtype, m, n, k, warmup=warmup, repetitions=repetitions) for m, n, k in dims
        ]
    return {
        "value": max(r["best"] for r in results),
        "typical": statistics.median(r["median"] for r in results),
        "dtype": str(tdtype).removeprefix("torch."),
        "shapes": results,
    }


def _time_matmul(
    torch: Any, dev: Any, dtype: Any, m: int, n: int, k: int, *, warmup: int, repetitions: int
) -> dict[str, Any]:
    """Time ``torch.mm`` of [m, k] x [k, n] into a preallocated output; tensors freed on return."""
    a = torch.randn(m, k, device=dev, dtype=dtype)
    b = torch.randn(k, n, device=dev, dtype=dtype)
    out = torch.empty(m, n, device=dev, dtype=dtype)

    def mm() -> Any:
        return torch.mm(a, b, out=out)

    s = timing_summary(time_calls(torch, dev, mm, warmup=warmup, repetitions=repetitions))
    flops = 2 * m * n * k
    return {
        "m": m, "n": n, "k": k, "flops": flops, "times_s": s["times_s"],
        "best": flops / s["best_s"], "median": flops / s["median_s"], "spread": s["spread"],
    }
