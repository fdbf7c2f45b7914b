"""tex.tune: a small search returns a correct schedule that the measurements put at least
level with the auto schedule; the tuning database gives it back in a new process; a
candidate that crashes its worker ends only itself; the seed fixes the candidate list.
Budgets are a few seconds (each candidate compiles in about a second)."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tex
from tex.indices import format_size
from tex.scheduler import tunedb
from tex.scheduler.tuning import class_condition, size_class
from tex.tuner import candidates

PROGRAM = """
import numpy as np, tex
M, N, K = tex.sizes("M N K"); i, j, k = tex.indices("i j k")
A = tex.tensor("A", (M, K), "float32"); B = tex.tensor("B", (K, N), "float32")
C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))
rng = np.random.default_rng(3)
a = rng.standard_normal((65, 63), dtype=np.float32)
b = rng.standard_normal((63, 70), dtype=np.float32)
"""


def _program():
    scope = {}
    exec(PROGRAM, scope)
    return scope["C"], scope["a"], scope["b"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("tune-cache"))


@pytest.fixture(scope="module")
def tuned(cache):
    """One search shared by the tests that read its result: four candidates (about 8 s
    on an idle machine; the budget is not what stops it), the auto schedule first and
    candidate 1 made to crash its worker (os.abort)."""
    saved = {v: os.environ.get(v) for v in ("TEX_CACHE_DIR", "TEX_TUNE_ABORT")}
    os.environ.update(TEX_CACHE_DIR=cache, TEX_TUNE_ABORT="1")
    try:
        C, a, b = _program()
        s = tex.tune(C, A=a, B=b, budget=120, max_candidates=4, progress=False)
    finally:
        for v, old in saved.items():
            if old is None:
                del os.environ[v]
            else:
                os.environ[v] = old
    return C, a, b, s


def test_tune_returns_a_correct_schedule_at_least_as_fast_as_auto(tuned):
    C, a, b, s = tuned
    rep = s.tuning
    assert not rep.from_database
    assert rep.candidates[0][0] is None and rep.candidates[0][1] == "ok"    # auto is #0
    timed = {n: t for n, (_, st, t) in enumerate(rep.candidates) if st == "ok"}
    assert len(timed) >= 2, rep
    times = rep.final or timed                  # the final round decides when it ran
    assert 0 in times and rep.best == min(times, key=times.get)
    assert rep.best_time <= rep.auto_time
    f = tex.compile(s)
    np.testing.assert_allclose(f(A=a, B=b), a @ b, rtol=1e-4, atol=1e-4)
    # other sizes (outside the tuned size class), odd ones, and non-contiguous views
    rng = np.random.default_rng(1)
    for m, k, n in ((1, 7, 1000), (7, 1, 63), (130, 65, 1)):
        x = rng.standard_normal((m, 2 * k), dtype=np.float32)[:, ::2]
        y = rng.standard_normal((k, n), dtype=np.float32)
        np.testing.assert_allclose(f(A=x, B=y), x @ y, rtol=1e-4, atol=1e-4)
    assert str(s) and s.history
    again = tex.schedule(C).replay(s.history)
    assert str(again) == str(s)


def test_the_database_gives_the_result_to_a_new_process(tuned, cache):
    C, a, b, s = tuned
    code = PROGRAM + textwrap.dedent("""
        import json
        f = tex.compile(C)
        np.testing.assert_allclose(f(A=a, B=b), a @ b, rtol=1e-4, atol=1e-4)
        s = tex.tune(C, A=a, B=b, budget=5, progress=False)
        from tex.scheduler.steps import to_json
        print(json.dumps([to_json(f._rebuild[2]), s.history_json(),
                          s.tuning.from_database]))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, TEX_CACHE_DIR=cache))
    assert out.returncode == 0, out.stderr[-2000:]
    compiled, found, from_db = json.loads(out.stdout.strip().splitlines()[-1])
    assert from_db
    assert found == s.history_json()
    assert compiled == s.history_json()      # the tuned plan (or auto's, if auto won)


