#!/usr/bin/env python3
"""Write the generated parts of the docs.

Two kinds of output:

* ``docs/derivations.md`` (committed): one entry per formula of
  :data:`roofline.formulas.REGISTRY`, in registry order grouped by topic: its SymPy
  form as MathML (:func:`mathml`), its fast path (API entry and source), its proof, the tests that name
  it and the sources of the constants its arguments take in the proofs' scenarios.
  Rewrite it with ``python docs/_generate.py`` after changing a formula, a proof or a
  test; ``tests/test_docs.py`` fails while the committed page is stale.
* ``docs/_generated/`` (ignored by git, written by ``docs/conf.py`` at build time):
  every proof's output (as ``roofline prove <name> --verbose`` prints it), the lesson's
  two charts (``roofline plot``) and one page per test file, so that the derivations
  page can link to each test.

This file lives in ``docs/`` rather than in the package because everything it reads
(``tests/``, ``proofs/``, the docs) exists only in a checkout, never in an installed
wheel.

Usage (from the repository root)::

    python docs/_generate.py            # rewrite docs/derivations.md
    python docs/_generate.py --check    # exit 1 if docs/derivations.md is stale
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import importlib
import io
import os
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
DERIVATIONS = DOCS / "derivations.md"
GENERATED = DOCS / "_generated"
REGENERATE = "python docs/_generate.py"

#: Accelerator fields behind the formulas' keyword arguments (the fields hold sourced values).
ACCELERATOR_ARGUMENTS = {
    "bandwidth": "hbm_bandwidth",
    "peak_flops": "peak_bf16",
    "memory": "memory_usable",
    "link_bandwidth": "scale_up.bandwidth",
    "link_latency": "scale_up.latency",
}


# --------------------------------------------------------------------------- tests


@dataclass(frozen=True)
class FoundTest:
    """One test function (or method) of tests/."""

    path: str  # relative to the repository root, "tests/test_kv_cache.py"
    qualname: str  # "test_x" or "TestClass.test_x"
    summary: str  # first line of its docstring
    source: str  # its source with decorators

    @property
    def label(self) -> str:
        """The Sphinx label of its entry on the generated test pages."""
        return slug(f"test-{Path(self.path).stem}-{self.qualname}")

    @property
    def nodeid(self) -> str:
        """pytest's node id."""
        return f"{self.path}::{self.qualname.replace('.', '::')}"


