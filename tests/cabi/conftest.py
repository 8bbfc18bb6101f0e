# SPDX-License-Identifier: Apache-2.0
"""The C ABI tests' fixture: the library, built once per session (helpers: tests/helpers.py)."""

from __future__ import annotations

import pytest
import helpers


@pytest.fixture(scope="session")
def cabi(tmp_path_factory):
    if helpers.c_compiler() is None:
        pytest.skip("no C compiler")
    return helpers.build_once(tmp_path_factory.getbasetemp() / "cabi")
