# SPDX-License-Identifier: Apache-2.0
"""The code in README.md and docs/*.md runs as written: every Python, C and Fortran block is a whole
program, run here under mpiexec on 3 ranks (C and Fortran compiled against the C ABI first; they
print ``rank R/N: OK`` on every rank), or
is marked as a fragment on the line before its fence::

    <!-- fragment: why it cannot run alone -->

A block that needs a GPU says so there, ``<!-- needs: gpu -->``: it runs on one rank where a GPU
is visible (the lent GPU machines) and skips elsewhere; one that needs an optional extra says
which, ``<!-- needs: torch -->`` (or ``jax``, or several: ``<!-- needs: gpu, torch -->``), and
skips where it is not installed (the Open MPI leg of .ci/run installs none). Shell blocks (commands) and text blocks (output) are not run. The README is also what PyPI shows,
away from the repository: it must have no relative links.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import helpers
from helpers import TESTS

ROOT = TESTS.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = {"python": ".py", "c": ".c", "fortran": ".f90"}
NPROCS = 3


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    language: str
    code: str
    fragment: str | None  # the reason given, or None for a runnable block
    needs: frozenset[str] = frozenset()  # "gpu" (runs only where a GPU is visible), optional modules

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of ``page`` in a language that could run."""
    out, lines = [], page.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^(```+)\s*(\S*)", lines[i])
        if not m:
            i += 1
            continue
        fence, language = m.group(1), m.group(2).lower()
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith(fence))
        if language in LANGUAGES:
            before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            marked = re.match(r"^<!--\s*fragment\b:?\s*(.*?)\s*-->$", before.strip())
            needs = re.match(
                r"^<!--\s*needs:\s*((?:gpu|torch|jax)(?:\s*,\s*(?:gpu|torch|jax))*)\s*-->$", before.strip()
            )
            out.append(
                Block(
                    page,
                    i + 1,
                    language,
                    "\n".join(lines[i + 1 : end]) + "\n",
                    (marked.group(1) or "fragment") if marked else None,
                    frozenset(re.split(r"\s*,\s*", needs.group(1))) if needs else frozenset(),
                )
            )
        i = end + 1
    return out


ALL = [b for page in PAGES for b in blocks(page)]
RUNNABLE = [b for b in ALL if b.fragment is None]


def test_the_pages_have_runnable_blocks():
    """The scan sees the README's program and the C and Fortran pages' (a broken scan would pass
    every test below vacuously)."""
    readme = {b.language for b in RUNNABLE if b.page.name == "README.md"}
    assert readme == {"python"}, readme
    compiled = {b.language for b in RUNNABLE if b.page.name == "c-fortran.md"}
    assert compiled == {"c", "fortran"}, compiled
    assert {b.language for b in RUNNABLE} == set(LANGUAGES)
    assert all(b.fragment for b in ALL if b not in RUNNABLE)


def test_blocks_name_the_extras_they_import():
    """A runnable block that imports torch or JAX is marked ``needs:`` (else the legs without the
    extras, such as .ci/run's Open MPI one, fail on the import rather than skip)."""
    unmarked = [
        (b.id, module)
        for b in RUNNABLE
        for module in ("torch", "jax")
        if module not in b.needs and re.search(rf"^\s*(?:import|from)\s+[\w., ]*\b{module}\b", b.code, re.M)
    ]
    assert not unmarked, f"blocks importing an optional extra without <!-- needs: ... -->: {unmarked}"


def test_the_readme_stays_an_entry_page():
    """README.md is what a newcomer reads first (issue #48): at most 300 lines, its depth in docs/;
    it names every docs page it links to, and those pages exist."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300, f"README.md has {len(text.splitlines())} lines (at most 300)"
    named = set(re.findall(r"`docs/([\w-]+\.md)`", text))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert named and named <= pages, sorted(named - pages)
    toctree = (ROOT / "docs" / "index.md").read_text()
    assert all(re.search(rf"^{p[:-3]}$", toctree, re.M) for p in pages - {"index.md"}), (
        "a page not in the toctree"
    )


def test_readme_has_no_relative_links():
    text = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r"""(?:href|src)=["']([^"']+)""", text)
    relative = [link for link in links if not re.match(r"^(https?://|mailto:|#)", link)]
    assert not relative, f"README.md links that break on an index page (PyPI): {relative}"


@pytest.fixture(scope="module")
def cabi(tmp_path_factory):
    if helpers.c_compiler() is None:
        pytest.skip("no C compiler")
    return helpers.build_once(tmp_path_factory.getbasetemp() / "cabi")


@pytest.mark.docs
@pytest.mark.mpi
@pytest.mark.parametrize("block", [b for b in RUNNABLE if b.language == "python"], ids=lambda b: b.id)
def test_python_block_runs(block, tmp_path):
    if "gpu" in block.needs and helpers.gpu_count() == 0:
        pytest.skip("needs a GPU")
    for module in sorted(block.needs - {"gpu"}):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"needs {module} (an optional extra), not installed")
    nprocs = 1 if "gpu" in block.needs else NPROCS
    script = tmp_path / "block.py"
    script.write_text(block.code)
    res = helpers.mpi(nprocs, sys.executable, script, timeout=180)
    assert res.returncode == 0, f"{block.id} under mpiexec -n {nprocs}:\n{res.stdout[-4000:]}"


@pytest.mark.docs
@pytest.mark.mpi
@pytest.mark.cabi
@pytest.mark.parametrize("block", [b for b in RUNNABLE if b.language in ("c", "fortran")], ids=lambda b: b.id)
def test_compiled_block_runs(block, tmp_path, cabi):
    src = tmp_path / f"app{LANGUAGES[block.language]}"
    src.write_text(block.code)
    if block.language == "c":
        exe = helpers.compile_c(src, tmp_path / "app", cabi)
    else:
        if helpers.fortran_compiler() is None or not cabi.fortran:
            pytest.skip("no Fortran compiler")
        exe = helpers.compile_fortran(src, tmp_path / "app", cabi)
    res = helpers.mpi(NPROCS, exe, timeout=120)
    assert res.returncode == 0, f"{block.id} under mpiexec -n {NPROCS}:\n{res.stdout[-4000:]}"
    ok = {int(m.group(1)) for m in re.finditer(rf"rank (\d+)/{NPROCS}: OK", res.stdout)}
    assert ok == set(range(NPROCS)), f"{block.id}: not every rank said OK:\n{res.stdout[-4000:]}"
