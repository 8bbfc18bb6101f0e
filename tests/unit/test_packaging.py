# SPDX-License-Identifier: Apache-2.0
"""One version everywhere, and metadata a packager can trust (the wheel itself: .ci/check_wheel)."""

from __future__ import annotations

import importlib.metadata
import re
import sys

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