def slug(text: str) -> str:
    """A label: lower case, runs of other characters than letters and digits as one '-'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            yield node.name, node
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name.startswith("test"):
                    yield f"{node.name}.{item.name}", item


def collect_tests(root: Path = ROOT) -> list[FoundTest]:
    """Every test function under ``root/tests`` (files ``test_*.py``), in file and source order."""
    found = []
    for path in sorted((root / "tests").glob("test_*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for qualname, node in _functions(ast.parse(text)):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            source = "\n".join(lines[start - 1 : node.end_lineno])
            doc = (ast.get_docstring(node) or "").strip().splitlines()
            found.append(FoundTest(path.relative_to(root).as_posix(), qualname, doc[0] if doc else "", source))
    return found


def mentions(name: str) -> re.Pattern[str]:
    """Where a source names the formula ``name``: a call, an attribute or a string, not a keyword argument."""
    word = re.escape(name)
    return re.compile(rf"(?<![\w.]){word}\s*\(|\.{word}\b|['\"]{word}['\"]")


# --------------------------------------------------------------------------- the registry


def _latex(expr: Any) -> str:
    """``sympy.latex`` with each symbol written as its full name (the fast path's keyword).

    It goes into the MathML's ``alttext`` (what a screen reader without MathML support reads,
    and a copy to paste into LaTeX); the page shows the MathML of :func:`mathml`.
    """
    import sympy as sp

    names = {s: r"\mathit{" + s.name.replace("_", r"\_") + "}" for s in expr.free_symbols if isinstance(s, sp.Symbol)}
    return sp.latex(expr, symbol_names=names)


def _mathml_printer() -> Any:
    """SymPy's presentation-MathML printer, with each symbol under its full name and ``Piecewise`` as cases."""
    from sympy.printing.mathml import MathMLPresentationPrinter

    class Printer(MathMLPresentationPrinter):  # type: ignore[misc]  # sympy is untyped
        def _print_Symbol(self, sym: Any, style: str = "plain") -> Any:
            # SymPy reads "length_sum" as length with subscript sum; the name is the keyword argument.
            mi = self.dom.createElement("mi")
            mi.appendChild(self.dom.createTextNode(sym.name))
            return mi

        def _print_Piecewise(self, expr: Any) -> Any:
            # SymPy 1.14 has none (it prints "piecewise((...))"): a brace and one row per case.
            table = self.dom.createElement("mtable")
            table.setAttribute("columnalign", "left left")
            table.setAttribute("displaystyle", "true")  # a case's fraction at full size, as in the display
            for value, condition in expr.args:
                row = self.dom.createElement("mtr")
                for cell in (self._print(value), self._piece_condition(condition)):
                    td = self.dom.createElement("mtd")
                    td.appendChild(cell)
                    row.appendChild(td)
                table.appendChild(row)
            brace = self.dom.createElement("mo")
            brace.appendChild(self.dom.createTextNode("{"))
            mrow = self.dom.createElement("mrow")
            mrow.appendChild(brace)
            mrow.appendChild(table)
            return mrow

        def _piece_condition(self, condition: Any) -> Any:
            import sympy as sp

            mrow = self.dom.createElement("mrow")
            words = self.dom.createElement("mtext")
            words.appendChild(self.dom.createTextNode("\u2003otherwise" if condition == sp.true else "\u2003if\u2002"))
            mrow.appendChild(words)
            if condition != sp.true:
                mrow.appendChild(self._print(condition))
            return mrow

    return Printer({"mul_symbol": "dot"})


def mathml(expr: Any) -> str:
    """A SymPy expression as one line of HTML: a block ``<math>`` element (presentation MathML).

    Browsers render MathML without a script or a network (MathML Core), so the derivations page
    needs no MathJax. Each symbol is written under its full name, the fast path's keyword
    argument; a product is written with a dot (the names have several letters); the LaTeX of
    :func:`_latex` is the ``alttext``.
    """
    import html

    body = _mathml_printer().doprint(expr)
    return (f'<div class="math-display"><math display="block" alttext="{html.escape(_latex(expr), quote=True)}">'
            f"{body}</math></div>")


def _summary(func: Any) -> str:
    doc = (getattr(func, "__doc__", None) or "").strip().splitlines()
    return doc[0].strip() if doc else ""


def _proof_modules(root: Path) -> dict[str, str]:
    """Proof module name -> its source, for the proofs shipped in the package."""
    from roofline.proofs import proof_names

    return {name: (root / "roofline" / "proofs" / f"{name}.py").read_text(encoding="utf-8") for name in proof_names()}


_PRESET = re.compile(r"get_(accelerator|model)\(\s*['\"]([^'\"]+)['\"]")


def _scenarios(proof_sources: Iterable[str]) -> tuple[list[str], list[str]]:
    """The accelerator and model presets the proofs load by name, in order of first use."""
    accelerators: list[str] = []
    models: list[str] = []
    for text in proof_sources:
        for kind, name in _PRESET.findall(text):
            target = accelerators if kind == "accelerator" else models
            if name not in target:
                target.append(name)
    return accelerators, models


def _table_cell(text: str) -> str:
    return text.replace("|", r"\|").replace("\n", " ")


def _value(value: Any) -> str:
    from fractions import Fraction

    if isinstance(value, Fraction) and value.denominator != 1:
        return f"{float(value):,.6g}"
    return f"{int(value):,}" if isinstance(value, int | Fraction) else str(value)