def test_compile_uses_a_database_entry_only_within_its_size_class(tmp_path, monkeypatch):
    """An entry written by hand (a plan the auto schedule would not choose): compile
    specializes for its size class and stays correct for every other size."""
    monkeypatch.setenv("TEX_CACHE_DIR", str(tmp_path))
    C, a, b = _program()
    program = tex.Program(C)
    cls = size_class({"M": 65, "K": 63, "N": 70})
    plan = {"family": "dots", "rows": 16}
    tunedb.save(str(tmp_path), program, True, True, cls, {"stage": "C", "plan": plan},
                threads=tex.get_num_threads())
    f = tex.compile(C)
    cond = format_size(class_condition(program, cls))   # as print(s) shows it
    assert f._rebuild[2][1].condition == cond              # the first specialization
    for x, y in ((a, b), (a[:3, :5], b[:5, :2]), (np.ones((1, 200), np.float32),
                                                    np.ones((200, 9), np.float32))):
        np.testing.assert_allclose(f(A=x, B=y), x @ y, rtol=1e-4, atol=1e-4)
    threads = tex.get_num_threads()
    assert tunedb.tuned_schedule(str(tmp_path), program, threads=threads) is not None
    # another thread count's entries are not this one's, nor another CPU's
    assert tunedb.tuned_schedule(str(tmp_path), program, threads=threads + 1) is None
    before = threads
    try:
        tex.set_num_threads(threads + 1)
        steps = tex.compile(C)._rebuild[2]                  # the auto schedule's steps
        assert all(getattr(st, "condition", None) != cond for st in steps)
    finally:
        tex.set_num_threads(before)
    monkeypatch.setattr(tunedb, "cpu_key", lambda machine=None: "other-cpu")
    assert tunedb.tuned_schedule(str(tmp_path), program, threads=threads) is None


def test_a_crashing_candidate_ends_only_itself(tuned):
    C, a, b, s = tuned
    statuses = [st for _, st, _ in s.tuning.candidates]
    assert statuses[1] == "crashed", s.tuning.candidates
    assert statuses[2:] == ["ok", "ok"], statuses            # the search went on


def test_same_seed_same_candidates():
    C, _, _ = _program()
    sizes = {"M": 65, "K": 63, "N": 70}
    stage, first = candidates(C, sizes, seed=0, threads=2)
    assert stage == "C" and first[0] is None and len(first) > 10
    assert candidates(C, sizes, seed=0, threads=2) == (stage, first)
    assert candidates(C, sizes, seed=1, threads=2)[1] != first
    families = {p["family"] for p in first[1:]}
    assert {"blocked", "dots", "generic"} <= families


def test_size_classes_are_power_of_two_buckets():
    assert size_class({"N": 70, "M": 1, "K": 64}) == (("K", 64, 128), ("M", 1, 2),
                                                     ("N", 64, 128))
    assert size_class({"M": 0}) == (("M", 0, 1),)


def test_the_progress_bar_is_text_in_a_kernel_without_widgets(monkeypatch):
    """In a notebook kernel without ipywidgets, tqdm.auto warned 'IProgress not found'
    before falling back to text: tex.tune picks the text bar there itself, the widget
    where ipywidgets is installed."""
    import importlib.util
    import sys
    from tqdm.notebook import tqdm as widget_bar
    from tqdm.std import tqdm as text_bar
    from tex import tuner
    real, widgets = importlib.util.find_spec, []
    monkeypatch.setitem(sys.modules, "ipykernel", sys.modules.get("ipykernel") or sys)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: (
        (widgets or None) and real("tqdm") if name == "ipywidgets" else real(name, *a)))
    assert tuner._bar_class() is text_bar
    widgets.append(True)
    assert tuner._bar_class() is widget_bar


def test_bad_budgets_sizes_and_shapes_are_refused_before_any_worker_starts():
    C, a, b = _program()
    for budget in (0, -1, float("nan"), float("inf"), "10", True):
        with pytest.raises(ValueError, match="budget must be a positive number"):
            tex.tune(C, A=a, B=b, budget=budget)
    with pytest.raises(tex.ShapeError, match="tensor B, dimension 0: expected K = 63, got 5"):
        tex.tune(C, A=a, B=b[:5], budget=1)
    with pytest.raises(tex.ShapeError, match="tensor A has rank 2"):
        tex.tune(C, A=a[0], B=b, budget=1)
    with pytest.raises(ValueError, match="size M is 0"):
        tex.tune(C, A=a[:0], B=b, budget=1)


def test_a_short_tuning_does_not_stand_in_for_a_longer_one(tmp_path, monkeypatch):
    monkeypatch.setenv("TEX_CACHE_DIR", str(tmp_path))
    C, a, b = _program()
    first = tex.tune(C, A=a, B=b, budget=0.5, progress=False, max_candidates=2)
    assert not first.tuning.from_database
    again = tex.tune(C, A=a, B=b, budget=0.5, progress=False)
    assert again.tuning.from_database and "from the tuning database" in str(again.tuning)
    longer = tex.tune(C, A=a, B=b, budget=4, progress=False, max_candidates=3)
    assert not longer.tuning.from_database          # searched again
