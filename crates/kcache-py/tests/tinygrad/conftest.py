"""Fixtures of the tinygrad tests: tinygrad (PyPI, pinned in crates/kcache-py/requirements.txt)
on its CPU device with its C renderer and clang, run in child processes (each with its own
tinygrad state, compile cache database and environment), with and without kcache.

`cargo xtask test` sets TINYGRAD_TEST_DIR to the unpacked source distribution's `test/`
(which holds `test_tiny.py`). A missing tinygrad, clang or TINYGRAD_TEST_DIR fails these
tests loudly, never skips them.
"""

import os
import pathlib

import pytest

from tinygrad_support import Runner, require_tinygrad


@pytest.fixture
def runner(tmp_path) -> Runner:
    require_tinygrad()
    return Runner(tmp_path)


@pytest.fixture(scope="session")
def tinygrad_test_dir() -> pathlib.Path:
    """The `test/` directory of tinygrad's source distribution (holds test_tiny.py)."""
    d = os.environ.get("TINYGRAD_TEST_DIR")
    if not d or not (pathlib.Path(d) / "test_tiny.py").is_file():
        pytest.fail("TINYGRAD_TEST_DIR must name tinygrad 0.14.0's sdist test/ directory "
                    "(cargo xtask test unpacks it into target/tinygrad-sdist/)")
    return pathlib.Path(d)