def derivations_page(root: Path = ROOT) -> str:
    """The text of docs/derivations.md, from the registry, the proofs and the tests under ``root``."""
    from roofline.formulas import REGISTRY
    from roofline.hardware import get_accelerator
    from roofline.models import get_model

    tests = collect_tests(root)
    proofs = _proof_modules(root)
    from roofline.quantities import QUANTITIES

    accelerators, models = _scenarios(proofs.values())
    registry_wide = [t for t in tests if "REGISTRY" in t.source]
    # each model with its step terms, computed once (not once per argument of every formula)
    model_terms = {m: (model, model.step_terms()) for m in models for model in (get_model(m),)}

    out: list[str] = [
        "<!-- Generated by `python docs/_generate.py` from roofline.formulas.REGISTRY; do not edit by hand. -->",
        "",
        "# Derivations",
        "",
        "Every formula the package registers, one entry each, in the order of the registry. Each entry gives",
        "the **symbolic form** (derived with SymPy in `roofline.symbolic.<topic>`, written here as MathML by",
        "`sympy.printing.mathml`, which a browser renders without a script or a network; each symbol under",
        "the name of the fast path's keyword argument), the **fast path** (plain arithmetic in",
        "`roofline.formulas.<topic>`, exact for `Fraction` inputs), the **proof** that derives or uses it,",
        "the **tests** that name it, and where each argument's value comes from in the proofs' scenarios",
        "(**constant sources**)."
        + (" The tests that check every formula at once are listed {ref}`at the end <registry-wide-tests>`."
           if registry_wide else ""),
        "",
        "The definitions behind them are in [Conventions](conventions.md); the proofs' output is on",
        "[the lesson page](lesson.md).",
        "",
    ]

    lesson = lesson_proofs(root)  # read once, not once per formula
    topics: dict[str, list[Any]] = {}
    for spec in REGISTRY.values():
        topics.setdefault(spec.topic, []).append(spec)
    for topic, specs in topics.items():
        out += [f"## Topic `{topic}`", ""]
        out += [
            f"Symbolic forms: {{py:mod}}`roofline.symbolic.{topic}` ({{source}}`roofline.symbolic.{topic}`); "
            f"fast paths: {{py:mod}}`roofline.formulas.{topic}` ({{source}}`roofline.formulas.{topic}`).",
            "",
        ]
        for spec in specs:
            out += _entry(
                spec, tests, proofs, QUANTITIES, accelerators, model_terms, bool(registry_wide), lesson
            )

    arguments = {argument for spec in REGISTRY.values() for argument in spec.domains}
    out += _constants_section(accelerators, models, arguments, get_accelerator, get_model)
    if registry_wide:  # after the formulas, not before the first of them
        out += [
            "(registry-wide-tests)=",
            "## Tests that cover every formula",
            "",
            "These tests iterate over the registry, so they check each formula above (for example the fast",
            "path equals the symbolic form exactly for `Fraction` inputs):",
            "",
        ]
        out += [f"- {_test_ref(t)}" for t in registry_wide]
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def markdown_text(text: str) -> str:
    """``text`` with Markdown's special characters escaped outside its ``code`` spans."""
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(p if p.startswith("`") else re.sub(r"([\\*<>\[\]|]|(?<!\w)_|_(?!\w))", r"\\\1", p) for p in parts)


def lesson_proofs(root: Path = ROOT) -> set[str]:
    """The proofs the lesson page walks through: those it includes the output of."""
    text = (root / "docs" / "lesson.md").read_text(encoding="utf-8")
    return set(re.findall(r"_generated/proofs/(p\d\d_\w+)\.txt", text))


def _test_ref(test: FoundTest) -> str:
    ref = f"{{ref}}`{test.nodeid} <{test.label}>`"
    return f"{ref}: {markdown_text(test.summary)}" if test.summary else ref


