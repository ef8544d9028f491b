"""The docs: the generated derivations page is current and the hand-written pages cover what they must.

The derivations page is generated from ``roofline.formulas.REGISTRY`` by ``docs/_generate.py``;
rewrite it with ``python docs/_generate.py``. The site itself is built in CI with
``python -m sphinx -W --keep-going -b html docs docs/_build/html``; the tests here build the
derivations page alone (with docs/conf.py, without the build-time pages: running every proof
takes a minute) and read its HTML as a browser gets it. They skip where Sphinx is not installed
(``pip install -e '.[docs]'``).
"""

from __future__ import annotations

import html.parser
import importlib.util
import pkgutil
import re
import shutil
import sys
import warnings
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


def test_every_registered_formula_has_an_entry_with_its_mathml_form(page):
    """Each registry entry has its own section whose MathML writes every free symbol under its argument name."""
    sections = re.split(r"\n\(formula-", page)
    by_name = {}
    for section in sections[1:]:
        name = re.search(r"^### `(\w+)`$", section, re.M)
        assert name is not None
        by_name[name.group(1)] = section
    assert sorted(by_name) == sorted(REGISTRY)
    for name, spec in REGISTRY.items():
        math = re.search(r"```\{raw\} html\n(<div class=\"math-display\"><math display=\"block\".+?</math></div>)\n```",
                         by_name[name], re.S)
        assert math is not None, name
        symbols = {s.name for s in spec.symbolic().free_symbols}
        assert symbols <= set(spec.domains), name
        for symbol in symbols:
            assert f"<mi>{symbol}</mi>" in math.group(1), (name, symbol)
        assert "{math}" not in by_name[name] and "piecewise" not in math.group(1).lower(), name
        assert f"{{py:func}}`{spec.fast.__module__}.{name}`" in by_name[name]
        assert f"proofs/{spec.proof}" in by_name[name]


def test_mathml_keeps_names_whole_and_writes_cases_as_a_table(generator):
    """mathml: length_sum is one identifier (not length with subscript sum), a Piecewise is a brace of cases."""
    import sympy as sp

    x, length_sum = sp.symbols("x length_sum", positive=True)
    out = generator.mathml(sp.Piecewise((length_sum / x, x > 1), (0, True)))
    assert out.startswith('<div class="math-display"><math display="block" alttext="')
    assert "<mi>length_sum</mi>" in out and "<msub>" not in out
    assert "<mtable" in out and out.count("<mtr>") == 2 and "otherwise" in out and "piecewise" not in out
    assert 'alttext="\\begin{cases} \\frac{\\mathit{length\\_sum}}{\\mathit{x}}' in out
    assert "<mo>&#xB7;</mo>" in generator.mathml(x * length_sum)  # a product of names: a visible dot


def test_derivations_page_opens_with_a_formula_and_has_no_empty_header(page):
    """The first formula comes before the registry-wide test list (now at the end); no table has an empty header."""
    assert page.index("(formula-") < page.index("(registry-wide-tests)=")
    assert page.rstrip().splitlines()[-1].startswith("- {ref}`tests/")  # the list closes the page
    assert "| | |" not in page


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


# --------------------------------------------------------------------------- the built page


class _TextOutsideMath(html.parser.HTMLParser):
    """The text a reader sees outside <math> (and outside <script> and <style>, which are not shown)."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in ("math", "script", "style"):
            self.depth += 1

    def handle_endtag(self, tag):
        if tag in ("math", "script", "style"):
            self.depth -= 1

    def handle_data(self, data):
        if self.depth == 0:
            self.text.append(data)


_LATEX_IN_TEXT = re.compile(r"\$\$|\\\(|\\\[|\\(frac|mathit|left|right|begin|sum|max)\b")
_EXTERNAL = re.compile(r"<(script|link|img|iframe)\b[^>]*\b(src|href)\s*=\s*[\"']?(https?:)?//", re.I)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """derivations.md (as committed: test_derivations_page_is_current checks it is current) and a page of
    LaTeX math, built in-process with docs/conf.py: (html by page, warnings)."""
    pytest.importorskip("sphinx", reason="the docs build needs Sphinx: pip install -e '.[docs]'")
    pytest.importorskip("myst_parser", reason="the docs build needs myst-parser: pip install -e '.[docs]'")
    from sphinx.cmd.build import build_main

    src = tmp_path_factory.mktemp("docs-src")
    out = tmp_path_factory.mktemp("docs-html")
    shutil.copy(DOCS / "derivations.md", src / "derivations.md")
    (src / "latex.md").write_text("# LaTeX\n\n```{math}\n\\frac{a}{b}\n```\n\nInline {math}`x^2`.\n", encoding="utf-8")
    log = src / "warnings.txt"
    with warnings.catch_warnings():
        # Sphinx's and myst-parser's deprecations of each other's APIs are theirs, not the package's.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        status = build_main(["-q", "-b", "html", "-c", str(DOCS), "-D", "roofline_build_time_pages=0",
                             "-D", "root_doc=derivations", "-w", str(log), str(src), str(out)])
    assert status == 0  # unresolved links to the other pages are warnings; what follows checks the rest
    pages = {name: (out / f"{name}.html").read_text(encoding="utf-8") for name in ("derivations", "latex")}
    return pages, log.read_text(encoding="utf-8"), out


def _text(html_text: str) -> str:
    parser = _TextOutsideMath()
    parser.feed(html_text)
    return "".join(parser.text)


def test_built_derivations_page_renders_every_formula_without_a_script(built):
    """The HTML has one <math> per formula, no LaTeX in its text, and loads no script or style from a network."""
    pages, _, _ = built
    body = pages["derivations"]
    assert body.count('<math display="block"') == len(REGISTRY)
    assert _LATEX_IN_TEXT.findall(_text(body)) == []
    assert _EXTERNAL.findall(body) == []
    assert "mathjax" not in body.lower()


def test_built_derivations_page_has_no_stray_fragments(built):
    """Each source link is a word in its sentence (not viewcode's floated class), no header row is empty,
    the first formula precedes the registry-wide test list, and the page loads roofline.css (code wraps)."""
    pages, _, out = built
    body = pages["derivations"]
    assert re.findall(r'<a class="[^"]*viewcode-link[^"]*"[^>]*>source</a>', body) == []
    assert len(re.findall(r'<a class="source-link[^"]*"[^>]*>source</a>', body)) >= 2 * len(REGISTRY)
    assert re.findall(r"<th class=\"head\"><p></p></th>", body) == []
    assert body.index("<math") < body.index('id="registry-wide-tests"')
    text = _text(body)
    assert "(; script" not in text and "() ()" not in text
    assert "(source; script proofs/p05_static_batching.py;" in re.sub(r"\s+", " ", text)
    assert '_static/roofline.css' in body
    css = (out / "_static" / "roofline.css").read_text(encoding="utf-8")
    assert re.search(r"div\.highlight pre \{[^}]*white-space: pre-wrap", css)


def test_latex_math_fails_the_build_by_name(built):
    """A {math} block or role is reported (a warning, an error under -W) and shown as code, not handed to MathJax."""
    pages, warnings, _ = built
    assert warnings.count("would need MathJax from a network") == 2
    assert "latex.md" in warnings
    assert _EXTERNAL.findall(pages["latex"]) == [] and "mathjax" not in pages["latex"].lower()
