"""The synthetic decode step: a transformer with a config's shapes and random weights, timed per (batch, context)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from ..errors import InvalidValueError
from ..hardware import GiB, MiB
from ..models import ModelConfig
from .device import free_memory, import_torch, resolve_torch_device, time_calls, timing_summary, torch_dtype
from .plan import CalibrationPlan

__all__ = ["ATTENTION", "STEP", "decode_attention", "measure_decode"]

ATTENTION = (
    "torch.nn.functional.scaled_dot_product_attention; GQA as query groups "
    "(q viewed [batch, kv_heads, heads/kv_heads, head_dim] against the [batch, kv_heads, "
    "context, head_dim] cache, no copy of K or V)"
)
STEP = (
    "embedding gather; per layer: RMSNorm, fused QKV projection, RoPE, KV write at "
    "position context-1, attention over context tokens, O projection, residual, RMSNorm, "
    "fused gate/up projection, SiLU x up, down projection, residual; final norm; lm_head; "
    "argmax (greedy sampling). Random weights normal(0, 0.02); nothing downloaded."
)


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
    s = timing_summary(time_calls(torch, dev, run, warmup=warmup, repetitions=repetitions))
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
    (docs/conventions.md, "One step").
    """
    torch = import_torch()
    plan_check = CalibrationPlan(
        model=model, batches=tuple(batches), contexts=tuple(contexts), repetitions=repetitions,
        warmup=warmup, bandwidth_bytes=MiB, matmul_shapes=((1, 1, 1),), cuda_graphs=bool(cuda_graphs),
        max_seconds=max_seconds,
    )
    dev = resolve_torch_device(torch, device)
    if cuda_graphs and dev.type != "cuda":
        raise InvalidValueError("cuda_graphs", cuda_graphs, f"CUDA graphs need a CUDA device, not {dev.type}")
    dtype = torch_dtype(torch, model.weight_dtype, "weight_dtype")
    if torch_dtype(torch, model.kv_dtype, "kv_dtype") != dtype:
        raise InvalidValueError("kv_dtype", model.kv_dtype, f"must equal weight_dtype {model.weight_dtype!r} here")
    say = progress or (lambda line: None)
    started = time.perf_counter()
    free = free_memory(torch, dev)
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
            free = free_memory(torch, dev)
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
        "step": STEP if model.gated_mlp else STEP.replace("fused gate/up projection, SiLU x up", "fc1, ReLU"),
        "attention": ATTENTION,
        "cuda_graphs": bool(cuda_graphs),
        "batches": sorted(set(plan_check.batches)),
        "contexts": sorted(set(plan_check.contexts)),
        "points": points,
        "skipped": skipped,
    }
