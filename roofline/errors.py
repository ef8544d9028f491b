"""Errors raised by roofline.

Every error a user can cause is a :class:`RooflineError`, a subclass of
:class:`ValueError`, whose message names the offending field and the value
given, so that the ``roofline`` command can print it on one line and exit with
status 2.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

__all__ = [
    "RooflineError",
    "InvalidValueError",
    "ConfigError",
    "UnknownPresetError",
    "TraceError",
    "FileReadError",
    "SimulationError",
    "RunStopped",
    "RunMet",
    "MeasurementFileError",
    "UnsupportedModelError",
    "MissingExtraError",
    "NoKVBudgetError",
    "WorkloadSizeError",
    "FLAG_GIVEN",
]


class _FlagGiven:
    """The value of a switch given on the command line (``--enable-prefix-caching``), which has none to show."""

    def __repr__(self) -> str:
        return "FLAG_GIVEN"


#: An :class:`InvalidValueError`'s value for a switch (a flag that takes no value): its message reads
#: ``--flag: reason``, the flag as typed, not ``--flag=True``
FLAG_GIVEN = _FlagGiven()

#: Longest value echoed whole in a message [characters]; a longer one is cut, with its length.
MAX_SHOWN = 1000


def shown(value: Any) -> str:
    """``repr(value)`` for a one-line message: cut after :data:`MAX_SHOWN` characters, an
    integer too long for ``repr`` (over 4,300 digits) given by its bit length, and a value nested too
    deeply for ``repr`` by its type."""
    try:
        text = repr(value)
    except ValueError:  # int -> str conversion limit (sys.get_int_max_str_digits)
        return f"<an integer of {value.bit_length():,} bits>" if isinstance(value, int) else f"<{type(value).__name__}>"
    except RecursionError:  # a list nested thousands deep (a mutated config field)
        return f"<a {type(value).__name__} nested too deeply to show>"
    text = text.replace("\n", " ")
    return text if len(text) <= MAX_SHOWN else f"{text[:MAX_SHOWN]}... ({len(text):,} characters)"


class RooflineError(ValueError):
    """Base class of every input error raised by roofline (a ValueError)."""


class InvalidValueError(RooflineError):
    """A field has a value outside its valid range (zero, negative, non-finite...).

    Attributes
    ----------
    field : str
        The name of the argument or field, as the user spelled it.
    value : object
        The value the user gave, unchanged; :data:`FLAG_GIVEN` for a switch given on the command line
        (the message then reads ``field: reason``).
    """

    def __init__(self, field: str, value: Any, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"{field}: {reason}" if value is FLAG_GIVEN else f"{field}={shown(value)}: {reason}")


class WorkloadSizeError(InvalidValueError):
    """A generated workload larger than the simulator holds: its block hashes pass
    :data:`roofline.sim.workloads.MAX_HASHED_BLOCKS` (refused before any hash is made).

    ``field`` is ``num_turns`` (or ``prefix_len`` for single turns), as :class:`InvalidValueError`.

    Attributes
    ----------
    prompt_tokens : int or float
        The prompts' tokens, summed over every request [tokens] (a float where counted in float64).
    blocks : int or float
        The block hashes they need [blocks].
    block : int
        Tokens per hashed block.
    """

    def __init__(self, field: str, value: Any, reason: str, *, prompt_tokens: Any, blocks: Any, block: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.blocks = blocks
        self.block = block
        super().__init__(field, value, reason)


class MissingExtraError(RooflineError):
    """An optional dependency a feature needs is not installed; the message says how to install it.

    Attributes
    ----------
    package : str
        The missing package (``"matplotlib"``).
    extra : str
        The roofline extra that brings it (``"plot"``).
    """

    def __init__(self, package: str, extra: str, needs: str) -> None:
        self.package = package
        self.extra = extra
        super().__init__(f"{package} is not installed; {needs}: pip install 'roofline[{extra}]' "
                         f"(from a clone: pip install -e '.[{extra}]')")


class NoKVBudgetError(InvalidValueError):
    """The weights leave no KV-cache budget (``budget`` <= 0) on the accelerator.

    ``field`` is ``"budget"`` and ``value`` the budget [bytes] (a float, <= 0); the message gives
    it in GB, then why and what would fit.
    """

    def __init__(self, budget: float, reason: str) -> None:
        super().__init__("budget", budget, reason)
        self.args = (f"KV budget {budget / 1e9:,.2f} GB: {reason}",)


class ConfigError(RooflineError):
    """A model configuration (config.json or dict) is missing a field or is malformed.

    A message longer than 2 x :data:`MAX_SHOWN` characters (a 10,000-character value quoted in
    it) keeps its start, which names the file and field, and its end, which says what is wrong.
    """

    def __init__(self, message: str) -> None:
        if len(message) > 2 * MAX_SHOWN:
            message = f"{message[:MAX_SHOWN]}... ({len(message):,} characters) ...{message[-MAX_SHOWN // 2:]}"
        super().__init__(message)


class UnknownPresetError(RooflineError):
    """A preset name (model, accelerator, engine profile) is not known; the message lists the known
    ones and, where one is close (:func:`difflib.get_close_matches`, its default cutoff 0.6, case and
    surrounding spaces ignored), asks "did you mean" it.

    Attributes
    ----------
    kind, name : str
        What was looked up (``"model"``) and the name given.
    known : list of str, the names listed
    suggestion : str or None, the closest of ``known`` and ``aliases``
    field : str or None
        The option or argument that gave the name (``"--model"``), first in the message when set.
    hint : str
        For a Hugging Face id no preset knows: what to do instead (download its config.json); ``known``
        are then the presets that know an id.
    """

    def __init__(self, kind: str, name: str, known: list[str], field: str | None = None, *, hint: str = "",
                 aliases: Iterable[str] = ()) -> None:
        self.kind = kind
        self.name = name
        self.known = list(known)
        self.field = field
        self.hint = hint
        where = f"{field}: " if field else ""
        text = str(name).strip().strip("'\"").lower()
        candidates = {c.lower(): c for c in [*self.known, *aliases]}
        close = difflib.get_close_matches(text, list(candidates), n=1)
        # a Hugging Face id is not guessed among preset names
        self.suggestion = candidates[close[0]] if close and close[0] != text and not hint else None
        guess = "" if self.suggestion is None else f" (did you mean {self.suggestion!r}?)"
        if hint:  # a Hugging Face id no preset knows: what to do instead, then the ids' presets
            super().__init__(f"{where}unknown {kind} {name!r}{guess}: {hint}; presets that know a Hugging Face id: "
                             f"{', '.join(sorted(set(known))) or 'none'}")
        else:
            super().__init__(f"{where}unknown {kind} {name!r}{guess}; known: {', '.join(known)}")


class TraceError(RooflineError):
    """A request trace has a bad row; the message names the file, line and field.

    ``line`` 0 is the file as a whole (``field`` ``"file"`` when it cannot be read at all; the
    message then names only the file: ``"nope.csv: cannot read: no such file"``).
    """

    def __init__(self, path: str, line: int, field: str, message: str) -> None:
        self.path = path
        self.line = line
        self.field = field
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {message}" if field == "file" and not line
                         else f"{where}: field {field!r}: {message}")


class FileReadError(RooflineError):
    """A user-named file cannot be read as text (or JSON); ``reason`` says why.

    Callers that know what the file is for turn it into their own error naming the file
    (ConfigError, TraceError, MeasurementFileError).
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class SimulationError(RooflineError):
    """A simulation passed its ``max_steps`` safeguard, or reached a state it cannot leave."""


