"""How a quantized checkpoint stores its matrices, and what one matrix costs in bytes.

docs/conventions.md, "Architectures" (weight dtypes per tensor class): GPTQ and AWQ weights of
b bits cost b/8 bytes each plus a 2-byte scale (and a b/8-byte zero point) per group of
``group_size`` inputs and per output; FP8 weights 1 byte plus a 4-byte scale per block (or per
matrix); mxfp4 4 bits plus a 1-byte E8M0 scale per 32 inputs. :mod:`roofline.families` reads
``quantization_config`` into a :class:`Quantization`; :class:`roofline.ModelConfig` prices its
tensor classes with :func:`quantized_matrix_bytes`.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import attrs

__all__ = ["Quantization", "quantized_matrix_bytes"]

#: Bytes of one scale of each format.
_FP16 = 2
_FP32 = 4
_E8M0 = 1


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


_SCHEMES = ("group", "group+zero", "block", "tensor", "mxfp4", "nvfp4")
#: Bytes of one FP8 E4M3 scale (NVFP4's per-16 scales).
_E4M3 = 1


def _to_quantization(value: Any) -> Any:
    """None, a :class:`Quantization`, or its ``attrs.asdict`` form (from JSON) -> Quantization or None."""
    if isinstance(value, dict):
        return Quantization(**value)
    return value


def _optional_block(value: Any) -> Any:
    if value is None or isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        return value  # None, or refused by name in _check
    return tuple(value)


def _str_tuple(value: Any) -> tuple[str, ...]:
    return tuple(value)


def _check(quant: Quantization) -> None:
    """Refuse a Quantization whose bytes could not be priced (naming the field): a non-integer or
    non-positive bit width, a group scheme without a positive group (or -1), a block scheme
    without two positive integers."""
    from ._checks import is_plain_int as is_int
    from .errors import InvalidValueError

    if not isinstance(quant.scheme, str) or quant.scheme not in _SCHEMES:
        raise InvalidValueError("scheme", quant.scheme, f"expected one of {', '.join(_SCHEMES)}")
    if not is_int(quant.bits) or not 1 <= quant.bits <= 16:
        raise InvalidValueError("bits", quant.bits, "must be an integer from 1 to 16")
    if quant.scheme in ("group", "group+zero", "mxfp4", "nvfp4") and (
            not is_int(quant.group_size) or (quant.group_size <= 0 and quant.group_size != -1)):
        raise InvalidValueError("group_size", quant.group_size,
                                f"scheme {quant.scheme!r} needs a positive integer or -1")
    if quant.scheme == "block" and (not isinstance(quant.block, tuple) or len(quant.block) != 2
                                    or not all(is_int(b) and b > 0 for b in quant.block)):
        raise InvalidValueError("block", quant.block, "the block scheme needs (inputs, outputs), positive integers")


@attrs.frozen
class Quantization:
    """How a quantized checkpoint stores its matrices (``quantization_config``, read by :mod:`roofline.families`).

    Attributes
    ----------
    method : str
        ``quant_method``: "gptq", "awq", "fp8", "compressed-tensors", "mxfp4" or "modelopt".
    bits : int
        Bits per stored weight (4 or 8; 2 and 3 for GPTQ).
    scheme : {"group", "group+zero", "block", "tensor", "mxfp4", "nvfp4"}
        Where the scales sit: per group of ``group_size`` inputs and output (with a
        packed zero point for "group+zero"), per ``block`` of (inputs, outputs), one per
        matrix, mxfp4's one E8M0 scale per 32 inputs, or NVFP4's E4M3 scale per 16 inputs and
        FP32 scale per matrix.
    group_size : int
        Inputs per scale for the group schemes (-1: one group per output channel).
    block : (int, int) or None
        (inputs, outputs) per scale for the block scheme.
    classes : tuple of str
        Tensor classes stored this way; the others keep their dtype.

    Notes
    -----
    Bytes of one matrix: :func:`quantized_matrix_bytes` (docs/conventions.md, "Architectures",
    weight dtypes per tensor class).
    """

    method: str
    bits: int
    scheme: str
    group_size: int = 0
    block: tuple[int, int] | None = attrs.field(default=None, converter=_optional_block)
    classes: tuple[str, ...] = attrs.field(default=("projections", "experts"), converter=_str_tuple)

    def __attrs_post_init__(self) -> None:
        _check(self)


def quantized_matrix_bytes(quant: Quantization, shape: tuple[int, ...], dtype: str = "bfloat16") -> int | Fraction:
    """Bytes of one quantized matrix of ``shape`` = (in_features, out_features) [bytes].

    ``quant`` is a :class:`Quantization` (from :func:`roofline.families.read_quantization`);
    by its scheme:

    * ``"group"`` (GPTQ, AWQ, compressed-tensors group/channel): in x out x bits/8 for the
      packed weights, plus per group of ``group_size`` inputs and per output a 2-byte scale
      and (asymmetric) a bits/8 zero point; group_size -1 is one group per output channel;
    * ``"block"`` (FP8 with ``weight_block_size`` [bi, bo]): 1 byte per weight plus a
      4-byte scale per block;
    * ``"tensor"``: bits/8 per weight plus one 4-byte scale per matrix;
    * ``"mxfp4"``: 4 bits per weight plus a 1-byte E8M0 scale per 32 inputs;
    * ``"nvfp4"`` (ModelOpt NVFP4): 4 bits per weight plus a 1-byte FP8 E4M3 scale per 16 inputs
      and per output, and one 4-byte FP32 per-tensor scale (``weight_scale_2``).

    Parameters
    ----------
    quant : Quantization
    shape : (int, int)
        (in_features, out_features) of the matrix [elements].
    dtype : str
        The checkpoint's torch_dtype (not used by these schemes; kept for the tensor class API).

    Returns
    -------
    int or Fraction [bytes]

    Examples
    --------
    >>> quantized_matrix_bytes(Quantization("awq", 4, "group+zero", 128), (4096, 4096))
    8716288
    """
    bits, group, scheme = quant.bits, quant.group_size, quant.scheme
    rows, cols = shape
    packed = Fraction(rows * cols * bits, 8)
    if scheme == "mxfp4":
        extra: int | Fraction = _ceil_div(rows, 32) * cols * _E8M0
    elif scheme == "nvfp4":
        extra = _ceil_div(rows, group) * cols * _E4M3 + _FP32
    elif scheme == "tensor":
        extra = _FP32
    elif scheme == "block":
        assert quant.block is not None
        bi, bo = quant.block
        extra = _ceil_div(rows, bi) * _ceil_div(cols, bo) * _FP32
    else:  # "group" or "group+zero"
        groups = 1 if group == -1 else _ceil_div(rows, group)
        zero = Fraction(bits, 8) if scheme == "group+zero" else 0
        extra = groups * cols * (_FP16 + zero)
    total = packed + extra
    return int(total) if total.denominator == 1 else total
