"""The package's layout: layers that import only downwards, and no import cycle."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "roofline"

#: Layer of each module (by its dotted name under roofline, the longest prefix wins). A module
#: may import from its own layer or a lower one, never from a higher one.
LAYERS: dict[str, int] = {
    # 0: what everything shares: errors, units, the table of quantities, input checks, file reading
    "errors": 0, "units": 0, "quantities": 0, "_checks": 0, "_io": 0, "data": 0,
    # 1: the facts and the numeric fast paths
    "hardware": 1, "models": 1, "hybrid": 1, "families": 1, "quantization": 1, "formulas": 1, "profiles": 1,
    "expert_load": 1,
    # 2: the derivations and the formulas applied to a model on an accelerator
    "symbolic": 2, "estimate": 2, "deployment": 2, "speculative": 2,
    # 3: what is built on them: the scheduler, measurement, plots, proofs, strategies
    "sim": 3, "latency": 3, "measure": 3, "calibrate": 3, "validate": 3, "plotting": 3, "proofs": 3, "testing": 3,
    "plan": 3,  # the deployment search: over the scheduler (its proof p23 is layer 3 too)
    # 4: the command line
    "commands": 4, "cli": 4, "__main__": 4, "__init__": 4,
}


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def _layer(module: str) -> int:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in LAYERS:
            return LAYERS[key]
    raise AssertionError(f"roofline.{module} has no layer in tests/test_layout.py LAYERS; add it")


def _imports(path: Path) -> set[str]:
    """Modules of roofline imported by the file at ``path`` (relative imports resolved)."""
    module = _module_name(path)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    if module == "__init__":
        package = []
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and (node.module == "roofline" or node.module.startswith("roofline.")):
                target = node.module.removeprefix("roofline").lstrip(".")
            else:
                continue
            names = [a.name for a in node.names]
            for name in names:  # `from . import formulas` imports a module
                sub = f"{target}.{name}" if target else name
                if (PACKAGE / sub.replace(".", "/")).with_suffix(".py").exists() or (
                    PACKAGE / sub.replace(".", "/")
                ).is_dir():
                    found.add(sub)
                elif target:
                    found.add(target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("roofline."):
                    found.add(alias.name.removeprefix("roofline."))
    found.discard("")
    return {m for m in found if m != module}


def _graph() -> dict[str, set[str]]:
    return {_module_name(p): _imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_module_imports_only_from_its_layer_or_below() -> None:
    """No module imports from a higher layer (errors < formulas < symbolic < sim < commands)."""
    upward = [
        f"roofline.{m} (layer {_layer(m)}) imports roofline.{t} (layer {_layer(t)})"
        for m, targets in _graph().items() if m != "__init__"
        for t in sorted(targets) if _layer(t) > _layer(m)
    ]
    assert upward == []


def test_the_import_graph_has_no_cycle() -> None:
    """Following module-level imports inside roofline never comes back to where it started."""
    graph = _graph()
    state: dict[str, int] = {}
    cycles: list[str] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph:
                continue
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*stack[stack.index(nxt):], nxt]))
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for node in graph:
        if node not in state:
            visit(node, [node])
    assert cycles == []


def test_the_layout_test_sees_the_whole_package() -> None:
    """The graph covers every module, and a known import is seen (the test can fail)."""
    graph = _graph()
    assert "sim.kv" in graph and "formulas" in graph["sim.kv"]
    assert "errors" in graph["_io"]


def test_the_scheduler_does_not_import_the_measurement_side() -> None:
    """roofline.sim takes engine profiles from roofline.profiles, never from roofline.calibrate."""
    reach = [f"roofline.{m} imports roofline.{t}" for m, targets in _graph().items() if m.startswith("sim")
             for t in sorted(targets) if t.startswith("calibrate")]
    assert reach == []