def _entry(
    spec: Any,
    tests: list[FoundTest],
    proofs: dict[str, str],
    quantities: dict[str, Any],
    accelerators: list[str],
    model_terms: dict[str, tuple[Any, Any]],
    registry_wide: bool,
    lesson_proofs: set[str],
) -> list[str]:
    name, topic = spec.name, spec.topic
    fast_module = spec.fast.__module__
    proof = spec.proof.removesuffix(".py")
    pattern = mentions(name)
    # ``name in text`` first: each alternative of the pattern holds the name verbatim, and a plain substring
    # test is ~100x cheaper than the pattern's search over the ~1,000 test sources (same result).
    used_by = [p for p, text in proofs.items() if p != proof and name in text and pattern.search(text)]
    named_in = [t for t in tests if name in t.source and pattern.search(t.source)]
    out = [
        f"(formula-{slug(name)})=",
        f"### `{name}`",
        "",
        "```{eval-rst}",
        _summary(spec.fast),
        "```",
        "",
        f"````{{py:data}} {name}",
        f":module: roofline.symbolic.{topic}",
        "",
        "```{raw} html",
        mathml(spec.symbolic()),
        "```",
        "````",
        "",
        "| Item | Detail |",
        "|---|---|",
        f"| Fast path | {{py:func}}`{fast_module}.{name}` ({{source}}`{fast_module}.{name}`) |",
        f"| Symbolic form | `roofline.symbolic.{topic}.{name}` ({{source}}`roofline.symbolic.{topic}.{name}`) |",
        f"| Proof | {{py:mod}}`roofline.proofs.{proof}` ({{source}}`roofline.proofs.{proof}`; "
        f"script `proofs/{spec.proof}`; {{ref}}`its output <output-{slug(proof)}>`"
        + (f"; {{ref}}`the claim on the lesson page <proof-{slug(proof)}>`" if proof in lesson_proofs else "")
        + ") |",
    ]
    if used_by:
        out.append("| Also used by | " + ", ".join(f"{{py:mod}}`roofline.proofs.{p}`" for p in used_by) + " |")
    arithmetic = "exact: `Fraction` in, `Fraction` out" if spec.exact else "float (transcendental or numerical)"
    if spec.none_when_infinite:
        arithmetic += "; `None` where the symbolic form is infinite"
    out.append(f"| Arithmetic | {arithmetic} |")
    if spec.requires is not None:
        out.append(f"| Requires | `{spec.requires[0]}`: {_table_cell(spec.requires[1])} |")
    out += ["", "Arguments (meaning and unit from {py:data}`roofline.quantities.QUANTITIES`):", "",
            "| Argument | Symbol | Unit | Meaning | Domain here | Value in the proofs' scenarios |",
            "|---|---|---|---|---|---|"]
    for argument, domain in spec.domains.items():
        q = quantities.get(argument)
        symbol, unit, meaning = (q.symbol, q.unit, q.meaning) if q is not None else ("", "", "")
        if q is not None and q.assumptions:
            meaning += f" (assumed: {q.assumptions})"
        out.append(
            f"| `{argument}` | {markdown_text(symbol)} | {markdown_text(unit)} | {markdown_text(meaning)} | {domain} | "
            f"{_argument_source(argument, accelerators, model_terms)} |"
        )
    out += ["", "Tests:", ""]
    if named_in:
        out += [f"- {_test_ref(t)}" for t in named_in]
    if registry_wide:
        out.append("- and the {ref}`tests that cover every formula <registry-wide-tests>`")
    if not named_in and not registry_wide:
        out.append("- none names it")
    out.append("")
    return out


def _argument_source(argument: str, accelerators: list[str], model_terms: dict[str, tuple[Any, Any]]) -> str:
    from roofline.hardware import get_accelerator

    field = ACCELERATOR_ARGUMENTS.get(argument)
    having = [a for a in accelerators if field is not None and field in get_accelerator(a).sources()]
    if having:
        return ", ".join(f"{{ref}}`{a} {field} <constant-{slug(a)}>`" for a in having)
    cells = []
    for name, (model, terms) in model_terms.items():
        if argument in terms or hasattr(model, argument):
            cells.append(f"{{ref}}`{name} <constant-{slug(name)}>`")
    if cells:
        return "from the model config: " + ", ".join(cells)
    return "an input of each scenario"


