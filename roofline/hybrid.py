"""Recurrent (state-space and linear-attention) layers of hybrid models: shapes, state and FLOPs.

A hybrid model (Qwen3-Next: Gated DeltaNet layers beside gated attention) keeps, in each of
its recurrent layers, a **fixed-size state** per sequence instead of a KV cache
(docs/conventions.md, "Hybrid models"). One :class:`StateMixer` describes those layers of a
:class:`roofline.ModelConfig`: how many, their widths, the tensors each holds, the state a
sequence keeps in each and the FLOPs a token spends there beyond its matmuls.

State shapes are vLLM's (``vllm/model_executor/layers/mamba/mamba_utils.py``,
``MambaStateShapeCalculator``):

* Gated DeltaNet: a conv state of (conv_kernel - 1) x (2 x key_heads x key_dim + value_heads x
  value_dim) and a recurrent state of value_heads x value_dim x key_dim (``gated_delta_net_state_shape``);
* Mamba2: a conv state of (conv_kernel - 1) x (intermediate + 2 x n_groups x state_size) and an
  SSM state of heads x head_dim x state_size (``mamba2_state_shape``).

Their dtype is the engine's: vLLM's ``mamba_cache_dtype`` and ``mamba_ssm_cache_dtype`` both
default to ``"auto"`` (``vllm/config/cache.py``, ``CacheConfig``), the model's dtype
(``MambaStateDtypeCalculator._mamba_state_dtype``), so a BF16 checkpoint keeps BF16 states unless
the engine is told otherwise (:attr:`roofline.ModelConfig.state_dtype`).
"""

from __future__ import annotations

from typing import Any

import attrs

from .errors import InvalidValueError

__all__ = ["StateMixer", "STATE_KINDS"]

#: Recurrent layer kinds the package models.
STATE_KINDS = ("gated_deltanet", "mamba2")