class RunStopped(RooflineError):
    """A run stopped early because its caller asked it to (``stop_on_misses`` of
    :func:`roofline.sim.serve_continuous`, :func:`~roofline.sim.serve_replicas`,
    :func:`~roofline.sim.serve_disaggregated`; docs/conventions.md, "Stopping a run early"): more than
    ``allowed`` requests are known to miss the limit ``limit_s`` [s] of ``metric`` (``"ttft_s"`` or
    ``"tpot_s"``); ``missed`` counts them (a lower bound on the run's misses). Not a fault of the input: the
    run has no result. ``peak_running``: the most sequences one of its schedulers held in a step before the
    stop (None where not known): as :attr:`roofline.sim.Summary.peak_running`, a larger ``max_num_seqs`` than it
    would have stopped the same run at the same point.
    """

    def __init__(self, metric: str, limit_s: Any, allowed: int, missed: int, peak_running: int | None = None) -> None:
        self.peak_running = peak_running
        self.metric = metric
        self.limit_s = limit_s
        self.allowed = allowed
        self.missed = missed
        super().__init__(f"stop_on_misses: {missed} requests miss the {metric} limit of {float(limit_s):g} s "
                         f"(more than the {allowed} allowed): the run was stopped")


class RunMet(RooflineError):
    """A run asked for its verdict only (``verdict_only`` of :func:`roofline.sim.serve_continuous`, with
    ``stop_on_misses``; docs/conventions.md, "Stopping a run early") ended with no request refused and, for every
    limit watched, fewer requests missing it than ``allowed``, so each watched percentile is within its limit:
    the run met them, and its result was not built. ``missed``: metric -> the requests that missed its limit
    (exact: every request is decided at the end); ``peak_running``: the most sequences it held in a step, as
    :attr:`roofline.sim.Summary.peak_running`. Not a fault of the input.
    """

    def __init__(self, missed: dict[str, int], peak_running: int) -> None:
        self.missed = missed
        self.peak_running = peak_running
        counts = ", ".join(f"{m} {n}" for m, n in missed.items())
        super().__init__(f"verdict_only: the run met every limit of stop_on_misses (misses: {counts})")


class MeasurementFileError(RooflineError):
    """A measurement file (calibration or published points) has a missing or bad field.

    The message names the file, the field (dotted path, e.g. ``bandwidth.value``) and
    what is wrong, on one line.
    """

    def __init__(self, path: str, field: str, message: str) -> None:
        self.path = path
        self.field = field  # "(file)": the file as a whole (unreadable, not JSON): the message names no field
        super().__init__(f"{path}: {message}" if field == "(file)" else f"{path}: field {field!r}: {message}")


class UnsupportedModelError(ConfigError):
    """A model the package does not model, refused by name: its ``model_type`` and the reason.

    Attributes
    ----------
    model_type : str
        The config's ``model_type`` (or the family using the unmodelled feature).
    reason : str
        What is not modelled (for example "state-space or hybrid model ...").
    field : str or None
        The config field (dotted path) holding what is not modelled, named in the message after the
        model_type (``model_type 'gpt_oss': field 'quantization_config.ignore': ...``), or None.
    """

    def __init__(self, model_type: str, reason: str, field: str | None = None) -> None:
        self.model_type = model_type
        self.reason = reason
        self.field = field
        what = f"field {field!r}: {reason}" if field else reason
        super().__init__(f"model_type {model_type!r}: {what}; not supported" if model_type
                         else f"{what}; not supported")
