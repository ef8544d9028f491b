"""A deployment: what runs a model (docs/conventions.md, "Deployment").

A :class:`Deployment` is the one value every layer takes to price a decode step: the model
(:class:`roofline.ModelConfig`, the network only), the accelerator, the parallelism (today the
tensor-parallel size T), the FLOPs convention and the bound-or-estimate choice (None: the
roofline bound; an engine profile: its estimate). A command builds one from its flags
(``roofline.commands._args.deployment_from_args``) and hands it down; :mod:`roofline.estimate`,
:class:`roofline.sim.RooflineCostModel` (:meth:`~roofline.sim.RooflineCostModel.for_deployment`),
:mod:`roofline.plotting` and :mod:`roofline.calibrate.compare` read it, so that a parameter's
way from the flag to the step time crosses each layer once.

The KV-cache dtype is not a field: it is a property of the model's numbers (bytes per KV element),
set by ``load_model(..., kv_dtype=...)`` / :meth:`roofline.ModelConfig.with_dtypes` as the weight
dtype is, and the model carries it (``--kv-dtype`` does exactly that).

Functions that took ``(model, accelerator, tensor_parallel_size=...)`` keep that form and accept
a Deployment in its place; both go through :func:`as_deployment`, one path.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import attrs
import numpy as np

from ._checks import check_count, check_int, check_nonnegative, check_scalar
from .errors import InvalidValueError
from .hardware import Accelerator
from .models import ModelConfig, ModelShare, flops_convention
from .profiles import EngineProfile, get_engine_profile, resolve_engine_profile

__all__ = ["Deployment", "Parallelism", "PipelineStage", "stage_layers", "as_deployment", "allreduce_terms",
           "group_link", "per_sequence_time",
           "profile", "FROM_DEPLOYMENT",
           "expert_parallel_terms"]


class _FromDeployment:
    """The default of a keyword that a :class:`Deployment` given in place of the model supplies."""

    def __repr__(self) -> str:
        return "<the deployment's>"


#: Default of the ``flops``, ``estimate`` and ``tensor_parallel_size`` keywords of the functions that
#: take a Deployment or a model: the Deployment's value (for a model: "exact", the bound, T = 1).
FROM_DEPLOYMENT: Any = _FromDeployment()


def _tensor(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    check_count("tensor_parallel_size", value, minimum=1)


def _pipeline(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    check_count("pipeline_parallel_size", value, minimum=1)


def _data(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    check_count("data_parallel_size", value, minimum=1)


def _expert(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, bool):
        raise InvalidValueError("enable_expert_parallel", value, "expected True or False")


@attrs.frozen
class Parallelism:
    """How a deployment splits its model over GPUs: tensor parallelism of degree T, expert parallelism on or off.

    A value of its own rather than plain fields of :class:`Deployment`, so that pipeline stages
    (P), expert parallelism and data-parallel replicas (D) join here as fields that default to
    "none" (1, off), without changing the model, the Deployment's fields or any caller that gives
    only T (docs/conventions.md, "Deployment" and "Parallelism beyond one tensor-parallel group").

    Parameters
    ----------
    tensor : int >= 1, default 1
        T, GPUs in the tensor-parallel group (vLLM's ``--tensor-parallel-size``).
    pipeline : int >= 1, default 1
        P, pipeline stages (vLLM's ``--pipeline-parallel-size``), each a tensor-parallel group of T
        GPUs holding a contiguous run of layers (docs/conventions.md, "Pipeline parallelism").
    data : int >= 1, default 1
        D, data-parallel replicas of the whole (vLLM's ``--data-parallel-size``); a step's price is one
        replica's, and only :func:`roofline.sim.serve_replicas` serves D of them.
    expert : bool, default False
        Expert parallelism (vLLM's ``--enable-expert-parallel``): the routed experts spread whole
        over the R = T ranks of the group, E / R each, attention still tensor-parallel over T
        (docs/conventions.md, "Expert parallelism").

    Raises
    ------
    InvalidValueError
        T not one integer >= 1 (an array, a bool, 0...): field ``tensor_parallel_size``; P and D likewise:
        fields ``pipeline_parallel_size`` and ``data_parallel_size``; ``expert`` not a bool: field
        ``enable_expert_parallel``.
    """

    tensor: int = attrs.field(default=1, validator=_tensor)
    pipeline: int = attrs.field(default=1, validator=_pipeline)
    #: D, data-parallel replicas (vLLM's ``--data-parallel-size``): independent copies behind a router
    #: (:func:`roofline.sim.serve_replicas`; docs/conventions.md, "Data-parallel replicas"). Default 1.
    data: int = attrs.field(default=1, validator=_data)
    expert: bool = attrs.field(default=False, validator=_expert)

    @property
    def replica_gpus(self) -> int:
        """GPUs one copy of the model runs on [GPUs]: every size but D, T x P."""
        return int(self.tensor) * int(self.pipeline)

    @property
    def expert_parallel_size(self) -> int:
        """R, ranks of the expert-parallel group [GPUs]: T with expert parallelism on, else 1."""
        return int(self.tensor) if self.expert else 1

    @property
    def gpus(self) -> int:
        """GPUs the deployment uses [GPUs]: the product of its sizes, T x P x D."""
        return self.replica_gpus * int(self.data)


def _parallelism(value: Any) -> Parallelism:
    if isinstance(value, Parallelism):
        return value
    check_count("tensor_parallel_size", value, minimum=1)
    return Parallelism(tensor=int(value))


def _profile(value: Any) -> Any:
    """None, or an engine profile (an EngineProfile, or an object with its four methods); a name is refused:
    look it up with :func:`roofline.profiles.get_engine_profile` first (:func:`profile`)."""
    if value is None or isinstance(value, EngineProfile):
        return value
    if not isinstance(value, str) and all(hasattr(value, a) for a in ("constants", "overhead", "scaled", "name")):
        return value
    raise InvalidValueError("estimate", value, "expected an engine profile: "
                            "roofline.profiles.get_engine_profile('vllm') (keys: roofline validate)")


@attrs.frozen
class Deployment:
    """A model on its accelerators: parallelism, FLOPs convention, bound or estimate (attrs, frozen, validated).

    Parameters
    ----------
    model : ModelConfig
        The whole model (never a share: :meth:`roofline.ModelConfig.per_gpu` is what the
        deployment makes of it). Its weight and KV dtypes are the model's
        (``load_model(..., kv_dtype=...)``).
    accelerator : Accelerator
        One GPU of the group (bandwidth [bytes/s], dense peaks [FLOP/s], links).
    parallelism : Parallelism or int >= 1, default 1
        An int is read as T (``Parallelism(tensor=T)``).
    flops : {"exact", "2p"}, default "exact"
        FLOPs convention (:func:`roofline.models.flops_convention`; "lesson" is read as "2p").
    estimate : EngineProfile or None, default None
        None: the roofline bound. An engine profile (a shipped one by its key:
        ``get_engine_profile("vllm")``, :func:`roofline.profiles.get_engine_profile`): its estimate
        (docs/conventions.md, "Bound and estimate"). A name is refused (the profile is a value;
        :func:`profile` turns a flag's name into one).

    Raises
    ------
    InvalidValueError
        Naming the field: ``model`` not a ModelConfig, or already one GPU's share; ``accelerator``
        not an Accelerator; ``tensor_parallel_size`` not an integer >= 1 or one the model's heads
        or widths refuse (:meth:`roofline.ModelConfig.per_gpu`, message with the numbers);
        ``flops`` not a convention; ``estimate`` not a profile (a name included).

    Notes
    -----
    The link between the GPUs is checked where the all-reduce is priced
    (:meth:`allreduce_terms`), not here: sizes and budgets of a group that needs the network
    between servers can still be given (the step time cannot).

    The scheduler's cost model of a deployment is
    :meth:`roofline.sim.RooflineCostModel.for_deployment` (``d.cost_terms()`` are its fields): a
    ``cost_model`` method here would import ``roofline.sim``, a layer above this module, and close
    an import cycle (tests/test_layout.py).

    Examples
    --------
    >>> from roofline import get_model, get_accelerator
    >>> d = Deployment(get_model("llama-3.1-70b"), get_accelerator("h100-sxm"), 4)
    >>> d.tensor_parallel_size, d.share.num_key_value_heads, d.share.weight_bytes
    (4, 2, 35278831616)
    """

    model: ModelConfig
    accelerator: Accelerator
    parallelism: Parallelism = attrs.field(default=Parallelism(), converter=_parallelism)
    flops: str = "exact"
    estimate: Any = None
    _share: ModelConfig = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        # each error names its field (T, an integer >= 1, was checked by the parallelism's converter)
        if not isinstance(self.model, ModelConfig):
            raise InvalidValueError("model", self.model, "expected a ModelConfig (roofline.get_model or load_model)")
        if not isinstance(self.accelerator, Accelerator):
            raise InvalidValueError("accelerator", self.accelerator,
                                    "expected an Accelerator (roofline.get_accelerator)")
        parallelism = self.parallelism
        if isinstance(self.model, ModelShare):
            raise InvalidValueError("model", self.model.name,
                                    f"is already one GPU's share of {self.model.tensor_parallel_size} "
                                    "(ModelConfig.per_gpu): give the whole model and the tensor-parallel size")
        object.__setattr__(self, "_share", self.model.per_gpu(parallelism.tensor))
        P = int(parallelism.pipeline)
        if P > 1:
            _check_pipeline(self.model, P)
        if parallelism.expert:
            _check_expert_parallel(self.model, parallelism.expert_parallel_size)
            if P > 1:
                raise InvalidValueError("enable_expert_parallel", True, f"beside pipeline_parallel_size={P}: "
                                        "expert parallelism across pipeline stages is not modelled (P = 1 only)")
        object.__setattr__(self, "flops", flops_convention(self.flops))
        object.__setattr__(self, "estimate", _profile(self.estimate))

    # ------------------------------------------------------------------ what it holds
    @property
    def tensor_parallel_size(self) -> int:
        """T [GPUs] of the tensor-parallel group."""
        return self.parallelism.tensor

    @property
    def pipeline_parallel_size(self) -> int:
        """P [stages] of the pipeline (1: no pipeline)."""
        return int(self.parallelism.pipeline)

    @property
    def virtual_engines(self) -> int:
        """Batches the pipeline runs at once [batches]: P (vLLM V0's virtual engines, one scheduler each)."""
        return self.pipeline_parallel_size

    @property
    def gpus(self) -> int:
        """GPUs the deployment uses [GPUs] (:attr:`Parallelism.gpus`)."""
        return self.parallelism.gpus

    @property
    def expert_parallel_size(self) -> int:
        """R [GPUs] of the expert-parallel group (:attr:`Parallelism.expert_parallel_size`; 1 without it)."""
        return self.parallelism.expert_parallel_size

    @property
    def share(self) -> ModelConfig:
        """One GPU's share of the model (:meth:`roofline.ModelConfig.per_gpu`); the model itself at T = 1.

        Every size it gives (weight bytes, KV bytes per token, FLOPs per token) is per GPU.
        """
        return self._share

    @property
    def time_kind(self) -> str:
        """``"bound"``, or ``"estimate: "`` and the profile's name."""
        return "bound" if self.estimate is None else f"estimate: {self.estimate.name}"

    @property
    def where(self) -> str:
        """What it runs on, as the commands print it: ``"H100 SXM"`` or ``"4 x H100 SXM"``."""
        T, P = self.tensor_parallel_size, self.pipeline_parallel_size
        if P > 1:
            return f"{T * P} x {self.accelerator.name} (TP {T} x PP {P})"
        return self.accelerator.name if T == 1 else f"{T} x {self.accelerator.name}"

    def as_bound(self) -> Deployment:
        """The same deployment priced by the roofline bound (no engine profile)."""
        return self if self.estimate is None else attrs.evolve(self, estimate=None)

    # ------------------------------------------------------------------ its numbers
    def step_terms(self) -> dict[str, int | Fraction]:
        """One GPU's inputs to the step-time formulas under the deployment's FLOPs convention.

        :meth:`roofline.ModelConfig.step_terms` of :attr:`share`: ``weight_bytes`` [bytes],
        ``kv_bytes_per_token`` [bytes/token], ``flops_per_token`` [FLOP/token],
        ``attention_flops_per_token`` [FLOP/(token x context token)]. Raises nothing (checked at
        construction).
        """
        return self.share.step_terms(self.flops)

    def allreduce_terms(self) -> dict[str, Any]:
        """The all-reduce formulas' keyword arguments of this group (:func:`allreduce_terms`).

        Raises
        ------
        InvalidValueError
            A group the accelerator's links cannot hold (the network between servers is not modelled).
        """
        return allreduce_terms(self.share, self.accelerator, self.tensor_parallel_size)

    def cost_terms(self, *, overhead: Any = 0) -> dict[str, Any]:
        """The fields of this deployment's :class:`roofline.sim.RooflineCostModel` (all but ``exact``).

        Parameters
        ----------
        overhead : [s] >= 0, default 0
            Fixed per-step overhead; an estimate adds its t_step + L t_layer to it (and its t_seq,
            when not 0, as ``per_sequence``: B x t_seq per decode step of B rows).

        Returns
        -------
        dict
            One GPU's ``weight_bytes`` (a MoE model's shared weights, with ``routed_expert_bytes``,
            ``num_experts``, ``experts_per_token``), ``kv_bytes_per_token``, ``flops_per_token``,
            ``attention_flops_per_token``, ``bandwidth`` and ``peak_flops`` (x eta_bw and x eta_mm
            under an estimate), ``overhead``, ``layer_windows``, a hybrid's ``state_bytes``, a sparse-attention
            model's ``index_topk`` and rates (:meth:`roofline.ModelConfig.sparse_terms`) and, at
            T > 1, the all-reduce terms.

        Raises
        ------
        InvalidValueError
            An overhead that is an array or not a number (negative under an estimate); a group the
            accelerator's links cannot hold.
        """
        check_scalar("overhead", overhead)
        accelerator = self.accelerator
        if self.estimate is not None:
            check_nonnegative("overhead", overhead)
            extra = self.estimate.overhead(self.model.num_hidden_layers)
            if isinstance(extra, bool) or not isinstance(extra, (int, float, Fraction, np.integer, np.floating)):
                raise InvalidValueError("estimate", self.estimate, f"overhead(L) returned {extra!r}: expected seconds")
            overhead = overhead + extra
            from .profiles import scaled_for

            accelerator = scaled_for(self.estimate, accelerator, self.model)
            if not isinstance(accelerator, Accelerator):
                raise InvalidValueError("estimate", self.estimate, f"scaled(accelerator) returned {accelerator!r}: "
                                        "expected an Accelerator")
        share = self.share
        tp: dict[str, Any] = {}
        if self.tensor_parallel_size > 1:
            tp = allreduce_terms(share, accelerator, self.tensor_parallel_size)
        terms: dict[str, Any] = dict(share.step_terms(self.flops))
        if share.is_moe:
            terms["weight_bytes"] = share.shared_weight_bytes
            terms.update(routed_expert_bytes=share.routed_expert_bytes, num_experts=share.num_experts,
                         experts_per_token=share.num_experts_per_tok)
        if self.expert_parallel_size > 1:
            terms.update(expert_parallel_terms(self.model, accelerator, self.expert_parallel_size))
            terms["weight_bytes"] = share.shared_weight_bytes + terms.pop("replicated_bytes")
        per_sequence: dict[str, Any] = {}
        t_seq = per_sequence_time(self.estimate)
        if t_seq:
            per_sequence = dict(per_sequence=t_seq)
        if share.is_hybrid:
            terms["state_bytes"] = share.state_bytes_per_sequence
        if share.is_sparse_attention:  # docs/conventions.md, "Sparse attention"
            terms.update(share.sparse_terms(self.flops))
        pp: dict[str, Any] = {}
        if self.pipeline_parallel_size > 1:
            terms["weight_bytes"] += sum(st.weight_bytes for st in self.stages()) - share.weight_bytes  # a tied copy
            pp = self.send_terms()
            if not tp:  # the stages' own hidden size for the sends (no all-reduce at T = 1)
                tp = dict(num_hidden_layers=share.num_hidden_layers, hidden_size=share.hidden_size,
                          activation_bytes=share.activation_bytes)
            pp.pop("hidden_size"), pp.pop("activation_bytes")
        return dict(terms, **accelerator.step_terms(share.compute_dtype), overhead=overhead, **tp,
                    layer_windows=share.layer_windows, **per_sequence, **pp)

    # ------------------------------------------------------------------ pipeline stages
    def stages(self) -> tuple[PipelineStage, ...]:
        """The P pipeline stages, one GPU's sizes in each (docs/conventions.md, "Pipeline parallelism").

        Layers split by :func:`stage_layers` (vLLM's ``get_pp_indices``); each GPU of stage s holds
        1/T of its layers (:attr:`share`'s per-layer sizes), the first stage also the embedding (and
        other towers), the last the final norm and the lm_head (with tied embeddings the last stage
        holds its own copy of the matrix, as vLLM loads it there). At P = 1 one stage: the share.

        Returns
        -------
        tuple of :class:`PipelineStage`; their weight bytes sum to :attr:`share`'s (+ a tied copy),
        their KV bytes per token and FLOPs per token to the share's.
        """
        return _stages(self.share, self.pipeline_parallel_size, self.flops)

    def pipeline_sends(self) -> tuple[int, int]:
        """``(intra_node_sends, inter_node_sends)``: the P - 1 stage boundaries inside a node and across nodes.

        Placement (docs/conventions.md, "Pipeline parallelism"): GPU ranks in order, each stage's
        TP group on T consecutive ranks, nodes of :attr:`roofline.Accelerator.node_gpus` ranks; the
        boundary before stage s crosses nodes when ranks s T - 1 and s T sit in different nodes.
        """
        T, node = self.tensor_parallel_size, self.accelerator.node_gpus
        inter = sum(1 for s in range(1, self.pipeline_parallel_size) if (s * T - 1) // node != (s * T) // node)
        return self.pipeline_parallel_size - 1 - inter, inter

    def send_terms(self) -> dict[str, Any]:
        """The pipeline send formulas' keywords (:func:`roofline.formulas.pipeline_sends_time` without ``batch``).

        ``hidden_size``, ``activation_bytes``, the two counts of :meth:`pipeline_sends`, the scale-up
        link inside a node (``send_bandwidth``, ``send_latency``: :meth:`roofline.Accelerator.link` of
        two GPUs) and the NIC (``network_bandwidth``, ``network_latency``); a link the boundaries do
        not use is given as bandwidth 1, latency 0.

        Raises
        ------
        InvalidValueError
            A boundary inside a node on a part with no GPU-to-GPU link, or across nodes on a part
            without a sourced ``network`` (field ``pipeline_parallel_size``).
        """
        intra, inter = self.pipeline_sends()
        a = self.accelerator
        send: tuple[Any, Any] = (Fraction(1), Fraction(0))
        net: tuple[Any, Any] = (Fraction(1), Fraction(0))
        try:
            if intra:
                link = a.link(2)
                send = (Fraction(link.bandwidth.value), Fraction(link.latency.value))
        except InvalidValueError:
            raise InvalidValueError("pipeline_parallel_size", self.pipeline_parallel_size,
                                    f"{a.name} has no GPU-to-GPU link for the sends between stages") from None
        if inter:
            if a.network is None:
                raise InvalidValueError("pipeline_parallel_size", self.pipeline_parallel_size,
                                        f"{self.gpus} GPUs span {a.nodes(self.gpus)} nodes of {a.node_gpus}, and "
                                        f"{a.name} has no sourced network link between nodes")
            net = (Fraction(a.network.bandwidth.value), Fraction(a.network.latency.value))
        return dict(hidden_size=self.share.hidden_size, activation_bytes=self.share.activation_bytes,
                    intra_node_sends=intra, inter_node_sends=inter, send_bandwidth=send[0], send_latency=send[1],
                    network_bandwidth=net[0], network_latency=net[1])

    def kv_blocks(self, *, block_size: int = 16, utilization: Any = Fraction(9, 10), reserved: Any = 0) -> int:
        """KV blocks the whole pipeline holds [blocks]: the least over the stages (vLLM's num_gpu_blocks).

        Each stage's GPU: ``kv_budget`` (usable memory x utilization - its weights - ``reserved``) //
        (block_size x its KV bytes per token); 0 where a stage's budget is not positive. A hybrid's
        stage holding no attention layer holds no KV blocks and does not bound them (its states
        bound the sequences: :meth:`state_blocks`).

        Raises
        ------
        InvalidValueError
            A bad block size, utilization or reserve (naming it).
        """

        check_int("block_size", block_size, minimum=1)
        out = None
        for st, blocks in self._stage_blocks(block_size, utilization, reserved):
            if st.kv_bytes_per_token:
                out = blocks if out is None else min(out, blocks)
        return int(out or 0)

    def _stage_blocks(self, block_size: int, utilization: Any, reserved: Any) -> list[tuple[PipelineStage, int]]:
        """Each stage with the KV blocks of its GPU's budget (0: no budget left, or no KV held)."""
        from . import formulas as f

        out = []
        for st in self.stages():
            budget = f.kv_budget(memory=Fraction(self.accelerator.usable_memory), utilization=utilization,
                                 weight_bytes=Fraction(st.weight_bytes), reserved=reserved)
            blocks = 0 if budget <= 0 or not st.kv_bytes_per_token else int(f.kv_capacity_blocks(
                budget=budget, kv_bytes_per_token=st.kv_bytes_per_token, block_size=block_size))
            out.append((st, blocks))
        return out

    def state_blocks(self, *, block_size: int = 16) -> int:
        """Blocks one sequence's recurrent state takes in the pool of :meth:`kv_blocks` [blocks]: the most over
        the stages of ceil(S_s / (block_size x k_s)) (docs/conventions.md, "Pipeline parallelism": stages of a
        hybrid); 0 without recurrent layers.

        S_s and k_s are the stage's :attr:`PipelineStage.state_bytes` and KV bytes per token
        (:func:`roofline.formulas.hybrid_state_blocks`, vLLM V1's paging of a state into the KV pool). A pool
        of :meth:`kv_blocks` blocks with this many state blocks a sequence holds, on every stage, no more
        than that stage's own pool (the least blocks, the most state blocks): exact when the stages agree,
        else a lower bound on the sequences that fit (:meth:`sequences_that_fit` is exact).

        Raises
        ------
        InvalidValueError
            A bad block size; a stage that holds recurrent layers and no attention layer (its pool holds
            states only, not modelled as KV blocks: field ``pipeline_parallel_size``).
        """
        from . import formulas as f

        check_int("block_size", block_size, minimum=1)
        out = 0
        for st in self.stages():
            if not st.state_bytes:
                continue
            if not st.kv_bytes_per_token:
                raise InvalidValueError("pipeline_parallel_size", self.pipeline_parallel_size,
                                        f"stage {st.index} of {self.model.name} (layers {st.first_layer}-"
                                        f"{st.first_layer + st.layers - 1}) holds recurrent layers and no attention "
                                        "layer: a pool of states only is not modelled; another P")
            out = max(out, int(f.hybrid_state_blocks(state_bytes=st.state_bytes, block_size=block_size,
                                                     kv_bytes_per_token=st.kv_bytes_per_token)))
        return out

    def sequences_that_fit(self, context: int, *, block_size: int = 16, utilization: Any = Fraction(9, 10),
                           reserved: Any = 0) -> int:
        """Sequences of ``context`` tokens the whole pipeline holds at once [sequences]: the least over the stages.

        A stage s of N_s blocks (:meth:`kv_blocks`' per-stage count) holds floor(N_s / (ceil(c / b) + sigma_s)),
        sigma_s = ceil(S_s / (b k_s)) its state blocks (:func:`roofline.formulas.hybrid_sequences_that_fit`);
        a stage of recurrent layers only holds floor(budget_s / S_s) (its states in bytes); a stage with
        neither (no budget) holds 0.

        Parameters
        ----------
        context : int >= 1 [tokens]
        block_size, utilization, reserved : as :meth:`kv_blocks`

        Raises
        ------
        InvalidValueError
            A context that is not an integer >= 1, a bad block size, utilization or reserve (naming it).
        """
        from . import formulas as f

        check_int("context", context, minimum=1)
        check_int("block_size", block_size, minimum=1)
        out = None
        for st, blocks in self._stage_blocks(block_size, utilization, reserved):
            if st.kv_bytes_per_token:
                sigma = f.hybrid_state_blocks(state_bytes=st.state_bytes, block_size=block_size,
                                              kv_bytes_per_token=st.kv_bytes_per_token) if st.state_bytes else 0
                n = int(f.hybrid_sequences_that_fit(pool_blocks=blocks, context=context, block_size=block_size,
                                                    state_blocks=sigma))
            elif st.state_bytes:
                budget = f.kv_budget(memory=Fraction(self.accelerator.usable_memory), utilization=utilization,
                                     weight_bytes=Fraction(st.weight_bytes), reserved=reserved)
                n = max(0, int(budget // Fraction(st.state_bytes)))
            else:
                continue
            out = n if out is None else min(out, n)
        return int(out or 0)

    def virtual_engine_kv_blocks(self, *, block_size: int = 16, utilization: Any = Fraction(9, 10),
                                 reserved: Any = 0) -> int:
        """KV blocks of one virtual engine [blocks]: :meth:`kv_blocks` // P (vLLM V0 splits num_gpu_blocks so).

        Raises as :meth:`kv_blocks`.
        """
        return self.kv_blocks(block_size=block_size, utilization=utilization,
                              reserved=reserved) // self.pipeline_parallel_size


@attrs.frozen
class PipelineStage:
    """One pipeline stage as one GPU of its tensor-parallel group holds it (:meth:`Deployment.stages`).

    Attributes
    ----------
    index : int, 0 .. P - 1
    first_layer, layers : int [layers]: it runs layers first_layer .. first_layer + layers - 1
    weight_bytes : [bytes] one GPU's (its layers' 1/T, + embedding on the first, + lm_head and final
        norm on the last)
    kv_bytes_per_token : [bytes/token] one GPU's, for its layers
    flops_per_token, attention_flops_per_token : [FLOP/token, FLOP/(token x context token)] one GPU's
        (attention at full attention: its windowed layers read :attr:`layer_windows`)
    moe_layers : int [layers] of its layers that are MoE layers (0 for a dense model)
    routed_expert_bytes : [bytes] one routed expert's bytes over its MoE layers, one GPU's (0: dense)
    layer_windows : tuple of (int or None), its layers' sliding windows [tokens] (empty: all full)
    shared_weight_bytes : [bytes] what a decode step reads in it whatever the routing: its weights but
        the routed experts and the other towers (held, not read to decode text)
    recurrent_layers : int [layers] of its layers that are a hybrid's recurrent layers (0 without them)
    state_bytes : [bytes] the recurrent state one sequence keeps in this stage: its recurrent layers' (0
        without them; the stages' sum is :attr:`roofline.ModelConfig.state_bytes_per_sequence`)
    """

    index: int
    first_layer: int
    layers: int
    weight_bytes: Any
    kv_bytes_per_token: Any
    flops_per_token: Any
    attention_flops_per_token: Any
    moe_layers: int = 0
    routed_expert_bytes: Any = 0
    layer_windows: tuple[int | None, ...] = ()
    shared_weight_bytes: Any = None
    recurrent_layers: int = 0
    state_bytes: Any = 0

    def held_tokens(self, context: Any) -> Any:
        """Token-layers of KV one sequence of ``context`` tokens holds in this stage [token-layers]:
        sum over its layers of min(c, w_l) (``layers`` x c without windows)."""
        if not self.layer_windows:
            return self.layers * context
        return sum((context if w is None else min(context, w) for w in self.layer_windows), 0)

    def read_weight_bytes(self, experts_touched: Any) -> Any:
        """Weight bytes one decode step reads in this stage [bytes]: all but the routed experts and the
        towers, + one expert's bytes x ``experts_touched`` (expected distinct experts per MoE layer)."""
        shared = self.weight_bytes if self.shared_weight_bytes is None else self.shared_weight_bytes
        return shared + self.routed_expert_bytes * experts_touched if self.routed_expert_bytes else shared


def stage_layers(num_hidden_layers: int, pipeline_parallel_size: int) -> tuple[int, ...]:
    """Layers of each of P stages [layers], vLLM's rule (``get_pp_indices``, vllm/distributed/utils.py).

    L // P each; the L mod P left over go one each to the stages just before the last, from
    stage P - 2 down (the last stage holds the final norm and lm_head, so it gets none; with
    L mod P <= P - 2 the first stage, holding the embedding, gets none either).

    Raises
    ------
    InvalidValueError
        P not an integer in [1, L] (field ``pipeline_parallel_size``).

    Examples
    --------
    >>> stage_layers(126, 4), stage_layers(80, 3), stage_layers(7, 4)
    ((31, 32, 32, 31), (27, 27, 26), (2, 2, 2, 1))
    """
    check_int("num_hidden_layers", num_hidden_layers, minimum=1)
    check_int("pipeline_parallel_size", pipeline_parallel_size, minimum=1)
    L, P = int(num_hidden_layers), int(pipeline_parallel_size)
    if P > L:
        raise InvalidValueError("pipeline_parallel_size", P, f"exceeds the model's {L} layers (a stage holds >= 1)")
    parts = [L // P] * P
    for i in range(2, L % P + 2):
        parts[-i] += 1
    return tuple(parts)


_FIRST = ("embed_tokens", "embed_positions", "other towers")
_LAST = ("final norm", "lm_head", "lm_head.bias")
_MOE_GROUPS = ("router", "router.bias", "e_score_correction_bias", "shared_expert_gate")

#: Families whose dense layers come first, the MoE layers after them (``first_k_dense_replace``, with
#: ``moe_layer_freq`` 1 as in every released DeepSeek, Kimi and GLM MoE config; vLLM's deepseek_v2.py
#: and glm4_moe.py build layer i as MoE iff i >= first_k_dense_replace).
_DENSE_FIRST = frozenset({"deepseek", "deepseek_v2", "deepseek_v3", "kimi_k2", "glm4_moe", "glm4_moe_lite"})
#: Families whose MoE layers are every s-th (Llama 4's ``interleave_moe_layer_step``: layer i is MoE iff
#: (i + 1) % s == 0, vLLM's llama4.py), s read back from the count as the one step giving it.
_INTERLEAVED = frozenset({"llama4", "llama4_text"})


def _layer_kinds(model: ModelConfig, P: int) -> tuple[tuple[bool, int | None, str], ...]:
    """Each layer's kind in order: ``(is a MoE layer, its sliding window or None, its mixer)`` (docs/conventions.md,
    "Pipeline parallelism": stages of layers that differ), the mixer ``"a"`` (attention), ``"r"`` (a hybrid's
    recurrent layer, attention beside it when the mixer is ``parallel``) or ``"m"`` (an MLP-only layer).

    A ModelConfig holds how many MoE layers there are, not where: their positions follow the
    family's rule (``model_type``): dense layers first for DeepSeek's ``first_k_dense_replace``
    families (DeepSeek-V2/V3, Kimi K2, GLM-4.5), every s-th layer for Llama 4's
    ``interleave_moe_layer_step``. Windows are the model's own ``layer_windows``, one per layer; a
    hybrid's recurrent and MLP-only layers sit where its mixer's ``layer_kinds`` (read from the
    config's ``layer_types`` / ``hybrid_override_pattern``) puts them.

    Raises
    ------
    InvalidValueError
        Field ``pipeline_parallel_size``: a hybrid whose mixer does not hold its layers' positions
        (``layer_kinds`` empty or not one per layer, or not matching the MLP-only count), MLP-only
        layers without them, or a MoE model of another family with some dense layers (where its
        MoE layers sit is not known).
    """
    L = model.num_hidden_layers
    windows: tuple[int | None, ...] = model.layer_windows or (None,) * L
    mixer = model.state_mixer
    if mixer is not None:
        kinds = mixer.layer_kinds
        if len(kinds) != L or kinds.count("m") != model.mlp_only_layers:
            raise InvalidValueError("pipeline_parallel_size", P, f"{model.name}: where its {mixer.layers} "
                                    f"{mixer.kind} layers sit is not held (StateMixer.layer_kinds "
                                    f"{kinds!r}, {L} layers); load it from its config.json; P = 1")
    elif model.mlp_only_layers or model.mixer_only:
        raise InvalidValueError("pipeline_parallel_size", P, f"{model.name}: where its MLP-only layers sit is not "
                                "held; P = 1")
    else:
        kinds = "a" * L
    # the layers holding an MLP (dense or MoE): every layer, or the MLP-only ones of a mixer_only model
    mlp = [k == "m" for k in kinds] if model.mixer_only else [True] * L
    n = model.num_moe_layers if model.is_moe else 0
    if n in (0, sum(mlp)):
        moe = [bool(n) and has for has in mlp]
    elif model.model_type in _DENSE_FIRST and all(mlp):
        moe = [i >= L - n for i in range(L)]
    elif model.model_type in _INTERLEAVED and all(mlp) and len(
            steps := [s for s in range(1, L + 1) if len(range(s - 1, L, s)) == n]) == 1:
        moe = [(i + 1) % steps[0] == 0 for i in range(L)]
    else:
        raise InvalidValueError("pipeline_parallel_size", P, f"{model.name}: where its {n} MoE layers of {L} "
                                f"sit is not known for model_type {model.model_type!r} (dense-first: "
                                f"{', '.join(sorted(_DENSE_FIRST))}; interleaved: llama4); P = 1")
    return tuple(zip(moe, windows, kinds, strict=True))


def _check_pipeline(model: ModelConfig, P: int) -> None:
    stage_layers(model.num_hidden_layers, P)  # P <= L, by name
    _layer_kinds(model, P)


def _stages(share: ModelConfig, P: int, flops: str) -> tuple[PipelineStage, ...]:
    L = share.num_hidden_layers
    per_token, attention = share.flops_per_token(flops)
    kinds = _layer_kinds(share, P) if P > 1 else ()
    n_moe = share.num_moe_layers if share.is_moe else 0
    if P == 1:
        return (PipelineStage(0, 0, L, share.weight_bytes, share.kv_bytes_per_token, per_token, attention,
                              moe_layers=n_moe, routed_expert_bytes=share.routed_expert_bytes,
                              layer_windows=share.layer_windows,
                              shared_weight_bytes=_exact(share.weight_bytes - share._group_bytes_of("towers")
                                                         - share.num_experts * share.routed_expert_bytes),
                              recurrent_layers=share.state_mixer.layers if share.state_mixer is not None else 0,
                              state_bytes=share.state_bytes_per_sequence),)
    exact = flops == "exact"
    mixer = share.state_mixer
    attends = ("a", "r") if mixer is not None and mixer.parallel else ("a",)
    A, R = share.attention_layers, (mixer.layers if mixer is not None else 0)
    mlp_total = share.mlp_layers
    attention_names = {name for _, name, _, _ in share._attention_groups()}
    mixer_names = {name for _, name, _, _ in mixer.tensors(share.hidden_size)} if mixer is not None else set()
    out, start = [], 0
    for i, n in enumerate(stage_layers(L, P)):
        held = kinds[start:start + n]
        m = sum(k for k, _, _ in held)
        a = sum(1 for _, _, x in held if x in attends)
        r = sum(1 for _, _, x in held if x == "r")
        with_mlp = sum(1 for _, _, x in held if x == "m") if share.mixer_only else n
        # each tensor group is held by the layers of its kind: embedding first, head last, attention by the
        # attention layers, a hybrid's mixer by its recurrent layers, MLPs by kind, norms by every layer
        share_of = {"first": Fraction(i == 0), "last": Fraction(i == P - 1), "layer": Fraction(n, L),
                    "attention": Fraction(a, A), "mixer": Fraction(r, R) if R else Fraction(0),
                    "moe": Fraction(m, n_moe) if n_moe else Fraction(0),
                    "dense": Fraction(with_mlp - m, mlp_total - n_moe) if mlp_total > n_moe else Fraction(0)}
        weight: Any = 0
        fl: Any = Fraction(share.recurrent_flops_per_token) * share_of["mixer"] if exact else 0
        routed: Any = 0
        for g in share.tensor_groups():
            kind = ("first" if g.name in _FIRST else "last" if g.name in _LAST
                    else "mixer" if g.name in mixer_names and g.count == R
                    else "attention" if g.name in attention_names and g.count == A
                    else "moe" if g.cls == "experts" or g.name in _MOE_GROUPS or g.name.startswith(
                        ("experts.", "shared_experts.")) else "dense" if g.name.startswith("mlp.") else "layer")
            part = share_of[kind]
            copies = g.count or (1 if kind == "last" and i == P - 1 else 0)  # tied: the last stage's own copy
            weight += share._group_bytes(g) * copies * part
            if g.cls == "experts" or g.name.startswith("experts."):
                routed += share._group_bytes(g) * g.count * part / share.num_experts
            if exact and g.matmul:
                fl += 2 * g.numel * g.active * part
            elif not exact:
                fl += 2 * g.numel * min(g.count, g.active) * part
        windows = share.layer_windows[start:start + n] if share.layer_windows else ()
        towers = share._group_bytes_of("towers") if i == 0 else 0
        out.append(PipelineStage(i, start, n, _exact(weight), _exact(Fraction(share.kv_bytes_per_token) * a / A),
                                 _exact(fl), _exact(Fraction(attention) * a / A), moe_layers=m,
                                 routed_expert_bytes=_exact(routed), layer_windows=windows,
                                 shared_weight_bytes=_exact(weight - towers - share.num_experts * routed),
                                 recurrent_layers=r,
                                 state_bytes=_exact(Fraction(share.state_bytes_per_sequence) * share_of["mixer"])))
        start += n
    return tuple(out)


def _exact(x: Any) -> Any:
    x = Fraction(x)
    return int(x) if x.denominator == 1 else x


def _check_expert_parallel(model: ModelConfig, ranks: int) -> None:
    """Refuse, naming ``enable_expert_parallel``, a dense model or R ranks that do not divide E."""
    if not model.is_moe:
        raise InvalidValueError("enable_expert_parallel", True,
                                f"{model.name} is a dense model: expert parallelism needs routed experts")
    if model.num_experts % ranks:
        raise InvalidValueError("enable_expert_parallel", True,
                                f"num_experts={model.num_experts} of {model.name} is not divisible by the "
                                f"{ranks} ranks of the expert-parallel group (E / R whole experts per GPU)")


def expert_parallel_terms(model: ModelConfig, accelerator: Accelerator, expert_parallel_size: int) -> dict[str, Any]:
    """What expert parallelism over R ranks changes in a cost model's fields (docs/conventions.md, "Expert
    parallelism").

    Parameters
    ----------
    model : ModelConfig
        The whole model (a mixture of experts, R dividing its E).
    accelerator : Accelerator
        Its scale-up link (the all-to-all inside a node) and, for R above one node
        (:attr:`roofline.Accelerator.node_gpus`), its ``network``.
    expert_parallel_size : int >= 2
        R (= T).

    Returns
    -------
    dict
        ``routed_expert_bytes`` [bytes]: X / R, one GPU's mean per expert touched anywhere, so
        that X / R x E (1 - (1 - k/E)^n) = X x (E / R)(1 - (1 - k/E)^n), its own E / R experts'
        expected touched bytes; ``replicated_bytes`` [bytes]: the shared experts' (1 - 1/R) part
        that a replicated copy adds to the tensor-parallel share; ``expert_parallel_size``,
        ``num_moe_layers``; ``node_gpus`` (G, the group's ranks in each node: min(R, the node's
        GPUs)), ``scale_up_bandwidth`` and ``scale_up_latency`` (the link of G GPUs, bandwidth 1 and
        latency 0 when G = 1), ``network_bandwidth`` and ``network_latency`` (the NIC when R > G,
        else 1 and 0: unused).

    Raises
    ------
    InvalidValueError
        A dense model, or R not dividing E (field ``enable_expert_parallel``); a group beyond
        one node on a part without a sourced network, or links that cannot hold G (field
        ``tensor_parallel_size``, :meth:`roofline.Accelerator.link`).
    """
    check_int("expert_parallel_size", expert_parallel_size, minimum=2)
    _check_expert_parallel(model, expert_parallel_size)
    R = int(expert_parallel_size)
    G = min(R, accelerator.node_gpus)
    shared = Fraction(model.shared_expert_bytes)
    scale_up = (Fraction(1), Fraction(0))
    if G > 1:
        link = accelerator.link(G)
        scale_up = (Fraction(link.bandwidth.value), Fraction(link.latency.value))
    network = (Fraction(1), Fraction(0))
    if R > G:
        if accelerator.network is None:
            raise InvalidValueError("tensor_parallel_size", R, f"{R} GPUs span {accelerator.nodes(R)} nodes of {G}, "
                                    f"and {accelerator.name} has no sourced network link between nodes")
        network = (Fraction(accelerator.network.bandwidth.value), Fraction(accelerator.network.latency.value))
    return dict(routed_expert_bytes=Fraction(model.routed_expert_bytes) / R, replicated_bytes=shared - shared / R,
                expert_parallel_size=R, num_moe_layers=model.num_moe_layers, node_gpus=G,
                scale_up_bandwidth=scale_up[0], scale_up_latency=scale_up[1],
                network_bandwidth=network[0], network_latency=network[1])


def per_sequence_time(profile: Any) -> Any:
    """An engine profile's t_seq [s] (0 for the bound, None, or a profile object without ``per_sequence``)."""
    method = getattr(profile, "per_sequence", None)
    return method() if callable(method) else 0


def allreduce_terms(model: ModelConfig, accelerator: Accelerator, tensor_parallel_size: int) -> dict[str, Any]:
    """The all-reduce formulas' keyword arguments for ``model`` on a group of T ``accelerator`` GPUs.

    ``num_hidden_layers``, ``hidden_size``, ``activation_bytes`` (:attr:`roofline.ModelConfig.activation_bytes`),
    ``tensor_parallel_size`` and the link's ``link_bandwidth`` [bytes/s, per direction] and
    ``link_latency`` [s] (:meth:`roofline.Accelerator.link`); pass them with ``**`` to
    :func:`roofline.formulas.decode_allreduce_time` (docs/conventions.md, "Tensor parallelism").
    At T = 1 no link is needed: bandwidth 1 and latency 0, and every all-reduce term is 0. A
    group larger than one node gives the hierarchical all-reduce's effective per-step values
    (:func:`group_link`), so the ring formula prices it exactly.

    Raises
    ------
    InvalidValueError
        ``model`` or ``accelerator`` of the wrong type; T not an integer >= 1, or a group the
        accelerator's links cannot hold (beyond one node without a sourced network link).
    """
    if not isinstance(model, ModelConfig):
        raise InvalidValueError("model", model, "expected a ModelConfig (roofline.get_model or load_model)")
    if not isinstance(accelerator, Accelerator):
        raise InvalidValueError("accelerator", accelerator, "expected an Accelerator (roofline.get_accelerator)")
    check_int("tensor_parallel_size", tensor_parallel_size, minimum=1)
    if tensor_parallel_size == 1:
        bandwidth, latency = Fraction(1), Fraction(0)
    else:
        bandwidth, latency = group_link(accelerator, int(tensor_parallel_size))
    return dict(num_hidden_layers=model.num_hidden_layers, hidden_size=model.hidden_size,
                activation_bytes=model.activation_bytes, tensor_parallel_size=int(tensor_parallel_size),
                link_bandwidth=bandwidth, link_latency=latency)


def group_link(accelerator: Accelerator, tensor_parallel_size: int) -> tuple[Fraction, Fraction]:
    """The per-step ``(link_bandwidth [bytes/s], link_latency [s])`` a group of T >= 2 GPUs all-reduces at, exact.

    Inside one node (T <= :attr:`roofline.Accelerator.node_gpus`): the link of
    :meth:`roofline.Accelerator.link`, so the ring. Beyond one node: the hierarchical all-reduce
    (intra-node reduce-scatter, inter-node ring over the NIC, intra-node all-gather) as the ring
    over T at its effective values, :func:`roofline.formulas.hierarchical_link_bandwidth` and
    :func:`roofline.formulas.hierarchical_link_latency` (docs/conventions.md, "Groups that span
    nodes"), G = node_gpus GPUs of the group in each node.

    Raises
    ------
    InvalidValueError
        As :meth:`roofline.Accelerator.link` (field ``tensor_parallel_size``).
    """
    from . import formulas as f

    link = accelerator.link(tensor_parallel_size)
    beta, alpha = Fraction(link.bandwidth.value), Fraction(link.latency.value)
    node = accelerator.node_gpus
    if tensor_parallel_size <= node or accelerator.network is None:
        return beta, alpha
    net = accelerator.network
    kw = dict(tensor_parallel_size=tensor_parallel_size, node_gpus=node, link_bandwidth=beta, link_latency=alpha,
              network_bandwidth=Fraction(net.bandwidth.value), network_latency=Fraction(net.latency.value))
    return Fraction(f.hierarchical_link_bandwidth(**kw)), Fraction(f.hierarchical_link_latency(**kw))


def as_deployment(
    model: ModelConfig | Deployment,
    accelerator: Accelerator | None = None,
    *,
    tensor_parallel_size: Any = FROM_DEPLOYMENT,
    flops: Any = FROM_DEPLOYMENT,
    estimate: Any = FROM_DEPLOYMENT,
) -> Deployment:
    """The Deployment a function given ``model`` (a Deployment or a ModelConfig) and its keywords prices.

    Parameters
    ----------
    model : Deployment or ModelConfig
        A Deployment is used as it is, with ``flops`` and ``estimate`` replaced where given. A
        ModelConfig needs ``accelerator``; a share made by :meth:`roofline.ModelConfig.per_gpu`
        is priced at its own T (its whole model at T).
    accelerator : Accelerator or None
        Only beside a ModelConfig.
    tensor_parallel_size : int >= 1, default 1 (a Deployment's own)
    flops : {"exact", "2p"}, default "exact" (a Deployment's own)
    estimate : EngineProfile or None, default None: the bound (a Deployment's own)

    Returns
    -------
    Deployment

    Raises
    ------
    InvalidValueError
        An accelerator, or a tensor-parallel size other than its own, given beside a Deployment
        (it holds them); a share given with a T > 1 (already one GPU's share); whatever
        :class:`Deployment` refuses, naming the field.
    """
    given = {k: v for k, v in (("flops", flops), ("estimate", estimate)) if v is not FROM_DEPLOYMENT}
    if isinstance(model, Deployment):
        if accelerator is not None:
            raise InvalidValueError("accelerator", accelerator,
                                    "given beside a Deployment, which holds its accelerator")
        if tensor_parallel_size is not FROM_DEPLOYMENT and not (
                _is_count(tensor_parallel_size) and tensor_parallel_size == model.tensor_parallel_size):
            raise InvalidValueError("tensor_parallel_size", tensor_parallel_size,
                                    f"given beside a Deployment of T = {model.tensor_parallel_size}, which holds it")
        return attrs.evolve(model, **given) if given else model
    T = 1 if tensor_parallel_size is FROM_DEPLOYMENT else tensor_parallel_size
    if isinstance(model, ModelShare):  # a share prices its own T; per_gpu refuses splitting it again, by name
        share = model
        share.per_gpu(T)
        model, T = share.whole, share.tensor_parallel_size
    return Deployment(model, accelerator, T, **given)  # type: ignore[arg-type]  # accelerator None: refused by name


def profile(name: Any) -> Any:
    """The engine profile a flag or keyword names: None stays None (the bound), a key or name is looked up.

    Parameters
    ----------
    name : str, EngineProfile or None
        An engine version (``"vllm-v1"``, ``"trtllm-1.0"``), an engine's name (``"vllm"``: its newest
        version), or a fitted profile's key or name (``"vLLM with CUDA graphs"``:
        :func:`roofline.profiles.resolve_engine_profile`); a profile is returned as it is.

    Returns
    -------
    EngineProfile or None

    Raises
    ------
    UnknownPresetError
        An unknown name; InvalidValueError for a profile whose calibration rows are not priced yet
        (:func:`roofline.profiles.get_engine_profile`) or a version without constants.
    """
    if name is None or not isinstance(name, str):
        return None if name is None else get_engine_profile(name)
    return resolve_engine_profile(name)[0]


def _is_count(value: Any) -> bool:
    return not isinstance(value, (bool, np.ndarray)) and isinstance(value, (int, np.integer))
