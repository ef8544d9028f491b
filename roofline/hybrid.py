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
  SSM state of heads x head_dim x state_size (``mamba2_state_shape``);
* Mamba1 (Jamba): a conv state of (conv_kernel - 1) x intermediate and an SSM state of
  intermediate x state_size (``mamba1_state_shape``);
* short convolution (LFM2): a conv state of (conv_kernel - 1) x hidden, no recurrent state
  (``short_conv_state_shape``);
* lightning (linear) attention (MiniMax-Text-01): no conv state, a state of heads x head_dim x
  head_dim (``linear_attention_state_shape``).

A mixer may also sit beside attention in the same layers (Falcon-H1: ``parallel``), those
layers then holding KV as well as the state.

Their dtype is the engine's: vLLM's ``mamba_cache_dtype`` and ``mamba_ssm_cache_dtype`` both
default to ``"auto"`` (``vllm/config/cache.py``, ``CacheConfig``), the model's dtype
(``MambaStateDtypeCalculator._mamba_state_dtype``), so a BF16 checkpoint keeps BF16 states unless
the engine is told otherwise (:attr:`roofline.ModelConfig.state_dtype`).
"""

from __future__ import annotations

from typing import Any

import attrs

from ._checks import positive_int_field as _pos_int
from .errors import InvalidValueError

__all__ = ["StateMixer", "STATE_KINDS", "LAYER_KINDS"]

#: Recurrent layer kinds the package models.
STATE_KINDS = ("gated_deltanet", "mamba2", "mamba1", "short_conv", "lightning")

#: Characters of :attr:`StateMixer.layer_kinds`, one per layer of the model: a layer of this mixer (with
#: attention beside it when ``parallel``), an attention layer, an MLP-only layer (Nemotron-H's "-").
LAYER_KINDS = ("r", "a", "m")


def _layer_kinds(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, str) or set(value) - set(LAYER_KINDS):
        raise InvalidValueError(attribute.name, value, "expected a string of r (this mixer), a (attention) and "
                                "m (MLP only), one per layer, or empty (positions not known)")
    if value and value.count("r") != instance.layers:
        raise InvalidValueError(attribute.name, value, f"holds {value.count('r')} mixer layers (r), "
                                f"layers={instance.layers}")


def _kind(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    if value not in STATE_KINDS:
        raise InvalidValueError(attribute.name, value, f"expected one of {', '.join(STATE_KINDS)}")


@attrs.frozen
class StateMixer:
    """The recurrent layers of a hybrid model (one kind per model).

    Parameters
    ----------
    kind : {"gated_deltanet", "mamba2", "mamba1", "short_conv", "lightning"}
    layers : int > 0
        Layers whose token mixer is this recurrence (they hold no KV cache unless ``parallel``).
    heads : int > 0
        Gated DeltaNet: value heads (``linear_num_value_heads``); Mamba2: heads (``mamba_num_heads``);
        Mamba1 and short convolution: the channels (Jamba's intermediate, LFM2's hidden), with
        head_dim 1; lightning: attention heads.
    head_dim : int > 0
        Gated DeltaNet: value head width (``linear_value_head_dim``); Mamba2: ``mamba_head_dim``;
        lightning: the head width (its state is head_dim x key_dim per head).
    key_heads : int > 0
        Gated DeltaNet: key heads (``linear_num_key_heads``); Mamba2: groups (``n_groups``); Mamba1:
        the rank of the time-step projection (``mamba_dt_rank``); lightning: heads (q and k); short
        convolution: not used (1).
    key_dim : int > 0
        Gated DeltaNet: key head width (``linear_key_head_dim``); Mamba2 and Mamba1: state size
        (``ssm_state_size``, ``mamba_d_state``); lightning: the head width; short convolution: not
        used (1).
    conv_kernel : int > 0
        Width of the causal depthwise convolution (``linear_conv_kernel_dim``, ``conv_kernel``,
        LFM2's ``conv_L_cache``); lightning attention has none (its conv state is 0 whatever it is).
    conv_bias : bool, default False
        The convolution has a bias (Mamba2's ``use_conv_bias``; LFM2's ``conv_bias`` also puts biases
        on its in and out projections).
    proj_bias : bool, default False
        The in and out projections have biases (Mamba2's ``use_bias``).
    norm : bool, default True
        The mixer's own norms: Mamba2's gated RMSNorm (Falcon-H1's ``mamba_rms_norm``, false by
        default there), Jamba's dt, B and C RMSNorms, lightning attention's output norm.
    out_bias : bool or None, default None
        A bias on out_proj when it differs from in_proj's (Falcon-H1's ``projectors_bias``); None: as
        ``proj_bias``.
    parallel : bool, default False
        The mixer runs beside attention in the same layers (Falcon-H1): those layers hold KV too.
    layer_kinds : str, default ""
        Where the layers sit, one character per layer of the model in order: ``r`` a layer of this
        mixer, ``a`` an attention layer, ``m`` an MLP-only layer (the config's ``layer_types``,
        ``hybrid_override_pattern``...); empty when not known. Only pipeline stages need it
        (:meth:`roofline.Deployment.stages`: a stage holds the state of its own ``r`` layers).

    Raises
    ------
    InvalidValueError
        A size that is not a positive integer, or an unknown kind (the field named); ``layer_kinds``
        with another character or a count of ``r`` other than ``layers``.
    """

    kind: str = attrs.field(validator=_kind)
    layers: int = attrs.field(validator=_pos_int)
    heads: int = attrs.field(validator=_pos_int)
    head_dim: int = attrs.field(validator=_pos_int)
    key_heads: int = attrs.field(validator=_pos_int)
    key_dim: int = attrs.field(validator=_pos_int)
    conv_kernel: int = attrs.field(validator=_pos_int)
    conv_bias: bool = False
    proj_bias: bool = False
    norm: bool = True
    out_bias: bool | None = None
    parallel: bool = False
    layer_kinds: str = attrs.field(default="", validator=_layer_kinds)

    @property
    def inner(self) -> int:
        """Value (Mamba2: inner) width heads x head_dim [elements]."""
        return self.heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the convolution [elements]: 2 x key_heads x key_dim + inner (Gated DeltaNet, Mamba2:
        q and k, or B and C, beside the values); inner (Mamba1, short convolution); 0 (lightning)."""
        if self.kind in ("mamba1", "short_conv"):
            return self.inner
        if self.kind == "lightning":
            return 0
        return 2 * self.key_heads * self.key_dim + self.inner

    @property
    def conv_state_elements(self) -> int:
        """Conv state one sequence keeps in one layer: (conv_kernel - 1) x conv_dim [elements]."""
        return (self.conv_kernel - 1) * self.conv_dim

    @property
    def ssm_state_elements(self) -> int:
        """Recurrent state one sequence keeps in one layer [elements]: value_heads x value_dim x key_dim
        (Gated DeltaNet), heads x head_dim x state_size (Mamba2), intermediate x state_size (Mamba1),
        heads x head_dim x head_dim (lightning, key_dim = head_dim), 0 (short convolution)."""
        if self.kind == "short_conv":
            return 0
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
        read-out against C; lightning attention's decay, k^T v update and q read-out). Gates,
        activations and norms are not counted, as for attention.
        """
        return 2 * self.conv_kernel * self.conv_dim + 6 * self.ssm_state_elements

    def tensors(self, hidden: int) -> list[tuple[str, str, tuple[int, ...], bool]]:
        """(class, name, shape, matmul) of one recurrent layer's tensors at model width ``hidden``.

        Gated DeltaNet (transformers' ``Qwen3NextGatedDeltaNet``): in_proj_qkvz (h x (2 key_heads x
        key_dim + 2 inner)), in_proj_ba (h x 2 value_heads), conv1d (conv_dim x conv_kernel), dt_bias and
        A_log (value_heads), a gated RMSNorm (value_dim), out_proj (inner x h). Mamba2 (``MambaMixer2``,
        ``FalconH1Mixer``): in_proj (h x (2 inner + 2 n_groups x state_size + heads)), conv1d (conv_dim x
        conv_kernel, and a bias), dt_bias, A_log and D (heads), a gated RMSNorm (inner; Falcon-H1's only
        with ``mamba_rms_norm``), out_proj (inner x h). Mamba1 (``JambaMambaMixer``): in_proj (h x 2
        inner), conv1d (inner x conv_kernel, and a bias), x_proj (inner x (dt_rank + 2 state_size)),
        dt_proj (dt_rank x inner, and a bias), A_log (inner x state_size), D (inner), the dt, B and C
        RMSNorms (dt_rank, state_size, state_size), out_proj (inner x h). Short convolution
        (``Lfm2ShortConv``): in_proj (h x 3 inner), conv (inner x conv_kernel), out_proj (inner x h),
        biases on all three with ``conv_bias``. Lightning attention (``MiniMaxLightningAttention``):
        qkv_proj (h x (2 key_heads x key_dim + inner)), output_gate (h x inner), a RMSNorm (inner),
        out_proj (inner x h).
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
        if self.kind == "short_conv":
            out += [("projections", "conv.in_proj", (h, 3 * inner), True),
                    ("norms", "conv.conv", (inner * self.conv_kernel,), False),
                    ("projections", "conv.out_proj", (inner, h), True)]
            if self.conv_bias:
                out += [("norms", "conv.in_proj.bias", (3 * inner,), False),
                        ("norms", "conv.conv.bias", (inner,), False), ("norms", "conv.out_proj.bias", (h,), False)]
            return out
        if self.kind == "lightning":
            out += [("projections", "self_attn.qkv_proj", (h, 2 * self.key_heads * self.key_dim + inner), True),
                    ("projections", "self_attn.output_gate", (h, inner), True)]
            if self.norm:
                out.append(("norms", "self_attn.norm", (inner,), False))
            out.append(("projections", "self_attn.out_proj", (inner, h), True))
            return out
        if self.kind == "mamba1":
            width, rank, n = 2 * inner, self.key_heads, self.key_dim
            out += [("projections", "mamba.in_proj", (h, width), True),
                    ("norms", "mamba.conv1d", (inner * self.conv_kernel,), False),
                    ("projections", "mamba.x_proj", (inner, rank + 2 * n), True),
                    ("projections", "mamba.dt_proj", (rank, inner), True),
                    ("norms", "mamba.dt_proj.bias", (inner,), False),
                    ("norms", "mamba.A_log", (inner * n,), False), ("norms", "mamba.D", (inner,), False)]
            if self.norm:
                out += [("norms", "mamba.dt_layernorm", (rank,), False), ("norms", "mamba.b_layernorm", (n,), False),
                        ("norms", "mamba.c_layernorm", (n,), False)]
        else:
            width = 2 * inner + 2 * self.key_heads * self.key_dim + self.heads
            out += [("projections", "mixer.in_proj", (h, width), True),
                    ("norms", "mixer.conv1d", (self.conv_dim * self.conv_kernel,), False),
                    ("norms", "mixer.dt_bias", (self.heads,), False), ("norms", "mixer.A_log", (self.heads,), False),
                    ("norms", "mixer.D", (self.heads,), False)]
            if self.norm:
                out.append(("norms", "mixer.norm", (inner,), False))
        prefix = "mamba." if self.kind == "mamba1" else "mixer."
        if self.conv_bias:
            out.append(("norms", prefix + "conv1d.bias", (self.conv_dim,), False))
        if self.proj_bias:
            out.append(("norms", prefix + "in_proj.bias", (width,), False))
        out.append(("projections", prefix + "out_proj", (inner, h), True))
        if self.proj_bias if self.out_bias is None else self.out_bias:
            out.append(("norms", prefix + "out_proj.bias", (h,), False))
        return out
