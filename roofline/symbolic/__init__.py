"""Symbolic derivations with SymPy: one module per topic, symbols declared once.

Importing this package imports SymPy (``import roofline`` does not). Each module
derives its expressions from definitions (bytes, FLOPs, the roofline max) with
SymPy's ``solve``, ``limit``, ``summation`` and ``integrate``; nothing is typed in
as a result. Each expression's name equals its fast path's name in
:mod:`roofline.formulas`, and its free symbols are named after the fast path's
keyword arguments, so ``expr.subs(symbols_for(kwargs))`` and the fast path take
the same inputs.

Topics: :mod:`.step_time`, :mod:`.intensity`, :mod:`.kv_cache`, :mod:`.batching`,
:mod:`.useful_share`, :mod:`.parallel` (tensor parallelism), :mod:`.fidelity` (the estimate beside the bound),
:mod:`.stretch` (decode stretches), :mod:`.serving` (closed-loop clients), :mod:`.moe` (mixture of experts),
:mod:`.speculative` (speculative decoding), :mod:`.sparse` (DeepSeek sparse attention).
"""

from ._symbols import SYMBOLS, evaluate, symbols_for

__all__ = ["SYMBOLS", "symbols_for", "evaluate"]
