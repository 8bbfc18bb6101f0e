# SPDX-License-Identifier: Apache-2.0
"""One version everywhere, and metadata a packager can trust (the wheel itself: .ci/check_wheel)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import subprocess
import sys

import helpers
import pytest
from helpers import TESTS

import redist

ROOT = TESTS.parent


def test_one_version_source():
    """pyproject.toml takes its version from redist.__version__; CHANGELOG.md and CITATION.cff agree."""
    if sys.version_info >= (3, 11):
        import tomllib

        project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        assert "version" not in project and "version" in project["dynamic"]
    assert importlib.metadata.version("redist") == redist.__version__
    changelog = re.search(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert changelog and changelog.group(1) == redist.__version__
    citation = re.search(r"^version: (\S+)$", (ROOT / "CITATION.cff").read_text(), re.MULTILINE)
    assert citation and citation.group(1) == redist.__version__


def test_metadata_for_an_index_page():
    meta = importlib.metadata.metadata("redist")
    classifiers = meta.get_all("Classifier") or []
    assert "Typing :: Typed" in classifiers and any(c.startswith("Development Status") for c in classifiers)
    assert meta["Author"] or meta["Author-email"]
    assert meta["License-Expression"] == "Apache-2.0"
    extras = set(meta.get_all("Provides-Extra") or [])
    assert {"mpich", "cuda", "test", "docs", "dev"} <= extras
    test_requires = [r for r in meta.get_all("Requires-Dist") or [] if 'extra == "test"' in r]
    assert test_requires and not any(r.startswith("torch") for r in test_requires), test_requires


@pytest.mark.parametrize("name", ["_testing", "checks"])
def test_test_helpers_are_not_in_the_package(name):
    """The C ABI's test checks and helpers live in tests/ (the sdist), not in the installed package."""
    from redist.cabi._build import HERE

    assert not (HERE / name).exists() and not (HERE / f"{name}.py").exists()


#: where each import package's files live in the clone (pyproject.toml's package-dir)
PACKAGE_DIRS = {"redist": "pybind", "redist.engine": "engine", "redist.cabi": "cabi"}


def test_the_install_sees_every_module():
    """Every module file of the clone is importable. The Quickstart's editable_mode=strict install
    links each file it found when it ran: a new module file needs the install line again (and a new
    subpackage a line in pyproject.toml's packages, or the wheel leaves it out)."""
    missing = []
    for package, folder in PACKAGE_DIRS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            name = ".".join((package, *parts[:-1]) + (() if parts[-1] == "__init__" else (parts[-1],)))
            if importlib.util.find_spec(name) is None:
                missing.append(f"{path.relative_to(ROOT)} ({name})")
    assert not missing, (
        f"the installed redist lacks {missing}: run the install line again "
        '(pip install -e ".[mpich,test]" --config-settings editable_mode=strict), and list a new subpackage '
        "in pyproject.toml's packages"
    )


def test_a_script_beside_the_clone_imports_redist(tmp_path):
    """Issue #48: a clone at x/redist and a script at x/myscript.py. With the default editable install
    the clone directory is imported as an empty namespace package (ImportError: cannot import name
    'Slab' from 'redist' (unknown location)); the Quickstart's editable_mode=strict install, and a
    wheel, are regular packages that win."""
    (tmp_path / "redist").mkdir()  # what the clone is, seen from the directory that holds it
    script = tmp_path / "myscript.py"
    script.write_text("import redist\nfrom redist import Slab\nprint(redist.__file__, Slab.X)\n")
    res = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=helpers.clean_env(),
    )
    assert res.returncode == 0, (
        f"{res.stderr[-2000:]}\nthis environment's redist is not importable from beside a clone: install it as "
        'the README\'s Quickstart does (pip install -e ".[mpich,test]" --config-settings editable_mode=strict)'
    )
