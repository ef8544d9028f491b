"""Numeric fast paths of every formula: keyword-only, plain arithmetic.

They accept int, float, ``fractions.Fraction`` and numpy arrays (broadcast), are
exact for Fractions, and never import SymPy. :data:`REGISTRY` ties each one to its
symbolic form in :mod:`roofline.symbolic` and its proof script; the test suite checks
fast == symbolic exactly for every entry.

Topics (same names in ``roofline.symbolic``, ``tests`` and ``proofs``):
:mod:`.step_time`, :mod:`.intensity`, :mod:`.kv_cache`, :mod:`.batching`,
:mod:`.useful_share`, :mod:`.parallel` (tensor parallelism), :mod:`.fidelity` (the estimate beside the bound),
:mod:`.stretch` (decode stretches), :mod:`.serving` (closed-loop clients), :mod:`.moe` (mixture of experts),
:mod:`.hybrid` (recurrent layers beside attention), :mod:`.speculative` (speculative decoding),
:mod:`.pipeline` (pipeline parallelism), :mod:`.disaggregated` (the KV transfer between prefill and decode
pools), :mod:`.expert` (expert parallelism), :mod:`.sparse` (DeepSeek sparse attention).
"""

from ._core import REGISTRY, FormulaSpec
from .batching import *  # noqa: F403
from .batching import __all__ as _batching_all
from .disaggregated import *  # noqa: F403
from .disaggregated import __all__ as _disaggregated_all
from .expert import *  # noqa: F403
from .expert import __all__ as _expert_all
from .fidelity import *  # noqa: F403
from .fidelity import __all__ as _fidelity_all
from .hybrid import *  # noqa: F403
from .hybrid import __all__ as _hybrid_all
from .intensity import *  # noqa: F403
from .intensity import __all__ as _intensity_all
from .kv_cache import *  # noqa: F403
from .kv_cache import __all__ as _kv_all
from .moe import *  # noqa: F403
from .moe import __all__ as _moe_all
from .parallel import *  # noqa: F403
from .parallel import __all__ as _parallel_all
from .pipeline import *  # noqa: F403
from .pipeline import __all__ as _pipeline_all
from .serving import *  # noqa: F403
from .serving import __all__ as _serving_all
from .sparse import *  # noqa: F403
from .sparse import __all__ as _sparse_all
from .speculative import *  # noqa: F403
from .speculative import __all__ as _speculative_all
from .step_time import *  # noqa: F403
from .step_time import __all__ as _step_all
from .stretch import *  # noqa: F403
from .stretch import __all__ as _stretch_all
from .useful_share import *  # noqa: F403
from .useful_share import __all__ as _useful_share_all

__all__ = ["REGISTRY", "FormulaSpec", *_step_all, *_intensity_all, *_kv_all, *_batching_all, *_useful_share_all,
           *_parallel_all, *_fidelity_all, *_stretch_all, *_serving_all, *_moe_all, *_hybrid_all,
           *_speculative_all, *_pipeline_all, *_disaggregated_all, *_expert_all, *_sparse_all]
