"""``roofline models`` and ``roofline accelerators``: the shipped presets, their key facts and sources.

``roofline models`` prints one line per model preset: parameters, weight bytes in its
dtype, layers, attention heads and KV heads, head width and KV bytes per token, and where
its config comes from. ``roofline accelerators`` prints one line per accelerator preset:
memory (as labelled and as software sees it), HBM bandwidth, dense BF16 and FP8 peaks and
the ridge point, then every value's source. Both take ``--json``.
"""

from __future__ import annotations

import argparse
import functools
import json
from typing import Any

import attrs

from ..hardware import Accelerator, accelerator_aliases, accelerator_names, get_accelerator
from ..models import ModelConfig, get_model, hf_ids, model_names
from ..units import GB, GiB
from ._args import plain


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``models`` and ``accelerators`` subcommands."""
    for name, helptext, func in (
        ("models", "list the model presets with their key facts and sources", run_models),
        ("accelerators", "list the accelerator presets with their key facts and sources", run_accelerators),
    ):
        p = sub.add_parser(name, help=helptext, description=plain(__doc__),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("--json", action="store_true", help="print JSON instead of text")
        p.add_argument("--verbose", action="store_true",
                       help="also print every preset's sources (--json always has them)")
        p.set_defaults(func=func)


@functools.cache
def _preset_hf_ids() -> dict[str, list[str]]:
    """Preset name -> the Hugging Face ids (lower-cased) that name it (:func:`roofline.models.hf_ids`)."""
    out: dict[str, list[str]] = {}
    for hf_id, name in sorted(hf_ids().items()):
        out.setdefault(name, []).append(hf_id)
    return out


def model_facts(model: ModelConfig) -> dict[str, Any]:
    """A model preset's key facts (SI units; exact integers where the model has them)."""
    return {
        "name": model.name,
        "parameters": model.parameters,
        "weight_dtype": model.weight_dtype,
        "weight_format": model.weight_format,
        "weight_bytes": float(model.weight_bytes),
        "model_type": model.model_type,
        "active_parameters": model.active_parameters,
        "num_experts": model.num_experts,
        "num_experts_per_tok": model.num_experts_per_tok,
        "multi_head_latent_attention": model.is_mla,
        "sliding_windows": sorted({w for w in model.layer_windows if w is not None}),
        "kv_dtype": model.kv_dtype,
        "num_hidden_layers": model.num_hidden_layers,
        "hidden_size": model.hidden_size,
        "num_attention_heads": model.num_attention_heads,
        "num_key_value_heads": model.num_key_value_heads,
        "head_dim": model.head_dim,
        "kv_bytes_per_token": float(model.kv_bytes_per_token),
        "source": model.source,
        "hf_ids": _preset_hf_ids().get(model.name, []),
    }


def accelerator_facts(accelerator: Accelerator) -> dict[str, Any]:
    """An accelerator preset's key facts (SI units) and every value's source."""
    return {
        "key": accelerator.key,
        "name": accelerator.name,
        "memory_label_bytes": float(accelerator.memory_label.value),
        "memory_usable_bytes": float(accelerator.usable_memory),
        "bandwidth_bytes_per_s": float(accelerator.bandwidth),
        "peak_bf16_flops": float(accelerator.peak_flops),
        "peak_fp8_flops": None if accelerator.peak_fp8 is None else float(accelerator.peak_fp8.value),
        "peak_fp4_flops": None if accelerator.peak_fp4 is None else float(accelerator.peak_fp4.value),
        "ridge_point_flop_per_byte": float(accelerator.ridge_point),
        "aliases": accelerator_aliases().get(accelerator.key, []),
        "sources": {field: attrs.asdict(value.source) for field, value in accelerator.sources().items()},
    }


def _gb(nbytes: Any) -> str:
    """Bytes as GB with two decimals, or none from 1,000 GB (the table stays within 100 columns)."""
    gb = nbytes / GB
    return f"{gb:,.0f} GB" if gb >= 1000 else f"{gb:,.2f} GB"


def run_models(args: Any) -> int:
    """Print the model presets; return 0."""
    facts = [model_facts(get_model(name)) for name in model_names()]
    if args.json:
        print(json.dumps(facts, indent=2))
        return 0
    header = ("model", "parameters", "weights", "dtype", "layers", "q/kv", "d_head", "KV/token")
    table = [header] + [(
        m["name"], f"{m['parameters']:,}", _gb(m["weight_bytes"]), m["weight_format"],
        str(m["num_hidden_layers"]), f"{m['num_attention_heads']}/{m['num_key_value_heads']}",
        str(m["head_dim"]), f"{m['kv_bytes_per_token'] / 1024:,.0f} KiB",
    ) for m in facts]
    # widths from the cells, so a long dtype (fp8/bfloat16, mxfp4/bfloat16) does not push the columns after it
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    left = {0, 3}
    for i, row in enumerate(table):
        cells = [c.ljust(w) if j in left else c.rjust(w) for j, (c, w) in enumerate(zip(row, widths, strict=True))]
        print("  ".join(cells))
        if args.verbose and i:
            m = facts[i - 1]
            print(f"    Hugging Face: {', '.join(m['hf_ids']) or '-'}; source: {m['source']}")
    print("weights in the checkpoint's dtype (quantized: method/dtype of the other tensors; --weight-dtype")
    print("changes it); q/kv: query and KV heads; KV per token for full attention (MLA: the latent)")
    print("--model takes a preset's name or its Hugging Face id" + (
        "" if args.verbose else " (--verbose prints them, and sources)"))
    return 0


def run_accelerators(args: Any) -> int:
    """Print the accelerator presets; return 0."""
    facts = [accelerator_facts(get_accelerator(name)) for name in accelerator_names()]
    if args.json:
        print(json.dumps(facts, indent=2))
        return 0
    print(f"{'accelerator':<12} {'memory':>7} {'usable':>10} {'bandwidth':>10} {'BF16 dense':>15} {'FP8 dense':>15} "
          f"{'ridge':>12}")
    for a in facts:
        fp8 = "-" if a["peak_fp8_flops"] is None else f"{a['peak_fp8_flops'] / 1e12:,.1f} TFLOP/s"
        bf16 = f"{a['peak_bf16_flops'] / 1e12:,.1f} TFLOP/s"
        print(f"{a['key']:<12} {a['memory_label_bytes'] / GB:>4.0f} GB {a['memory_usable_bytes'] / GiB:>6.1f} GiB "
              f"{a['bandwidth_bytes_per_s'] / 1e12:>5.2f} TB/s {bf16:>15} {fp8:>15} "
              f"{a['ridge_point_flop_per_byte']:>6.1f} FLOP/B")
    print()
    print("Aliases (--accelerator takes these too):")
    for a in facts:
        if a["aliases"]:
            print(f"  {a['key']:<10} {', '.join(a['aliases'])}")
    if not args.verbose:
        print("Every value has a source: roofline accelerators --verbose (or --json) prints them")
        return 0
    print()
    print("Sources (kind: citation, date):")
    for a in facts:
        print(f"  {a['name']}:")
        for field, src in a["sources"].items():
            print(f"    {field}: {src['kind']}: {src['citation']}, {src['date']}"
                  + (f" ({src['conditions']})" if src["conditions"] else ""))
    return 0
