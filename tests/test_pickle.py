"""Everything public pickles: indices, expressions, tensors, definitions, programs,
schedules (as program + history, replayed) and compiled functions (as program +
schedule history + flags, rebuilt where they are unpickled), with `pickle`, `copy` and a
`spawn` multiprocessing pool."""
import copy
import multiprocessing
import pickle

import numpy as np

import tex
from tex.backends.llvm import runtime

M, N, K = tex.sizes("M N K")
i, j, k = tex.indices("i j k")


def program():
    A = tex.tensor("A", (M, K), "float32")
    B = tex.tensor("B", (K, N), "float32")
    C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))
    R = tex.compute("R", (i,), tex.max(C[i, j], over=j) + tex.mean(C[i, j], over=j))
    return A, B, C, R


def operands(seed=0, m=7, k=65, n=63):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, k)).astype(np.float32),
            rng.standard_normal((k, n)).astype(np.float32))


def want(a, b):
    c = a @ b
    return c.max(axis=1) + c.mean(axis=1)


def round_trips(obj):
    return [pickle.loads(pickle.dumps(obj)), copy.copy(obj), copy.deepcopy(obj)]


def test_indices_round_trip_to_the_same_object():
    q = tex.indices("q", extent=N // 2)
    for x in (i, q):
        for y in round_trips(x):
            assert y is x
    assert pickle.loads(pickle.dumps(q)).extent == N // 2
    # one pickle holding an index twice, and an expression of it, gives one object
    a, b, e = pickle.loads(pickle.dumps((i, i, i + 1)))
    assert a is b is i and (e - 1) == i


def test_params_sizes_and_expressions_round_trip():
    P = tex.param("P")
    for x in (P, M, N // 2 + 1):
        for y in round_trips(x):
            assert y == x
    A, B, C, R = program()
    e = tex.sum(A[i, k] * B[k, j], over=k) / K + 1.5
    for y in round_trips(e):
        assert repr(y) == repr(e) and y.dtype == e.dtype


def test_tensors_definitions_and_programs_round_trip_to_the_same_objects():
    A, B, C, R = program()
    for obj in (A, C, R):
        for y in round_trips(obj):
            assert y is obj
    p = tex.Program(R)
    for q in round_trips(p):
        assert q.outputs == (R,) and q.inputs == p.inputs and repr(q) == repr(p)


def test_an_unpickled_definition_is_consistent_in_a_process_that_never_saw_it():
    """Forget this process's objects (as a fresh process would not have them): the
    unpickled definition is a new object whose indices, tensors and lifted definitions
    are consistent with each other, and it computes the same result."""
    A, B, C, R = program()
    blob = pickle.dumps(R)
    live = dict(tex.Definition._live)
    tex.Definition._live.clear()
    try:
        R2 = pickle.loads(blob)
        assert R2 is not R and R2.uid == R.uid
        assert pickle.loads(blob) is R2                 # one object per process
        C2 = next(t for t in tex.Program(R2).definitions if t.name == "C")
        assert C2 is not C and set(C2.extents) == set(C.extents)
        a, b = operands()
        np.testing.assert_allclose(tex.compile(R2)(a, b), want(a, b), rtol=1e-4, atol=1e-4)
    finally:
        tex.Definition._live.update(live)


def test_schedules_pickle_as_their_history_and_copies_are_independent():
    A, B, C, R = program()
    s = tex.schedule(R)
    io, ii = s[C].split(i, 4)
    s[C].reorder(io, j, k, ii)
    s[C].parallel(io)
    for s2 in round_trips(s):
        assert s2 is not s and str(s2) == str(s) and s2.history == s.history
    s3 = copy.deepcopy(s)
    s3[R].parallel(s3[R].loops[0])
    assert len(s3.history) == len(s.history) + 1 and str(s3) != str(s)
    auto = tex.schedule(R).auto()
    assert str(pickle.loads(pickle.dumps(auto))) == str(auto)
    stage = pickle.loads(pickle.dumps(s[C]))
    assert stage.name == "C" and str(stage) == str(s[C])
    loop = pickle.loads(pickle.dumps(io))
    assert loop.name == "io" and str(loop.stage.sched) == str(s)


def test_compiled_functions_are_rebuilt_from_their_schedule():
    A, B, C, R = program()
    s = tex.schedule(R)
    ko, ki = s[C].split_k(k, parts=tex.param("P"))
    f = tex.compile(s, casting="same_kind")
    a, b = operands(1)
    assert pickle.loads(pickle.dumps(f)) is f            # this process already has it
    blob = pickle.dumps(f)
    runtime._LIVE.clear()                                # as another process would be
    g = pickle.loads(blob)
    assert g is not f and g.loop_nest == f.loop_nest and g.casting == "same_kind"
    np.testing.assert_allclose(g(a, b, P=3), want(a, b), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(g(a.astype(np.float64), b, P=2), want(a, b), rtol=1e-4,
                               atol=1e-4)
    h = copy.deepcopy(tex.compile(R))
    np.testing.assert_allclose(h(a, b), want(a, b), rtol=1e-4, atol=1e-4)


def test_a_spawn_pool_calls_a_compiled_function():
    A, B, C, R = program()
    f = tex.compile(R)
    jobs = [operands(seed, m, 33, n) for seed, (m, n) in enumerate([(1, 1), (7, 63), (9, 65)])]
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        results = pool.starmap(f, jobs)
        back = pool.apply(copy.copy, ((R, i),))          # unpickled there, sent back here
    for (a, b), got in zip(jobs, results):
        np.testing.assert_allclose(got, want(a, b), rtol=1e-4, atol=1e-4)
    assert back[0] is R and back[1] is i