def _constants_section(
    accelerators: list[str], models: list[str], arguments: set[str], get_accelerator: Any, get_model: Any
) -> list[str]:
    out = [
        "## Constant sources",
        "",
        "The accelerators and models the proofs load by name, with every sourced value. Derived values",
        "(the ridge point, KV bytes per token, FLOPs per token) are computed from these, never stored.",
        "",
    ]
    for key in accelerators:
        acc = get_accelerator(key)
        out += [f"(constant-{slug(key)})=", f"### Accelerator `{key}`: {acc.name}", "",
                "| Field | Value | Unit | Kind | Source (date; conditions) |", "|---|---|---|---|---|"]
        for field, sourced in acc.sources().items():
            # Five columns, not seven: the date and conditions go with their citation, so that the
            # table fits the column at 1280 px (its numbers and code names do not break).
            src = sourced.source
            when = "; ".join(n for n in (str(src.date or ""), _table_cell(src.conditions or "")) if n)
            out.append(
                f"| `{field}` | {_value(sourced.value)} | {sourced.unit} | {src.kind} | "
                f"{_table_cell(src.citation)}" + (f" ({when})" if when else "") + " |"
            )
        out.append("")
    for key in models:
        model = get_model(key)
        terms = dict(model.step_terms())
        terms.update({a: getattr(model, a) for a in sorted(arguments) if a not in terms and hasattr(model, a)})
        out += [f"(constant-{slug(key)})=", f"### Model `{key}`", "", f"Source: {_table_cell(model.source)}.", "",
                "| Quantity | Value |", "|---|---|"]
        notes = {"flops_per_token": " (exact convention: 2 x matmul parameters)"}
        out += [f"| `{term}`{notes.get(term, '')} | {_value(value)} |" for term, value in terms.items()]
        out.append(f"| parameters (2P FLOPs per token: 2 x this) | {_value(model.parameters)} |")
        out.append("")
    return out


# --------------------------------------------------------------------------- build time


def pages_for_tests(root: Path = ROOT) -> dict[str, str]:
    """File name -> text of the generated test pages (one per test file, and an index)."""
    by_file: dict[str, list[FoundTest]] = {}
    for test in collect_tests(root):
        by_file.setdefault(test.path, []).append(test)
    pages = {}
    index = ["# Tests", "", "Every test function, one page per file, each with its claim and its source.", "",
             "```{toctree}", ":maxdepth: 1", ""]
    for path, tests in by_file.items():
        stem = Path(path).stem
        index.append(stem)
        lines = [f"# `{path}`", ""]
        for test in tests:
            lines += [
                f"({test.label})=",
                f"## `{test.qualname}`",
                "",
                markdown_text(test.summary) or "(no docstring)",
                "",
                f"```{{literalinclude}} ../../../{path}",
                f":pyobject: {test.qualname}",
                ":language: python",
                "```",
                "",
            ]
        pages[f"{stem}.md"] = "\n".join(lines)
    index.append("```")
    pages["index.md"] = "\n".join(index) + "\n"
    return pages


def proofs_page(names: list[str]) -> str:
    """The page of every proof's output (docs/_generated/proofs/index.md); the outputs are written beside it."""
    lines = [
        "# Proofs",
        "",
        "Every proof the package ships, with its claim and its full output as",
        "`roofline prove <name> --verbose` prints it, run when these docs were built.",
        "[The lesson page](../../lesson.md) walks through the lesson's claims with the same outputs.",
        "",
    ]
    for name in names:
        doc = (importlib.import_module(f"roofline.proofs.{name}").__doc__ or "").strip().splitlines()
        lines += [
            f"(output-{slug(name)})=",
            f"## `{name}`",
            "",
            markdown_text(doc[0]) if doc else "",
            "",
            f"Claim, assumptions and sources: {{py:mod}}`roofline.proofs.{name}`; script `proofs/{name}.py`.",
            "",
            f"```{{literalinclude}} {name}.txt",
            ":language: text",
            "```",
            "",
        ]
    return "\n".join(lines)


