"""The measurements behind ``roofline calibrate``: bandwidth, matmul and decode steps (PyTorch).

PyTorch is imported inside the functions, never at module level, so that this module
imports (and its doctests run) without it; a function that needs it raises
:class:`roofline.errors.RooflineError` saying to install ``roofline[calibrate]``.
"""

from __future__ import annotations

import datetime
import math
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from ..errors import InvalidValueError, RooflineError
from ..hardware import GiB, MiB, get_accelerator
from ..models import ModelConfig
from .schema import FILE_KIND, SCHEMA_VERSION, parse_calibration, preset_for_device, spread

__all__ = [
    "TINY_MODEL",
    "CalibrationPlan",
    "run_calibration",
    "measure_bandwidth",
    "measure_matmul",
    "measure_decode",
    "decode_attention",
    "import_torch",
    "resolve_device",
]


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

_ATTENTION = (
    "torch.nn.functional.scaled_dot_product_attention; GQA as query groups "
    "(q viewed [batch, kv_heads, heads/kv_heads, head_dim] against the [batch, kv_heads, "
    "context, head_dim] cache, no copy of K or V)"
)
_STEP = (
    "embedding gather; per layer: RMSNorm, fused QKV projection, RoPE, KV write at "
    "position context-1, attention over context tokens, O projection, residual, RMSNorm, "
    "fused gate/up projection, SiLU x up, down projection, residual; final norm; lm_head; "
    "argmax (greedy sampling). Random weights normal(0, 0.02); nothing downloaded."
)


def import_torch() -> Any:
    """Import and return :mod:`torch`.

    Returns
    -------
    module
        The ``torch`` module.

    Raises
    ------
    RooflineError
        PyTorch is not installed; the message says to install ``roofline[calibrate]``.
    """
    try:
        import torch
    except ImportError:
        raise RooflineError(
            "PyTorch is not installed; roofline calibrate needs it: "
            "install roofline[calibrate] (pip install 'roofline[calibrate]')"
        ) from None
    return torch


# --------------------------------------------------------------------------- the plan


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


def _check_shapes(field: str, value: Any) -> None:
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
    _check_shapes(attribute.name, value)


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


# --------------------------------------------------------------------------- helpers


def _torch_dtype(torch: Any, name: str, field: str) -> Any:
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
    RooflineError
        PyTorch missing (install roofline[calibrate]); InvalidValueError for another
        device type, or CUDA asked for where there is none.
    """
    return _resolve_device(import_torch(), device)


def _resolve_device(torch: Any, device: str) -> Any:
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


def _time(torch: Any, dev: Any, fn: Callable[[], Any], *, warmup: int, repetitions: int) -> list[float]:
    """Run ``fn`` warmup times, then time each of ``repetitions`` runs [s]."""
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


def _summary(times: Sequence[float]) -> dict[str, Any]:
    return {
        "times_s": list(times),
        "best_s": min(times),
        "median_s": statistics.median(times),
        "spread": spread(times),
    }


def _free_memory(torch: Any, dev: Any) -> int:
    if dev.type == "cuda":
        free, _total = torch.cuda.mem_get_info(dev)
        return int(free)
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 8 * GiB


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
    dev = _resolve_device(torch, device)
    n = nbytes // 4
    size = 4 * n
    if 2 * size > 0.9 * _free_memory(torch, dev):
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
        s = _summary(_time(torch, dev, fn, warmup=warmup, repetitions=repetitions))
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
    The dense figure: no 2:4 sparsity (CONVENTIONS.md, Units). Inputs are random
    normal values (tensor-core speed does not depend on them on GPUs; zeros or
    denormals could change CPU speed).
    """
    torch = import_torch()
    try:
        dims: Any = tuple(tuple(s) for s in shapes)
    except TypeError:
        raise InvalidValueError("shapes", shapes, "must be a sequence of (m, n, k)") from None
    _check_shapes("shapes", dims)
    _check_counts(repetitions, warmup)
    dev = _resolve_device(torch, device)
    tdtype = _torch_dtype(torch, dtype, "dtype")
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