def _pos(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidValueError(attribute.name, value, "must be a positive integer")


def _kind(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    if value not in STATE_KINDS:
        raise InvalidValueError(attribute.name, value, f"expected one of {', '.join(STATE_KINDS)}")


@attrs.frozen
class StateMixer:
    """The recurrent layers of a hybrid model (one kind per model).

    Parameters
    ----------
    kind : {"gated_deltanet", "mamba2"}
    layers : int > 0
        Layers whose token mixer is this recurrence (they hold no KV cache).
    heads : int > 0
        Gated DeltaNet: value heads (``linear_num_value_heads``); Mamba2: heads (``mamba_num_heads``).
    head_dim : int > 0
        Gated DeltaNet: value head width (``linear_value_head_dim``); Mamba2: ``mamba_head_dim``.
    key_heads : int > 0
        Gated DeltaNet: key heads (``linear_num_key_heads``); Mamba2: groups (``n_groups``).
    key_dim : int > 0
        Gated DeltaNet: key head width (``linear_key_head_dim``); Mamba2: state size (``ssm_state_size``).
    conv_kernel : int > 0
        Width of the causal depthwise convolution (``linear_conv_kernel_dim``, ``conv_kernel``).
    conv_bias : bool, default False
        The convolution has a bias (Mamba2's ``use_conv_bias``).
    proj_bias : bool, default False
        The in and out projections have biases (Mamba2's ``use_bias``).

    Raises
    ------
    InvalidValueError
        A size that is not a positive integer, or an unknown kind (the field named).
    """

    kind: str = attrs.field(validator=_kind)
    layers: int = attrs.field(validator=_pos)
    heads: int = attrs.field(validator=_pos)
    head_dim: int = attrs.field(validator=_pos)
    key_heads: int = attrs.field(validator=_pos)
    key_dim: int = attrs.field(validator=_pos)
    conv_kernel: int = attrs.field(validator=_pos)
    conv_bias: bool = False
    proj_bias: bool = False

    @property
    def inner(self) -> int:
        """Value (Mamba2: inner) width heads x head_dim [elements]."""
        return self.heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the convolution [elements]: 2 x key_heads x key_dim + inner (both kinds: q and k, or B
        and C, beside the values)."""
        return 2 * self.key_heads * self.key_dim + self.inner

    @property
    def conv_state_elements(self) -> int:
        """Conv state one sequence keeps in one layer: (conv_kernel - 1) x conv_dim [elements]."""
        return (self.conv_kernel - 1) * self.conv_dim

    @property
    def ssm_state_elements(self) -> int:
        """Recurrent state one sequence keeps in one layer [elements]: value_heads x value_dim x key_dim
        (Gated DeltaNet), heads x head_dim x state_size (Mamba2)."""
        return self.heads * self.head_dim * self.key_dim

    @property
    def layer_state_elements(self) -> int:
        """Conv state + recurrent state of one layer for one sequence [elements]."""
        return self.conv_state_elements + self.ssm_state_elements

    @property
    def layer_recurrent_flops(self) -> int:
        """FLOPs one token spends in one layer outside its matmul weights [FLOP].

        2 x conv_kernel x conv_dim for the depthwise convolution, plus 6 x the recurrent state
        (3 multiply-adds per state element: decay and rank-1 update, and the read-out against
        the query, Gated DeltaNet's delta-rule correction S k counted in the update, Mamba2's
        read-out against C). Gates, activations and norms are not counted, as for attention.
        """
        return 2 * self.conv_kernel * self.conv_dim + 6 * self.ssm_state_elements

    def tensors(self, hidden: int) -> list[tuple[str, str, tuple[int, ...], bool]]:
        """(class, name, shape, matmul) of one recurrent layer's tensors at model width ``hidden``.

        Gated DeltaNet (transformers' ``Qwen3NextGatedDeltaNet``): in_proj_qkvz (h x (2 key_heads x
        key_dim + 2 inner)), in_proj_ba (h x 2 value_heads), conv1d (conv_dim x conv_kernel), dt_bias and
        A_log (value_heads), a gated RMSNorm (value_dim), out_proj (inner x h). Mamba2 (``MambaMixer2``):
        in_proj (h x (2 inner + 2 n_groups x state_size + heads)), conv1d (conv_dim x conv_kernel, and a
        bias), dt_bias, A_log and D (heads), a gated RMSNorm (inner), out_proj (inner x h).
        """
        h, inner = hidden, self.inner
        out: list[tuple[str, str, tuple[int, ...], bool]] = []
        if self.kind == "gated_deltanet":
            out += [("projections", "linear_attn.in_proj_qkvz", (h, 2 * self.key_heads * self.key_dim + 2 * inner),
                     True),
                    ("projections", "linear_attn.in_proj_ba", (h, 2 * self.heads), True),
                    ("norms", "linear_attn.conv1d", (self.conv_dim * self.conv_kernel,), False),
                    ("norms", "linear_attn.dt_bias", (self.heads,), False),
                    ("norms", "linear_attn.A_log", (self.heads,), False),
                    ("norms", "linear_attn.norm", (self.head_dim,), False),
                    ("projections", "linear_attn.out_proj", (inner, h), True)]
            return out
        width = 2 * inner + 2 * self.key_heads * self.key_dim + self.heads
        out += [("projections", "mixer.in_proj", (h, width), True),
                ("norms", "mixer.conv1d", (self.conv_dim * self.conv_kernel,), False)]
        if self.conv_bias:
            out.append(("norms", "mixer.conv1d.bias", (self.conv_dim,), False))
        if self.proj_bias:
            out.append(("norms", "mixer.in_proj.bias", (width,), False))
        out += [("norms", "mixer.dt_bias", (self.heads,), False), ("norms", "mixer.A_log", (self.heads,), False),
                ("norms", "mixer.D", (self.heads,), False), ("norms", "mixer.norm", (inner,), False),
                ("projections", "mixer.out_proj", (inner, h), True)]
        if self.proj_bias:
            out.append(("norms", "mixer.out_proj.bias", (h,), False))
        return out
