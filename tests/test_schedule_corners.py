"""User-written schedules a fuzzer found computing garbage or not replaying (each against
numpy; the refusals name the step to take instead)."""
import pickle

import numpy as np
import pytest

import tex
from tex.errors import ScheduleError

M, N, K = tex.sizes("M N K")
i, j, k = tex.indices("i j k")
A = tex.tensor("A", (M, K), "float32")
B = tex.tensor("B", (K, N), "float32")
C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))


@pytest.mark.parametrize("cols", [1, 20, 63, 64, 65, 200])
def test_a_private_loop_that_runs_fewer_parts_than_its_buffer(cols):
    # koi has 32 parts, but min(32, ceil(K/2) - 32*koo) of them run: the parts never
    # reached had no first block to store them, and the merge read them
    X = tex.tensor("X", (M, K), "float32")
    R = tex.compute("R", (i,), tex.sum(X[i, k], over=k))
    s = tex.schedule(R)
    s[R].split(k, 2)
    s[R].split("ko", 32)
    s[R].split(i, 4)
    s[R].reorder("koo", "io", "koi", "ki", "ii")
    s[R].privatize("koi")
    x = np.random.default_rng(cols).standard_normal((8, cols)).astype(np.float32)
    np.testing.assert_allclose(tex.compile(s)(x), x.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_fusing_a_stage_that_others_ride_is_refused():
    D = tex.compute("D", (i, j), tex.abs(C[i, j]))
    E = tex.compute("E", (i,), tex.max(D[i, j], over=j))
    a = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    s = tex.schedule(E)
    s.fuse(E)
    with pytest.raises(ScheduleError, match="E already run.s. in D's epilogue; fuse D first"):
        s.fuse(D)
    s.auto()                  # (it fused D, which then read C's never-stored result)
    np.testing.assert_allclose(tex.compile(s)(a, b), np.abs(a @ b).max(axis=1), rtol=1e-5)
    s = tex.schedule(E)       # the order that works
    s.fuse(D)
    s.fuse(E)
    np.testing.assert_allclose(tex.compile(s)(a, b), np.abs(a @ b).max(axis=1), rtol=1e-5)


def test_computing_a_fused_stage_inside_another_is_refused():
    D = tex.compute("D", (i, j), tex.abs(C[i, j]))
    E = tex.compute("E", (i,), tex.sum(D[i, j], over=j))
    s = tex.schedule(E)
    s.fuse(D)
    with pytest.raises(ScheduleError, match="D runs in C's epilogue .fused.; s.unfuse"):
        s[D].compute_at(s[E], i)
    with pytest.raises(ScheduleError, match="D runs in C's epilogue"):
        s.fuse(E, at=i)


def test_a_pack_over_an_empty_axis():
    # the pack's box had 5*ceil(K/5) - 2 rows: -2 at K = 0, a MemoryError
    s = tex.schedule(C)
    s[C].split(k, 5, tail="guard")
    s[C].split("ki", 3, tail="guard")
    s[C].split_k("kio", 3)
    s[C].pack(B, at=i)
    f = tex.compile(s)
    np.testing.assert_array_equal(f(np.ones((4, 0), np.float32), np.ones((0, 3), np.float32)),
                                  np.zeros((4, 3), np.float32))
    a = np.ones((4, 7), np.float32)
    np.testing.assert_allclose(f(a, a.T.copy()), a @ a.T)


def test_specializing_on_a_steps_parameter_replays():
    X = tex.tensor("X", (M, N), "float32")
    D = tex.compute("D", (i, j), X[i, j] * 2)
    s = tex.schedule(D)
    s[D].split_parts(i, tex.param("P"))
    s[D].specialize("P >= 2")
    again = pickle.loads(pickle.dumps(s))
    x = np.ones((4, 3), np.float32)
    np.testing.assert_array_equal(tex.compile(again)(x, P=2), 2 * x)
    assert str(again) == str(s)


def test_a_reduction_strategy_under_a_fused_epilogue_replays():
    # its steps were accepted together; replayed one by one, the first split was refused
    # by the epilogue's race check, so the schedule did not pickle
    R = tex.compute("R", (i,), tex.max(C[i, j], over=j))
    s = tex.schedule(R)
    s.auto()
    s["C#1"].reduction_strategy("inner_parallel")
    again = pickle.loads(pickle.dumps(s))
    assert str(again) == str(s)
    a = np.random.default_rng(0).standard_normal((70, 50)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((50, 90)).astype(np.float32)
    np.testing.assert_allclose(tex.compile(again)(a, b), (a @ b).max(axis=1), rtol=1e-4)
    # a replayed history whose last state races is still refused (checked at its end)
    racy = [{"step": "Fuse", "stage": "R", "into": "C"},
            {"step": "SetKind", "stage": "C", "loop": "j", "kind": "parallel"}]
    with pytest.raises(ScheduleError, match="two threads would combine into one element"):
        tex.schedule(R).replay(racy)