# --------------------------------------------------------------------------- decode


def _time_matmul(
    torch: Any, dev: Any, dtype: Any, m: int, n: int, k: int, *, warmup: int, repetitions: int
) -> dict[str, Any]:
    """Time ``torch.mm`` of [m, k] x [k, n] into a preallocated output; tensors freed on return."""
    a = torch.randn(m, k, device=dev, dtype=dtype)
    b = torch.randn(k, n, device=dev, dtype=dtype)
    out = torch.empty(m, n, device=dev, dtype=dtype)

    def mm() -> Any:
        return torch.mm(a, b, out=out)

    s = _summary(_time(torch, dev, mm, warmup=warmup, repetitions=repetitions))
    flops = 2 * m * n * k
    return {
        "m": m, "n": n, "k": k, "flops": flops, "times_s": s["times_s"],
        "best": flops / s["best_s"], "median": flops / s["median_s"], "spread": s["spread"],
    }


def decode_attention(q: Any, k: Any, v: Any) -> Any:
    """Decode attention of one new token per sequence over its KV cache (GQA without copies).

    Parameters
    ----------
    q : torch.Tensor, shape [batch, heads, head_dim]
        The new token's queries.
    k, v : torch.Tensor, shape [batch, kv_heads, context, head_dim]
        The cache, the new token included; ``heads`` must be a multiple of ``kv_heads``.

    Returns
    -------
    torch.Tensor, shape [batch, heads, head_dim]
        softmax(q k^T / sqrt(head_dim)) v per head, query head ``i`` using KV head
        ``i // (heads / kv_heads)`` (the Hugging Face ``repeat_kv`` order).

    Raises
    ------
    InvalidValueError
        For shapes that do not match.

    Notes
    -----
    One call of ``torch.nn.functional.scaled_dot_product_attention`` with the query
    heads of each KV group laid out as that group's query positions
    ([batch, kv_heads, heads / kv_heads, head_dim]): one query token sees every
    cached token, so no mask is needed and K and V are read once, not copied
    ``heads / kv_heads`` times as an expanded cache would be.
    """
    import torch

    if q.dim() != 3 or k.dim() != 4 or v.shape != k.shape:
        raise InvalidValueError("q", tuple(q.shape), f"expected q [B, H, d] and k, v [B, H_kv, c, d]; "
                                f"k {tuple(k.shape)}, v {tuple(v.shape)}")
    batch, heads, dim = q.shape
    if k.shape[0] != batch or k.shape[3] != dim or heads % k.shape[1]:
        raise InvalidValueError("k", tuple(k.shape), f"does not match q {tuple(q.shape)}")
    kv_heads = k.shape[1]
    out = torch.nn.functional.scaled_dot_product_attention(
        q.reshape(batch, kv_heads, heads // kv_heads, dim), k, v
    )
    return out.reshape(batch, heads, dim)


class _Weights:
    """Random weights of a decoder in nn.Linear layout ([out, in]); fused QKV and gate/up."""

    def __init__(self, torch: Any, model: ModelConfig, dev: Any, dtype: Any) -> None:
        def w(*shape: int) -> Any:
            return torch.empty(*shape, device=dev, dtype=dtype).normal_(0.0, 0.02)

        def ones(n: int) -> Any:
            return torch.ones(n, device=dev, dtype=dtype)

        def zeros(n: int) -> Any:
            return torch.zeros(n, device=dev, dtype=dtype)

        h, q, kv, m = model.hidden_size, model.q_width, model.kv_width, model.intermediate_size
        layernorm = model.norm == "layernorm"
        self.embedding = w(model.vocab_size, h)
        self.layers = []
        for _ in range(model.num_hidden_layers):
            layer = {
                "ln1": ones(h), "ln1_b": zeros(h) if layernorm else None,
                "wqkv": w(q + 2 * kv, h), "bqkv": zeros(q + 2 * kv) if model.qkv_bias else None,
                "wo": w(h, q), "bo": zeros(h) if model.o_bias else None,
                "ln2": ones(h), "ln2_b": zeros(h) if layernorm else None,
                "q_norm": ones(model.head_dim) if model.qk_norm else None,
                "k_norm": ones(model.head_dim) if model.qk_norm else None,
            }
            if model.gated_mlp:
                layer["wup"] = w(2 * m, h)
                layer["bup"] = zeros(2 * m) if model.mlp_bias else None
            else:
                layer["wup"] = w(m, h)
                layer["bup"] = zeros(m) if model.mlp_bias else None
            layer["wdown"] = w(h, m)
            layer["bdown"] = zeros(h) if model.mlp_bias else None
            self.layers.append(layer)
        self.final = ones(h)
        self.final_b = zeros(h) if layernorm else None
        self.lm_head = self.embedding if model.tie_word_embeddings else w(model.vocab_size, h)


def _make_step(torch: Any, model: ModelConfig, weights: _Weights, caches: list[tuple[Any, Any]],
               batch: int, context: int, dev: Any, dtype: Any) -> Callable[[], Any]:
    """One decode step for ``batch`` sequences, each attending over ``context`` tokens."""
    F = torch.nn.functional
    H, Hkv, d = model.num_attention_heads, model.num_key_value_heads, model.head_dim
    qw, kvw = model.q_width, model.kv_width
    gated = model.gated_mlp
    layernorm = model.norm == "layernorm"
    eps = 1e-5
    pos = context - 1
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, d, 2, device=dev, dtype=torch.float32) / d))
    angle = pos * inv_freq
    cos = torch.cat([angle.cos(), angle.cos()]).to(dtype)
    sin = torch.cat([angle.sin(), angle.sin()]).to(dtype)
    tokens = torch.randint(0, model.vocab_size, (batch,), device=dev)
    half = d // 2

    def norm(x: Any, w: Any, b: Any) -> Any:
        if layernorm:
            return F.layer_norm(x, (x.shape[-1],), w, b, eps)
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w

    def rope(x: Any) -> Any:
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    def step() -> Any:
        x = weights.embedding[tokens]
        for layer, (kc, vc) in zip(weights.layers, caches, strict=True):
            hn = norm(x, layer["ln1"], layer["ln1_b"])
            q, k, v = F.linear(hn, layer["wqkv"], layer["bqkv"]).split([qw, kvw, kvw], dim=-1)
            q = q.reshape(batch, H, d)
            k = k.reshape(batch, Hkv, d)
            if layer["q_norm"] is not None:
                q = norm(q, layer["q_norm"], None)
                k = norm(k, layer["k_norm"], None)
            q, k = rope(q), rope(k)
            kc[:batch, :, pos] = k
            vc[:batch, :, pos] = v.reshape(batch, Hkv, d)
            attn = decode_attention(q, kc[:batch], vc[:batch])
            x = x + F.linear(attn.reshape(batch, qw), layer["wo"], layer["bo"])
            hn = norm(x, layer["ln2"], layer["ln2_b"])
            up = F.linear(hn, layer["wup"], layer["bup"])
            if gated:
                gate, up = up.chunk(2, dim=-1)
                act = F.silu(gate) * up
            else:
                act = F.relu(up)
            x = x + F.linear(act, layer["wdown"], layer["bdown"])
        x = norm(x, weights.final, weights.final_b)
        return F.linear(x, weights.lm_head).argmax(dim=-1)

    return step


