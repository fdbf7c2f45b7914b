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
    """The session's kernel cache folder (TEX_CACHE_DIR), under pytest's temp dir. Under
    pytest-xdist the workers share one (in the run's temp root, next to their own temp
    dirs): a kernel one worker compiled is a disk hit for the other; tex writes cache
    entries atomically, so concurrent writers are safe."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        path = tmp_path_factory.getbasetemp().parent / "tex-kernel-cache"
        path.mkdir(exist_ok=True)
    else:
        path = tmp_path_factory.mktemp("tex-kernel-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TEX_CACHE_DIR", str(path))
        yield path


# `pytest --hypothesis-profile=thorough` runs the property tests with many more examples
from hypothesis import settings as _settings  # noqa: E402

_settings.register_profile("thorough", max_examples=3000, deadline=None)


# ---------------------------------------------------------------- golden files
# Printed loop nests (and the LLVM IR of a few kernels) are compared with the files in
# tests/golden/; `pytest --update-golden` rewrites them (review the diff: a change of a
# golden is a change of what tex generates). Goldens are made for fixed targets
# (tex.scheduler.target.overriding), so they do not depend on the machine.
GOLDEN_DIR = os.path.join(os.path.dirname(__file__), "golden")


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite the golden files in tests/golden/ from this run")


@pytest.fixture
def golden(request):
    """golden(name, text): text must equal tests/golden/<name>.txt."""
    update = request.config.getoption("--update-golden")

    def check(name, text):
        path = os.path.join(GOLDEN_DIR, name + ".txt")
        text = text.rstrip("\n") + "\n"
        if update:
            os.makedirs(GOLDEN_DIR, exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
            return
        if not os.path.exists(path):
            pytest.fail(f"no golden file {path}: run pytest --update-golden and review it")
        with open(path) as f:
            want = f.read()
        assert text == want, f"{name} differs from {path} (pytest --update-golden rewrites it)"
    return check
