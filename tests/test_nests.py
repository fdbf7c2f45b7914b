"""Deferred specializations and nests lowered on demand (schedule/nests.py,
handles.Specialization): a first call schedules, lowers and plans only the nest it runs,
and what it builds is what the eager schedule would have built."""
import pickle

import numpy as np
import pytest

import tex
from tex.errors import ScheduleError
from tex.expr import AutoParts
from tex.scheduler.handles import Deferred
from tex.scheduler.ir import structure_key
from tex.scheduler.printer import format_nest
from tex.scheduler.schedule import Schedule
from tex.scheduler.target import named, overriding


def _matmul(dtype="float32", transposed=False):
    M, N, K = tex.sizes("M N K")
    i, j, k = tex.indices("i j k")
    A = tex.tensor("A", (M, K), dtype)
    B = tex.tensor("B", (N, K) if transposed else (K, N), dtype)
    b = B[j, k] if transposed else B[k, j]
    return tex.compute("C", (i, j), tex.sum(A[i, k] * b, over=k))


def _batched():
    Bt, M, N, K = tex.sizes("Bt M N K")
    b, i, j, k = tex.indices("b i j k")
    A = tex.tensor("A", (Bt, M, K), "float32")
    B = tex.tensor("B", (Bt, K, N), "float32")
    return tex.compute("C", (b, i, j), tex.sum(A[b, i, k] * B[b, k, j], over=k))


def _chain():
    M, N, K, L = tex.sizes("M N K L")
    i, j, k, m = tex.indices("i j k m")
    A = tex.tensor("A", (M, K), "float32")
    B = tex.tensor("B", (K, N), "float32")
    C = tex.tensor("C", (N, L), "float32")
    AB = tex.compute("AB", (i, j), tex.sum(A[i, k] * B[k, j], over=k))
    return tex.compute("D", (i, m), tex.sum(AB[i, j] * C[j, m], over=j))


def _row_sums():
    M, N = tex.sizes("M N")
    i, j = tex.indices("i j")
    A = tex.tensor("A", (M, N), "float32")
    return tex.compute("r", (i,), tex.sum(A[i, j], over=j))


PROGRAMS = {"matmul": _matmul, "matmul_f64": lambda: _matmul("float64"),
            "a_bt": lambda: _matmul(transposed=True), "batched": _batched, "chain": _chain,
            "row_sums": _row_sums}


def _eager(out):
    """The auto schedule with every specialization scheduled at once."""
    from tex.scheduler import auto
    saved, auto.DEFER_SPECIALIZATIONS = auto.DEFER_SPECIALIZATIONS, False
    try:
        s = tex.schedule(out).auto()
    finally:
        auto.DEFER_SPECIALIZATIONS = saved
    assert not _pending(s)
    return s


def _pending(s):
    return [spec.name for st in s.stages for spec in st.specializations if spec.pending]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_nests_lowered_on_demand_are_the_eager_kernel(name):
    """Every choice lowered alone (and its deferred schedule run then) gives the kernel
    of the same schedule replayed eagerly from its history: same structure key."""
    out = PROGRAMS[name]()
    s = tex.schedule(out).auto()
    nests = s.nests()
    lazy = nests.kernel()
    eager = _eager(out)
    assert structure_key(lazy) == structure_key(eager.kernel())
    assert structure_key(s.kernel()) == structure_key(eager.kernel())
    assert s.history == eager.history


def test_a_symbolic_matmul_defers_its_specializations_until_needed():
    C = _matmul()
    s = tex.schedule(C).auto()
    pending = _pending(s)
    assert len(pending) >= 10 and len(pending) == len(s[C].specializations)
    f = tex.compile(s, sizes={size: 256 for size in s.program.sizes})
    # the 256^3 call's nest ran its schedule; the others still wait
    assert len(_pending(s)) == len(pending) - 1
    assert format_nest(f._sig.kernel).count("...  # not lowered yet") == len(pending)
    rng = np.random.default_rng(0)
    for m, n, k in [(256, 256, 256), (1, 300, 70), (3, 65, 63), (7, 7, 1000), (65, 1, 7),
                    (5, 40, 1)]:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-4, atol=1e-4)
    a = rng.standard_normal((130, 100)).astype(np.float32)[::2, ::-1]   # strided views
    b = rng.standard_normal((100, 90)).astype(np.float32)[:, 1::3]
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-4, atol=1e-4)
    assert "not lowered yet" not in f.loop_nest          # every nest, lowered now
    assert not _pending(s)


def test_the_history_is_the_same_whichever_deferred_schedule_runs_first():
    C = _matmul()
    first = tex.schedule(C).auto()
    expected = first.history
    other = tex.schedule(C).auto()
    for spec in reversed(other[C].specializations):
        _ = spec.state                   # runs them last to first
    assert other.history == expected
    assert not _pending(first) and not _pending(other)
    again = tex.schedule(C).replay(first.history_json())
    assert str(again) == str(first)


def test_a_step_after_auto_runs_the_deferred_schedules_first():
    """A user's step after s.auto() finds every specialization scheduled, as the
    eager schedule had them (and its record comes after theirs)."""
    C = _matmul()
    s = tex.schedule(C).auto()
    spec = s[C].specializations[-1]
    assert spec.pending
    s[C].parallel(s[C].loops[0])
    assert not _pending(s)
    assert s.history[-1].stage == "C"
    with pytest.raises(ScheduleError):
        spec.specialize(spec.condition)