def _graphed(torch: Any, dev: Any, step: Callable[[], Any]) -> tuple[Callable[[], Any], Any]:
    """Capture ``step`` in a CUDA graph; return (replay, graph)."""
    stream = torch.cuda.Stream(dev)
    stream.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(stream):
        for _ in range(3):
            step()
    torch.cuda.current_stream(dev).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay, graph


def _measure_point(
    torch: Any, dev: Any, dtype: Any, model: ModelConfig, weights: _Weights, caches: list[tuple[Any, Any]],
    batch: int, context: int, *, cuda_graphs: bool, warmup: int, repetitions: int,
) -> dict[str, Any]:
    """Time one (batch, context) decode step. The step, its graph and its memory pool are
    released on return, so the caller can free the KV caches before the next context."""
    step = _make_step(torch, model, weights, caches, batch, context, dev, dtype)
    run, graph, note = step, None, None
    if cuda_graphs:
        try:
            run, graph = _graphed(torch, dev, step)
        except RuntimeError as exc:  # pragma: no cover - needs a GPU
            note = f"CUDA graph capture failed, timed eagerly: {str(exc).splitlines()[0]}"
            run, graph = step, None
    s = _summary(_time(torch, dev, run, warmup=warmup, repetitions=repetitions))
    point = {"batch": batch, "context": context, "context_sum": batch * context, **s, "cuda_graph": graph is not None}
    if note:
        point["note"] = note
    return point