def _write_if_changed(path: Path, text: str) -> None:
    """Write ``text`` unless the file already holds it (keeps Sphinx's incremental builds incremental)."""
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def build_time_pages(app: Any) -> None:
    """Sphinx ``builder-inited`` hook: write docs/_generated/ and warn if derivations.md is stale.

    Nothing is written with ``-D roofline_build_time_pages=0`` (the quick build of
    tests/test_docs.py, whose source folder holds the derivations page only: running every
    proof takes about a minute).
    """
    from sphinx.util import logging

    from roofline import cli, proofs

    if not app.config.roofline_build_time_pages:
        return
    logger = logging.getLogger("roofline.docs")
    for name, text in pages_for_tests().items():
        _write_if_changed(GENERATED / "tests" / name, text)
    verdicts = proofs.run_proofs(jobs=os.cpu_count() or 1)  # independent: one process per core
    for verdict in verdicts:
        _write_if_changed(GENERATED / "proofs" / f"{verdict.name}.txt", verdict.output.rstrip() + "\n" + verdict.line())
        if not verdict.passed:
            logger.warning("proof %s fails: %s", verdict.name, "; ".join(verdict.failures))
    _write_if_changed(GENERATED / "proofs" / "index.md", proofs_page([v.name for v in verdicts]))
    charts = GENERATED / "charts"
    with contextlib.redirect_stdout(io.StringIO()):
        status = cli.main(["plot", "--out", str(charts), "--format", "svg", "--flops", "2p"])
    if status != 0:
        logger.warning("roofline plot exited with status %d", status)
    if DERIVATIONS.read_text(encoding="utf-8") != derivations_page():
        logger.warning("docs/derivations.md is stale: run `%s`", REGENERATE)


def refuse_latex_math(app: Any, doctree: Any, docname: str) -> None:
    """Sphinx ``doctree-resolved`` hook: warn about LaTeX math (``{math}``, ``:math:``, ``$...$``).

    The docs load no MathJax (it would come from a network, and offline the page would show raw
    LaTeX); a formula is written as MathML instead (:func:`mathml`), which browsers render
    natively. Under ``-W`` the warning fails the build.
    """
    from docutils import nodes
    from sphinx.util import logging

    logger = logging.getLogger("roofline.docs")
    for node in list(doctree.findall(lambda n: isinstance(n, nodes.math | nodes.math_block))):
        logger.warning("LaTeX math %r would need MathJax from a network: write it as MathML (docs/_generate.py, "
                       "mathml)", node.astext()[:60], location=node)
        # Shown as code, so that the build goes on to report every case (no math renderer is loaded).
        node.replace_self(nodes.literal(node.astext(), node.astext()))


def source_role(name: str, rawtext: str, text: str, lineno: int, inliner: Any, options: Any = None,
                content: Any = None) -> tuple[list[Any], list[Any]]:
    """``{source}`module.object``` or ``{source}`module```: a link to the module's highlighted source (viewcode)."""
    from docutils import nodes

    target = text.strip()
    module_name, _, anchor = target, "", ""
    while True:
        try:
            importlib.import_module(module_name)
            break
        except ImportError:
            if "." not in module_name:
                msg = inliner.reporter.error(f"source: no module in {target!r}", line=lineno)
                return [inliner.problematic(rawtext, rawtext, msg)], [msg]
            module_name, _, last = module_name.rpartition(".")
            anchor = f"{last}.{anchor}" if anchor else last
    env = inliner.document.settings.env
    depth = env.docname.count("/")
    uri = "../" * depth + "_modules/" + module_name.replace(".", "/") + ".html" + (f"#{anchor}" if anchor else "")
    # Not viewcode's class "viewcode-link": Sphinx's basic.css floats that right, which took the
    # word out of its sentence (a reader saw "(; script" and "() ()").
    return [nodes.reference(rawtext, "source", refuri=uri, classes=["source-link"])], []


