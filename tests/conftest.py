"""Shared fixtures: every test session compiles into a private kernel cache.

TEX_CACHE_DIR is set at import time (before any test module can compile) and again by a
session fixture, so no test ever writes to the user's ~/.cache/tex.
"""
import atexit
import os
import shutil
import tempfile

import pytest

_SESSION_CACHE = tempfile.mkdtemp(prefix="tex-test-cache-")
os.environ["TEX_CACHE_DIR"] = _SESSION_CACHE
atexit.register(shutil.rmtree, _SESSION_CACHE, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def tex_cache_dir(tmp_path_factory):
    """The session's kernel cache folder (TEX_CACHE_DIR), under pytest's temp dir."""
    path = tmp_path_factory.mktemp("tex-kernel-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TEX_CACHE_DIR", str(path))
        yield path


# `pytest --hypothesis-profile=thorough` runs the property tests with many more examples
from hypothesis import settings as _settings  # noqa: E402

_settings.register_profile("thorough", max_examples=3000, deadline=None)