def measure_decode(
    device: str = "auto",
    *,
    model: ModelConfig,
    batches: Sequence[int],
    contexts: Sequence[int],
    repetitions: int = 20,
    warmup: int = 5,
    cuda_graphs: bool = False,
    max_seconds: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Time decode steps of a transformer with ``model``'s shapes and random weights.

    Parameters
    ----------
    device : str
        ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
    model : ModelConfig
        Shapes; ``weight_dtype`` and ``kv_dtype`` must be the same, one of bfloat16,
        float16, float32.
    batches : sequence of int, >= 1
    contexts : sequence of int, >= 1
        Every sequence attends over ``context`` tokens: ``context - 1`` cached plus the
        new one, written into the cache at position ``context - 1`` during the step.
    repetitions, warmup : int
    cuda_graphs : bool
        Capture each (batch, context) step in a CUDA graph and time its replays
        (CUDA only). A failed capture falls back to eager for that point, said there.
    max_seconds : float [s] or None
        Points not started within this time are skipped.
    progress : callable, optional
        Called with one line per point.

    Returns
    -------
    dict
        ``model`` (the ModelConfig's fields), ``weight_bytes``, ``kv_bytes_per_token``,
        ``flops_per_token``, ``attention_flops_per_token``, ``step`` (what one step
        runs), ``attention``, ``cuda_graphs``, ``batches``, ``contexts``, ``points``
        (per point ``batch``, ``context``, ``context_sum``, ``times_s``, ``best_s``,
        ``median_s`` [s], ``spread`` [1], ``cuda_graph``) and ``skipped`` (per point
        not measured: ``batch``, ``context``, ``reason``, e.g. its KV cache does not
        fit in free memory).

    Raises
    ------
    RooflineError
        PyTorch missing (install roofline[calibrate]); InvalidValueError for a bad
        argument, an unsupported dtype, CUDA graphs off CUDA, or weights that do not
        fit in free memory.

    Notes
    -----
    Each layer's K and V caches are separate [max batch, kv_heads, context, head_dim]
    tensors (no sharing between layers, which the cache could serve), so a step reads
    the weights once and k x batch x context bytes of KV, as the model assumes
    (CONVENTIONS.md, "One step").
    """
    torch = import_torch()
    plan_check = CalibrationPlan(
        model=model, batches=tuple(batches), contexts=tuple(contexts), repetitions=repetitions,
        warmup=warmup, bandwidth_bytes=MiB, matmul_shapes=((1, 1, 1),), cuda_graphs=bool(cuda_graphs),
        max_seconds=max_seconds,
    )
    dev = _resolve_device(torch, device)
    if cuda_graphs and dev.type != "cuda":
        raise InvalidValueError("cuda_graphs", cuda_graphs, f"CUDA graphs need a CUDA device, not {dev.type}")
    dtype = _torch_dtype(torch, model.weight_dtype, "weight_dtype")
    if _torch_dtype(torch, model.kv_dtype, "kv_dtype") != dtype:
        raise InvalidValueError("kv_dtype", model.kv_dtype, f"must equal weight_dtype {model.weight_dtype!r} here")
    say = progress or (lambda line: None)
    started = time.perf_counter()
    free = _free_memory(torch, dev)
    weight_bytes = int(model.weight_bytes)
    if weight_bytes > 0.9 * free:
        raise InvalidValueError(
            "model", model.name,
            f"weights need {weight_bytes / GiB:.1f} GiB; {free / GiB:.1f} GiB free on {dev}",
        )
    kv_per_token = int(model.kv_bytes_per_token)
    points: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    with torch.inference_mode():
        weights = _Weights(torch, model, dev, dtype)
        for context in sorted(set(plan_check.contexts)):
            free = _free_memory(torch, dev)
            margin = max(GiB // 2, free // 10) if dev.type == "cuda" else free // 2
            room = free - margin
            wanted = sorted(set(plan_check.batches))
            fits = [b for b in wanted if b * context * kv_per_token <= room]
            for b in wanted:
                if b not in fits:
                    need = b * context * kv_per_token
                    skipped.append({
                        "batch": b, "context": context,
                        "reason": f"KV cache needs {need / GiB:.1f} GiB; {room / GiB:.1f} GiB usable on {dev}",
                    })
            if not fits:
                continue
            bmax = fits[-1]
            shape = (bmax, model.num_key_value_heads, context, model.head_dim)
            caches = [
                (torch.empty(shape, device=dev, dtype=dtype).normal_(),
                 torch.empty(shape, device=dev, dtype=dtype).normal_())
                for _ in range(model.num_hidden_layers)
            ]
            for batch in fits:
                elapsed = time.perf_counter() - started
                if max_seconds is not None and elapsed > max_seconds:
                    skipped.append({
                        "batch": batch, "context": context,
                        "reason": f"time limit: {max_seconds:g} s spent before this point",
                    })
                    continue
                point = _measure_point(
                    torch, dev, dtype, model, weights, caches, batch, context,
                    cuda_graphs=cuda_graphs, warmup=warmup, repetitions=repetitions,
                )
                points.append(point)
                say(f"decode batch {batch:>4} context {context:>6}: {point['median_s'] * 1e3:9.3f} ms "
                    f"(best {point['best_s'] * 1e3:.3f}, spread {point['spread']:.1%})")
            del caches
            if dev.type == "cuda":
                torch.cuda.empty_cache()
        del weights
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    flops, attn = model.flops_per_token("exact")
    return {
        "model": attrs.asdict(model),
        "weights": "random normal(0, 0.02), norms 1, biases 0; nothing downloaded",
        "weight_bytes": weight_bytes,
        "kv_bytes_per_token": kv_per_token,
        "flops_per_token": flops,
        "attention_flops_per_token": attn,
        "step": _STEP if model.gated_mlp else _STEP.replace("fused gate/up projection, SiLU x up", "fc1, ReLU"),
        "attention": _ATTENTION,
        "cuda_graphs": bool(cuda_graphs),
        "batches": sorted(set(plan_check.batches)),
        "contexts": sorted(set(plan_check.contexts)),
        "points": points,
        "skipped": skipped,
    }


# --------------------------------------------------------------------------- the whole run


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


def _device_info(torch: Any, dev: Any, accelerator: str | None) -> dict[str, Any]:
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


def run_calibration(
    plan: CalibrationPlan | None = None,
    *,
    device: str = "auto",
    accelerator: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measure bandwidth, matmul FLOP/s and decode step times; return the calibration document.

    Parameters
    ----------
    plan : CalibrationPlan, optional
        Default: :meth:`CalibrationPlan.default` for the device's type.
    device : str
        ``"auto"`` (CUDA if available, else CPU), ``"cpu"``, ``"cuda"``, ``"cuda:N"``.
    accelerator : str, optional
        The accelerator preset this device is (e.g. ``"h100-sxm"``), for the spec
        constants in ``roofline validate``; default: recognised from the CUDA device
        name (:func:`roofline.calibrate.preset_for_device`), none on CPU.
    progress : callable, optional
        Called with one human-readable line per measurement.

    Returns
    -------
    dict
        A document of schema 1 (layout: :mod:`roofline.calibrate`), already validated;
        write it with :func:`roofline.calibrate.write_calibration`.

    Raises
    ------
    RooflineError
        PyTorch is not installed (install roofline[calibrate]).
    InvalidValueError
        A bad device, preset or plan; CUDA graphs requested off CUDA; weights that do
        not fit.
    """
    torch = import_torch()
    dev = _resolve_device(torch, device)
    if plan is None:
        plan = CalibrationPlan.default(dev.type)
    if not isinstance(plan, CalibrationPlan):
        raise InvalidValueError("plan", plan, "must be a CalibrationPlan")
    if plan.cuda_graphs and dev.type != "cuda":
        raise InvalidValueError("cuda_graphs", True, f"CUDA graphs need a CUDA device, not {dev.type}")
    say = progress or (lambda line: None)
    started = time.perf_counter()
    created = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    device_info = _device_info(torch, dev, accelerator)
    say(f"device: {device_info['name']} ({dev})")

    bandwidth = measure_bandwidth(
        str(dev), nbytes=plan.bandwidth_bytes, repetitions=plan.repetitions, warmup=min(plan.warmup, 3)
    )
    say(f"bandwidth: {bandwidth['value'] / 1e9:.1f} GB/s best ({bandwidth['method']}), "
        f"{bandwidth['typical'] / 1e9:.1f} GB/s median")
    matmul = measure_matmul(
        str(dev), shapes=plan.matmul_shapes, dtype=plan.model.weight_dtype,
        repetitions=plan.repetitions, warmup=plan.warmup,
    )
    say(f"matmul {matmul['dtype']}: {matmul['value'] / 1e12:.2f} TFLOP/s best, "
        f"{matmul['typical'] / 1e12:.2f} TFLOP/s typical")
    remaining = None
    if plan.max_seconds is not None:
        remaining = max(plan.max_seconds - (time.perf_counter() - started), 1e-3)
    decode = measure_decode(
        str(dev), model=plan.model, batches=plan.batches, contexts=plan.contexts,
        repetitions=plan.repetitions, warmup=plan.warmup, cuda_graphs=plan.cuda_graphs,
        max_seconds=remaining, progress=say,
    )
    import numpy

    from .. import __version__

    doc = {
        "schema": SCHEMA_VERSION,
        "kind": FILE_KIND,
        "created": created,
        "device": device_info,
        "software": {
            "python": platform.python_version(),
            "torch": str(torch.__version__),
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if dev.type == "cuda" else None,
            "numpy": numpy.__version__,
            "roofline": __version__,
            "platform": platform.platform(),
        },
        "method": {
            "timer": "torch.cuda.Event per repetition" if dev.type == "cuda" else "time.perf_counter per repetition",
            "warmup": plan.warmup,
            "repetitions": plan.repetitions,
            "statistics": "best = fastest repetition; typical = median repetition; "
                          "spread = (max - min) / median",
            "cuda_graphs": plan.cuda_graphs,
            "attention": _ATTENTION,
            "dtype": plan.model.weight_dtype,
            "threads": int(torch.get_num_threads()),
            "max_seconds": plan.max_seconds,
        },
        "bandwidth": bandwidth,
        "matmul": matmul,
        "decode": decode,
        "elapsed_s": time.perf_counter() - started,
    }
    if not decode["points"]:
        raise InvalidValueError("batches", plan.batches, "no decode point could be measured: "
                                + "; ".join(s["reason"] for s in decode["skipped"][:3]))
    parse_calibration(doc, path="<new calibration>")
    return doc