def test_a_compiled_kernel_builds_the_schedule_as_it_was_compiled():
    """The target in effect at a later call does not change the nest a function
    builds then: it is built, and its deferred schedule run, for the target the
    function was compiled for."""
    C = _matmul()
    v2 = named("x86-64-v2")                        # 4 float lanes, no FMA: runs anywhere
    with overriding(v2):
        s = tex.schedule(C).auto()
        f = tex.compile(s)                         # (no sizes: nothing built yet)
    assert len(_pending(s)) == len(s[C].specializations)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((70, 50)).astype(np.float32)
    b = rng.standard_normal((50, 90)).astype(np.float32)
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-4, atol=1e-4)
    assert len(_pending(s)) == len(s[C].specializations) - 1
    ir = f._sig.built.make_ir()
    assert "<4 x float>" in ir and "<8 x float>" not in ir and "<16 x float>" not in ir
    with overriding(v2):
        expected = structure_key(_eager(C).kernel())
    assert structure_key(f.kernel) == expected


def test_later_steps_on_a_specialization_do_not_reach_a_compiled_function():
    C = _matmul()
    s = tex.schedule(C).auto()
    f = tex.compile(s)
    before = structure_key(f.kernel)
    one_row = next(spec for spec in s[C].specializations
                   if str(spec.condition) == "Eq(M, 1)")
    one_row.unroll(one_row.loops[-1])               # a legal further step
    assert structure_key(f.kernel) == before
    rng = np.random.default_rng(3)
    a = rng.standard_normal((1, 40)).astype(np.float32)
    b = rng.standard_normal((40, 30)).astype(np.float32)
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_a_function_with_deferred_nests_pickles_with_its_whole_history():
    C = _matmul()
    s = tex.schedule(C).auto()
    f = tex.compile(s)
    assert any(isinstance(e, Deferred) and not e.ran for e in f._rebuild_entries[2])
    g = pickle.loads(pickle.dumps(f))
    assert g is f                            # this process has it: the same function
    assert list(f._rebuild[2]) == s.history       # read when pickled: every step
    assert not _pending(s)
    rng = np.random.default_rng(4)
    a = rng.standard_normal((3, 20)).astype(np.float32)
    b = rng.standard_normal((20, 33)).astype(np.float32)
    np.testing.assert_allclose(g(a, b), a @ b, rtol=1e-4, atol=1e-4)
    copy = pickle.loads(pickle.dumps(f._rebuild))     # as another process rebuilds it
    h = tex.compile(Schedule(copy[0], copy[1]).replay(copy[2]))
    np.testing.assert_allclose(h(a, b), a @ b, rtol=1e-4, atol=1e-4)
    assert str(h.loop_nest) == str(f.loop_nest)


def test_a_deferred_schedule_that_adds_an_undeclared_parameter_is_an_error():
    """The kernel's signature (its parameters) is made before a deferred schedule runs:
    one that adds a parameter it did not declare fails loudly, not silently."""
    C = _matmul()
    s = tex.schedule(C)
    sizes = {str(x): x for x in s.program.sizes}
    M, K = sizes["M"], sizes["K"]

    def schedule(st):
        st.split_k("k", AutoParts("C_parts", M, K))
    s[C].specialize(M >= 2, schedule)
    for _ in range(2):                   # and again: never a kernel without it
        with pytest.raises(RuntimeError, match="did not declare"):
            s.nests().kernel()
    s2 = tex.schedule(C)
    s2[C].specialize(M >= 2, schedule, params=(AutoParts("C_parts", M, K),))
    f = tex.compile(s2)
    a = np.ones((5, 7), np.float32)
    np.testing.assert_allclose(f(a, a.T.copy()), a @ a.T)


def test_a_deferred_schedule_that_fails_fails_at_every_use():
    """A schedule that raises half way is never built half done: each later call
    raises the same error."""
    C = _matmul()
    s = tex.schedule(C)
    M = next(x for x in s.program.sizes if str(x) == "M")

    def schedule(st):
        st.split("i", 4)
        st.split("no_such_loop", 4)
    s[C].specialize(M >= 2, schedule)
    f = tex.compile(s)
    a = np.ones((5, 7), np.float32)
    for _ in range(2):
        with pytest.raises(ScheduleError, match="no_such_loop"):
            f(a, a.T.copy())
    np.testing.assert_allclose(f(a[:1], a.T.copy()), a[:1] @ a.T)   # the other nest runs


def test_the_tuned_schedule_and_the_display_leave_the_deferred_schedules_waiting():
    from tex.scheduler import tuning
    C = _matmul()
    s = tuning.build(tex.schedule(C).program, [])
    assert len(_pending(s)) == len(s[C].specializations) >= 10
    f = tex.compile(s, sizes={x: 256 for x in s.program.sizes})
    html = f._repr_html_()
    assert "not lowered yet" in html and "f.loop_nest" in html
    assert len(_pending(s)) == len(s[C].specializations) - 1
