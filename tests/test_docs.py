"""The docs: the generated derivations page is current and the hand-written pages cover what they must.

The derivations page is generated from ``roofline.formulas.REGISTRY`` by ``docs/_generate.py``;
rewrite it with ``python docs/_generate.py``. The site itself is built in CI with
``python -m sphinx -W --keep-going -b html docs docs/_build/html``.
"""

from __future__ import annotations

import importlib.util
import pkgutil
import re
import sys
from pathlib import Path

import pytest

import roofline
from roofline.formulas import REGISTRY
from roofline.proofs import proof_names

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _load_generator():
    spec = importlib.util.spec_from_file_location("roofline_docs_generate", DOCS / "_generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generator():
    return _load_generator()


@pytest.fixture(scope="module")
def page(generator) -> str:
    return generator.derivations_page()


def test_derivations_page_is_current(page):
    """docs/derivations.md equals what docs/_generate.py writes now (else: run the command it names)."""
    committed = (DOCS / "derivations.md").read_text(encoding="utf-8")
    assert committed == page, "docs/derivations.md is stale: run `python docs/_generate.py` and commit the result"


def test_every_registered_formula_has_an_entry_with_its_latex_form(page):
    """Each registry entry has its own section whose LaTeX writes every free symbol under its argument name."""
    sections = re.split(r"\n\(formula-", page)
    by_name = {}
    for section in sections[1:]:
        name = re.search(r"^### `(\w+)`$", section, re.M)
        assert name is not None
        by_name[name.group(1)] = section
    assert sorted(by_name) == sorted(REGISTRY)
    for name, spec in REGISTRY.items():
        math = re.search(r"```\{math\}\n(.+?)\n```", by_name[name], re.S)
        assert math is not None, name
        symbols = {s.name for s in spec.symbolic().free_symbols}
        assert symbols <= set(spec.domains), name
        for symbol in symbols:
            assert r"\mathit{" + symbol.replace("_", r"\_") + "}" in math.group(1), (name, symbol)
        assert f"{{py:func}}`{spec.fast.__module__}.{name}`" in by_name[name]
        assert f"proofs/{spec.proof}" in by_name[name]


def test_test_finder_counts_calls_attributes_and_strings_not_keywords(generator):
    """A test names a formula by calling it, through an attribute or as a string; a keyword of that name is not one."""
    pattern = generator.mentions("foo_bar")
    assert pattern.search("x = foo_bar(a=1)")
    assert pattern.search("f.foo_bar(**kw)")
    assert pattern.search('REGISTRY["foo_bar"]')
    assert not pattern.search("other(foo_bar=1)")
    assert not pattern.search("foo_bar_baz(1)")


def test_test_finder_reads_functions_methods_and_decorators(generator, tmp_path):
    """collect_tests finds test functions and Test-class methods with their decorators and docstrings."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        'import pytest\n\n\n@pytest.mark.parametrize("n", ["foo_bar"])\ndef test_a(n):\n    """Claim A."""\n\n\n'
        "class TestB:\n    def test_c(self):\n        pass\n\n\ndef helper():\n    pass\n",
        encoding="utf-8",
    )
    found = generator.collect_tests(tmp_path)
    assert [(t.nodeid, t.summary) for t in found] == [("tests/test_x.py::test_a", "Claim A."),
                                                      ("tests/test_x.py::TestB::test_c", "")]
    assert generator.mentions("foo_bar").search(found[0].source)


def test_api_page_lists_every_public_module():
    """docs/api.rst has one automodule line for every public module of the package (not the CLI's)."""
    listed = set(re.findall(r"^\.\. automodule:: (\S+)$", (DOCS / "api.rst").read_text(encoding="utf-8"), re.M))
    internal = ("roofline.__main__", "roofline.cli", "roofline.commands", "roofline.data")
    public = {"roofline"}
    for module in pkgutil.walk_packages(roofline.__path__, "roofline."):
        parts = module.name.split(".")
        if module.name.startswith(internal) or any(p.startswith("_") for p in parts[1:-1]):
            continue
        if parts[-1].startswith("_") and module.name not in listed:
            continue  # a private module is listed where it holds public names (formulas._core), not required
        public.add(module.name)
    assert sorted(public - listed) == []
    assert sorted(listed - public) == []


def test_lesson_page_includes_only_proofs_that_exist_each_under_its_label(generator):
    """Each proof output docs/lesson.md includes is a shipped proof, in a section labelled proof-<name>."""
    text = (DOCS / "lesson.md").read_text(encoding="utf-8")
    included = generator.lesson_proofs()
    assert len(included) >= 8  # the lesson's claims: p01 to p08 when this test was written
    assert sorted(included - set(proof_names())) == []
    for name in included:
        assert f"(proof-{generator.slug(name)})=" in text, name
