"""The runnable examples in public docstrings (STYLE: checked by doctest)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import gpu_mr

MODULES = sorted(m.name for m in pkgutil.walk_packages(gpu_mr.__path__, "gpu_mr.")
                 if not m.name.startswith("gpu_mr.kernels") and m.name != "gpu_mr.__main__")


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