def find_source(app: Any, modname: str) -> tuple[str, dict[str, tuple[str, int, int]]] | None:
    """Sphinx ``viewcode-find-source`` hook: viewcode's tags plus module-level expressions.

    viewcode anchors functions and classes only. The symbolic forms are module-level
    assignments (``step_time = sp.Max(...) + t0``) or, where they are derived on first use,
    entries of a dict returned by a deriving function; both get an anchor here, so that a
    ``py:data`` entry such as ``roofline.symbolic.kv_cache.kv_budget`` links to its line.
    Viewcode asks once per documented object (about a thousand times a build): each module is read once.
    """
    return _source_and_tags(modname)


@functools.cache
def _source_and_tags(modname: str) -> tuple[str, dict[str, tuple[str, int, int]]] | None:
    """:func:`find_source` of one module, made once per process (the sources do not change during a build)."""
    from sphinx.pycode import ModuleAnalyzer

    try:
        analyzer = ModuleAnalyzer.for_module(modname)
        analyzer.find_tags()
        public = set(getattr(importlib.import_module(modname), "__all__", ()))
    except Exception:  # noqa: BLE001 - viewcode's own rule: no source, no page
        return None
    tags = dict(analyzer.tags)
    tree = ast.parse(analyzer.code)
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for name in (n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)):
                tags.setdefault(name, ("other", node.lineno, node.end_lineno or node.lineno))
        elif isinstance(node, ast.FunctionDef):
            for key in (k for d in ast.walk(node) if isinstance(d, ast.Dict) for k in d.keys):
                if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value in public:
                    tags.setdefault(key.value, ("other", node.lineno, node.end_lineno or node.lineno))
    return analyzer.code, tags


def follow_imported(app: Any, modname: str | None, fullname: str | None) -> str | None:
    """Sphinx ``viewcode-follow-imported`` hook: a module-level value (a SymPy expression) stays in its module.

    viewcode looks for an object's source in ``obj.__module__``; for a SymPy expression that
    is SymPy's own module, not the module that derives it.
    """
    import inspect

    if not modname or not fullname:
        return None
    try:
        obj: Any = importlib.import_module(modname)
        for part in fullname.split("."):
            obj = getattr(obj, part)
    except Exception:  # noqa: BLE001 - fall back to viewcode's own rule
        return None
    return None if inspect.isroutine(obj) or inspect.isclass(obj) or inspect.ismodule(obj) else modname


def check_source_links(app: Any, exception: Exception | None) -> None:
    """Sphinx ``build-finished`` hook: warn about a link to a missing source page or anchor."""
    from sphinx.util import logging

    if exception is not None or app.builder.format != "html":
        return
    logger = logging.getLogger("roofline.docs")
    outdir = Path(app.outdir)
    anchors: dict[Path, set[str]] = {}
    for page in outdir.rglob("*.html"):
        if "_modules" in page.relative_to(outdir).parts:
            continue
        for href in sorted(set(re.findall(r'href="([^"#]*_modules/[^"]*)"', page.read_text(encoding="utf-8")))):
            path, _, anchor = href.partition("#")
            target = (page.parent / path).resolve()
            if not target.exists():
                logger.warning("%s links to a missing source page %s", page.relative_to(outdir), path)
                continue
            if target not in anchors:
                anchors[target] = set(re.findall(r'id="([^"]+)"', target.read_text(encoding="utf-8")))
            if anchor and anchor not in anchors[target]:
                logger.warning("%s links to %s, which has no anchor %r", page.relative_to(outdir), path, anchor)


def main(argv: list[str] | None = None) -> int:
    """Rewrite docs/derivations.md, or with --check report whether it is stale (exit 1)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/derivations.md is stale; write nothing")
    args = parser.parse_args(argv)
    text = derivations_page()
    if args.check:
        if DERIVATIONS.read_text(encoding="utf-8") != text:
            print(f"docs/derivations.md is stale: run `{REGENERATE}`", file=sys.stderr)
            return 1
        return 0
    _write_if_changed(DERIVATIONS, text)
    print(DERIVATIONS.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # run as a script from a checkout: document the checkout's package
    sys.exit(main())
