"""vLLM's names for the weight-dtype flags: ``--dtype`` and ``--quantization``.

Each is taken where its meaning is the package's, and refused by name where it is not
(vLLM engine arguments, https://docs.vllm.ai/en/v0.5.3/models/engine_args.html:
``--dtype {auto,half,float16,bfloat16,float,float32}``). vLLM's ``--kv-cache-dtype`` is
``--kv-dtype``'s other name (:func:`roofline.commands._args.add_model_options`); its ``auto`` keeps
the model's KV dtype.

* ``--dtype``: the dtype of an unquantized model's weights (and activations), as
  ``--weight-dtype``; ``auto`` keeps the config's. On a quantized checkpoint vLLM's ``--dtype``
  sets the activations and the unquantized tensors only, which the package reads from the
  config: refused there.
* ``--quantization``: vLLM's check that the checkpoint is quantized with that method. Taken when
  the config's ``quantization_config`` has that method; any other use (quantizing an
  unquantized checkpoint on the fly, another method) is not modelled and is refused.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import InvalidValueError

#: vLLM --dtype -> the package's weight dtype (None: the config's).
VLLM_DTYPES = {"auto": None, "half": "float16", "float16": "float16", "bfloat16": "bfloat16", "float": "float32",
               "float32": "float32"}


def add_vllm_dtype_options(parser: argparse.ArgumentParser) -> None:
    """Add --dtype and --quantization (vLLM's names)."""
    parser.add_argument("--dtype", choices=tuple(VLLM_DTYPES), default=None,
                        help="vLLM's --dtype: an unquantized model's weight dtype, as --weight-dtype (auto: the "
                             "config's); refused on a quantized checkpoint")
    parser.add_argument("--quantization", "-q", default=None, metavar="METHOD",
                        help="vLLM's --quantization: taken when the config is quantized with METHOD "
                             "(gptq, awq, fp8, compressed-tensors, mxfp4); quantizing on the fly is not modelled")


def vllm_dtypes(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """(weight dtype, KV dtype) of the flags: vLLM's --dtype folded into the package's --weight-dtype, and
    --kv-cache-dtype auto (vLLM's default) read as the model's own KV dtype.

    Raises
    ------
    InvalidValueError
        --dtype beside --weight-dtype, naming both.
    """
    weight, kv = getattr(args, "weight_dtype", None), getattr(args, "kv_dtype", None)
    dtype = getattr(args, "dtype", None)
    if dtype is not None and weight is not None:
        raise InvalidValueError("--dtype", dtype, f"beside --weight-dtype={weight!r}: give one of them")
    if dtype is not None:
        weight = VLLM_DTYPES[dtype]
    if isinstance(kv, str) and kv.strip().lower() == "auto":  # vLLM's --kv-cache-dtype default: the model's
        kv = None
    return weight, kv


def check_vllm_model(args: argparse.Namespace, model: Any) -> None:
    """Refuse --dtype on a quantized checkpoint and a --quantization the config's method is not.

    ``model`` is the ModelConfig as the config gives it (before any dtype override).

    Raises
    ------
    InvalidValueError
        Naming the flag, its value and what the config holds.
    """
    dtype, method = getattr(args, "dtype", None), getattr(args, "quantization", None)
    held = None if model.quantization is None else model.quantization.method
    if dtype not in (None, "auto") and held is not None:
        raise InvalidValueError("--dtype", dtype, f"{model.name} is quantized ({held}): vLLM's --dtype would set its "
                                "activations and unquantized tensors, which the package reads from the config; "
                                "--weight-dtype sets one width for every weight")
    if method is not None and method.strip().lower() != held:
        what = "not quantized" if held is None else f"quantized with {held}"
        raise InvalidValueError("--quantization", method, f"{model.name} is {what}: quantizing a checkpoint on the fly "
                                "is not modelled (--weight-dtype prices one flat width for every weight)")
