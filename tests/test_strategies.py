"""Innermost-reduction strategies (seeds/004): `s[S].reduction_strategy(name, tail=...)`
with name in inner_parallel, inner_reduction, vector_accumulator.

Every strategy x combiner x dtype x tail against numpy on awkward row lengths and
non-contiguous rows (one compiled function serves every size: the extents are
symbolic); widening int8 -> int32 exactly; argmax/argmin ties and NaNs; float sums and
products within the rigorous bound of any summation order; column (ij->j), full (ij->)
and fused (max_j (A@B)[i, j]) reductions; the refusals and their messages; the golden
loop nests of the reference case int8[384x512] -> int32[384].
"""
import math

import numpy as np
import pytest

import tex
from tex.scheduler.target import overriding, target
from cpus import ZEN3

M, N, K = tex.sizes("M N K")
STRATEGIES = ["inner_parallel", "inner_reduction", "vector_accumulator"]
TAILS = ["peel", "mask"]
SIZES = [1, 7, 15, 16, 17, 63, 64, 65, 511, 513, 1000]
ROWS = [1, 5, 17, 70]               # row counts cycle with the sizes (inner_parallel's lanes)
SAME = ["float32", "float64", "int8", "int16", "int32", "int64"]

# (combiner, input dtype, accumulator dtype= or None). sum and prod accumulate in the
# input dtype (integers wrap exactly like numpy's) or widen as dtype= asks.
CASES = (
    [("sum", dt, dt) for dt in SAME]
    + [("sum", "int8", "int32"), ("sum", "float32", "float64"), ("sum", "int16", None)]
    + [("prod", dt, dt) for dt in SAME]
    + [("prod", "int8", "int32"), ("prod", "float32", "float64")]
    + [(c, dt, None) for c in ("max", "min", "argmax", "argmin") for dt in SAME]
)


def _case_id(case):
    combiner, dt, acc = case
    return f"{combiner}-{dt}" + ("" if acc in (None, dt) else f"-to-{acc}")


def _row_reduction(combiner, dtype, acc, name="R"):
    i, j = tex.indices("i j")
    X = tex.tensor("X", (M, N), dtype)
    kw = {} if acc is None else {"dtype": acc}
    return tex.compute(name, (i,), getattr(tex, combiner)(X[i, j], over=j, **kw))


def _compile(defn, strategy, tail, **kw):
    s = tex.schedule(defn)
    s[defn].reduction_strategy(strategy, tail=tail, **kw)
    return tex.compile(s)


# ---------------------------------------------------------------- data and oracles

def _data(rng, combiner, dtype, shape):
    dt = np.dtype(dtype)
    if dt.kind == "f":
        if combiner == "prod":             # magnitudes near 1, random signs: no overflow
            return (rng.uniform(0.9, 1.1, shape) * rng.choice([-1, 1], shape)).astype(dt)
        if combiner == "sum":
            return rng.uniform(-1, 1, shape).astype(dt)
        a = np.round(2 * rng.standard_normal(shape)) / 2          # halves: many ties
        a = a.astype(dt)
        if a.size:                          # NaNs and infinities in some rows
            for v in (np.nan, np.inf, -np.inf):
                a.flat[rng.integers(0, a.size, max(1, a.size // 400))] = v
        return a
    info = np.iinfo(dt)
    if combiner in ("argmax", "argmin"):
        return rng.integers(-3, 4, shape).astype(dt)              # many ties
    a = rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True)
    if combiner == "prod":
        a |= 1                              # odd factors: the wrapped product never hits 0
    elif combiner in ("max", "min") and a.size:
        a.flat[rng.integers(0, a.size, 2)] = info.min                # the identities
        a.flat[rng.integers(0, a.size, 2)] = info.max
    return a


def _layouts(rng, make, rows, n):
    """The same logical (rows, n) shape as contiguous rows, every other column of a
    wider array, reversed rows and the transpose of a wider array (column-major rows)."""
    yield "contiguous", make((rows, n))
    yield "x[:, ::2]", make((rows, 2 * n))[:, ::2]
    yield "x[::-1]", make((rows, n))[::-1]
    yield "x.T of a wider array", make((n, rows + 3)).T[1:rows + 1]


def _numpy(combiner, a, acc):
    """numpy's answer along the last axis."""
    if combiner == "sum":
        return a.sum(axis=-1, dtype=acc)
    if combiner == "prod":
        return a.prod(axis=-1, dtype=acc)
    return getattr(np, combiner)(a, axis=-1)


def _unit_roundoff(dtype):
    return float(np.finfo(dtype).eps) / 2


def _check_rows(got, a, combiner, acc):
    """Exact for integers, max/min and positions (NaN positions included); float sums
    and products within the bound that holds for any order of the n - 1 operations."""
    acc = np.dtype(acc) if acc is not None else None
    want = _numpy(combiner, a, acc)
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype)
    if combiner not in ("sum", "prod") or want.dtype.kind != "f":
        np.testing.assert_array_equal(got, want)       # NaN == NaN here
        return
    n = a.shape[-1]
    u = _unit_roundoff(want.dtype)
    wide = a.astype(np.longdouble)
    if combiner == "sum":
        exact = np.array([math.fsum(r) for r in a.astype(np.float64)])
        bound = (n + 1) * u * np.abs(wide).sum(axis=-1).astype(np.float64)
    else:
        exact = wide.prod(axis=-1).astype(np.float64)
        bound = 1.01 * (n + 1) * u * np.abs(exact)
    err = np.abs(got.astype(np.float64) - exact)
    assert np.all(err <= bound), f"error {err.max():.3g} above the bound {bound[err.argmax()]:.3g}"


def _differential(f, combiner, dtype, acc, sizes=SIZES, seed=0):
    rng = np.random.default_rng(seed)
    for k, n in enumerate(sizes):
        rows = ROWS[k % len(ROWS)]
        for layout, a in _layouts(rng, lambda s: _data(rng, combiner, dtype, s), rows, n):
            try:
                _check_rows(f(a), a, combiner, acc)
            except AssertionError as err:
                raise AssertionError(f"{rows}x{n}, {layout}: {err}") from None


# ---------------------------------------------------------------- the cross product

def _cross_product():
    """Every (case, strategy, tail), except that inner_parallel's masked tail (over the
    rows; its kernels take up to ~0.7 s to compile) runs on the sums, the widening cases
    and argmin only: the file stays well under a minute."""
    for case in CASES:
        for strategy in STRATEGIES:
            for tail in TAILS:
                if strategy == "inner_parallel" and tail == "mask" and \
                        case[0] not in ("sum", "argmin") and case[2] in (None, case[1]):
                    continue
                yield pytest.param(case, strategy, tail,
                                   id=f"{_case_id(case)}-{strategy}-{tail}")


@pytest.mark.parametrize("case, strategy, tail", list(_cross_product()))
def test_strategy_against_numpy(case, strategy, tail):
    """One compiled function per (strategy, combiner, dtype, tail), called on every row
    length and layout: the extents are call-time values."""
    combiner, dtype, acc = case
    f = _compile(_row_reduction(combiner, dtype, acc), strategy, tail)
    _differential(f, combiner, dtype, acc)


@pytest.mark.parametrize("tail", TAILS)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_int8_sums_widen_to_int32_exactly(strategy, tail):
    """Sums that overflow int8 (and int16) but not int32 are exact: the widening happens
    before the adds, in the vector registers; no int32 copy of the input is made."""
    f = _compile(_row_reduction("sum", "int8", "int32"), strategy, tail)
    assert not [b for b in f.buffers if len(b.shape) == 2]   # no converted copy of X
    for n in (513, 1000, 4096, 16411):
        rows = np.array([[127] * n, [-128] * n, [127, -128] * (n // 2) + [127] * (n % 2),
                         [100] * (n - 1) + [-1]], dtype=np.int8)
        want = [127 * n, -128 * n, 127 * (n - n // 2) - 128 * (n // 2), 100 * (n - 1) - 1]
        for a, w in ((rows, want), (rows[::-1], want[::-1]), (np.asfortranarray(rows), want)):
            got = f(a)
            assert got.dtype == np.int32 and got.tolist() == w, n
    assert 127 * 16411 > np.iinfo(np.int16).max


def _tie_rows(n, dtype):
    """(row, first position of the extreme) pairs: ties across vector boundaries and in
    the tail, NaNs before and after the extreme, rows of one value."""
    is_float = np.dtype(dtype).kind == "f"
    positions = sorted({p for p in (0, 1, 15, 16, 17, 31, 63, 64, 65, n // 2, n - 2, n - 1)
                        if 0 <= p < n})
    out = [(np.zeros(n, dtype), 0)]
    for p in positions:
        for q in positions:
            if q > p:                       # the same extreme at p and q: p wins
                r = np.zeros(n, dtype)
                r[[p, q]] = 5
                out.append((r, p))
        if is_float:                        # a NaN at p beats the 9 and a later NaN
            r = np.full(n, 1.0, dtype)
            r[-1] = 9
            r[p] = np.nan
            r[p + (n - p) // 2] = np.nan
            out.append((r, p))
    return out


@pytest.mark.parametrize("strategy, tail", [(st, t) for st in STRATEGIES for t in TAILS
                                             if (st, t) != ("inner_parallel", "peel")])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "int32"])
def test_arg_ties_and_nans_take_the_first_index(dtype, strategy, tail):
    """(inner_parallel's tail is over the rows, not the reduced axis: its mask tail
    stands for both here.)"""
    fmax = _compile(_row_reduction("argmax", dtype, None), strategy, tail)
    fmin = _compile(_row_reduction("argmin", dtype, None), strategy, tail)
    gmax = _compile(_row_reduction("max", dtype, None), strategy, tail)
    for n in (1, 2, 17, 64, 65, 130, 1000):
        cases = _tie_rows(n, dtype)
        a = np.stack([r for r, _ in cases])
        want = [p for _, p in cases]
        assert np.argmax(a, axis=1).tolist() == want            # numpy's rule
        assert fmax(a).tolist() == want, n
        flipped = np.where(np.isnan(a), a, -a) if a.dtype.kind == "f" else -a
        assert fmin(flipped).tolist() == want, n
        if a.dtype.kind == "f":             # max propagates the NaN
            np.testing.assert_array_equal(gmax(a), a.max(axis=1))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_max_min_propagate_nan_and_infinities(strategy):
    fmax = _compile(_row_reduction("max", "float32", None), strategy, "mask")
    fmin = _compile(_row_reduction("min", "float32", None), strategy, "peel")
    for n in (1, 16, 17, 100, 1000):
        rows = np.zeros((6, n), np.float32)
        rows[0, -1] = np.nan               # in the tail
        rows[1, 0] = np.nan
        rows[2] = -np.inf                  # max of only -inf
        rows[3] = np.inf
        rows[4, n // 2] = np.inf
        rows[5, n // 2] = -np.inf
        for a in (rows, rows[:, ::-1]):
            np.testing.assert_array_equal(fmax(a), a.max(axis=1))
            np.testing.assert_array_equal(fmin(a), a.min(axis=1))


# ---------------------------------------------------------------- accumulators, call-time sizes

@pytest.mark.parametrize("accumulators", [1, 2, 3, 8])
def test_vector_accumulator_count(accumulators):
    """U accumulators split the reduced axis by W*U (W: the narrowest operand's lanes)."""
    for combiner, dtype, acc in [("sum", "int8", "int32"), ("sum", "float32", "float32"),
                                 ("argmin", "int16", None)]:
        defn = _row_reduction(combiner, dtype, acc)
        s = tex.schedule(defn)
        s[defn].reduction_strategy("vector_accumulator", tail="mask", accumulators=accumulators)
        split = s.history[0]
        assert (split.loop, split.factor) == ("j", target().lanes(dtype) * accumulators)
        _differential(tex.compile(s), combiner, dtype, acc, sizes=[1, 63, 65, 513, 1000])


def test_one_function_many_shapes():
    """A compiled strategy is shape-generic: rows and lengths bind at each call."""
    fs = {st: _compile(_row_reduction("sum", "int8", "int32"), st, "mask") for st in STRATEGIES}
    rng = np.random.default_rng(3)
    for m, n in [(384, 512), (1, 1), (3, 100000), (1000, 3), (65, 65), (0, 7), (7, 0)]:
        a = rng.integers(-128, 128, (m, n), dtype=np.int8)
        for st, f in fs.items():
            assert np.array_equal(f(a), a.sum(axis=1, dtype=np.int32)), (st, m, n)


# ---------------------------------------------------------------- fast_math=False

def test_fast_math_false_keeps_sequential_order():
    """Float sums and products without fast_math: the reassociating strategies are
    refused; inner_parallel (each lane walks its row in order) and the default
    schedule give the sequential result bit for bit."""
    S = _row_reduction("sum", "float32", None)
    rng = np.random.default_rng(4)
    a = (rng.standard_normal((37, 3000)) * 1e3).astype(np.float32)
    sequential = np.zeros(37, np.float32)
    for col in a.T:
        sequential += col
    assert tex.compile(S, fast_math=False)(a).tolist() == sequential.tolist()
    for tail in TAILS:
        s = tex.schedule(S)
        s[S].reduction_strategy("inner_parallel", tail=tail)
        assert tex.compile(s, fast_math=False)(a).tolist() == sequential.tolist()
    for combiner in ("sum", "prod"):
        defn = _row_reduction(combiner, "float32", None)
        for st, prim in [("inner_reduction", "vectorize"), ("vector_accumulator", "privatize")]:
            s = tex.schedule(defn)
            s[defn].reduction_strategy(st)
            with pytest.raises(tex.ScheduleError, match=rf"{prim}: .*'{combiner}'.*"
                                                        r"reassociates.*fast_math is off"):
                tex.compile(s, fast_math=False)
            with pytest.raises(tex.ScheduleError, match="fast_math is off"):
                tex.schedule(defn, fast_math=False)[defn].reduction_strategy(st)


def test_fast_math_false_allows_exact_reductions():
    """Integer sums and float max/argmax do not depend on the order: every strategy
    stays available without fast_math."""
    for combiner, dtype, acc in [("sum", "int8", "int32"), ("max", "float32", None),
                                 ("argmax", "float64", None), ("prod", "int32", "int32")]:
        defn = _row_reduction(combiner, dtype, acc)
        for st in STRATEGIES:
            s = tex.schedule(defn)
            s[defn].reduction_strategy(st, tail="mask")
            _differential(tex.compile(s, fast_math=False), combiner, dtype, acc,
                          sizes=[1, 17, 513])


# ---------------------------------------------------------------- other reductions

def _column_reduction(combiner, dtype, acc):
    i, j = tex.indices("i j")
    X = tex.tensor("X", (M, N), dtype)
    kw = {} if acc is None else {"dtype": acc}
    return tex.compute("C", (j,), getattr(tex, combiner)(X[i, j], over=i, **kw))


COLUMN_CASES = [("sum", "int8", "int32"), ("sum", "float32", "float32"),
                ("max", "float64", None), ("argmax", "float32", None), ("argmin", "int16", None)]


@pytest.mark.parametrize("tail", TAILS)
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("case", COLUMN_CASES, ids=_case_id)
def test_column_reduction_ij_to_j(case, strategy, tail):
    """"ij->j" (reduce over the slow axis): inner_parallel puts columns in the lanes,
    the other two vectorize down the columns."""
    combiner, dtype, acc = case
    f = _compile(_column_reduction(combiner, dtype, acc), strategy, tail)
    rng = np.random.default_rng(5)
    for m in (1, 7, 16, 17, 65, 513):
        for n in (1, 15, 64, 70):
            for layout, a in _layouts(rng, lambda s: _data(rng, combiner, dtype, s), n, m):
                try:                          # a is (n, m): f reduces a.T over its rows
                    _check_rows(f(a.T), a, combiner, acc)
                except AssertionError as err:
                    raise AssertionError(f"{m}x{n}, {layout}: {err}") from None


def test_column_reduction_reordered():
    """With the reduction loop outermost (i, j) the reduced loop is not innermost: the
    two strategies that vectorize it say so; inner_parallel still applies."""
    defn = _column_reduction("sum", "int8", "int32")
    for st in ("inner_reduction", "vector_accumulator"):
        s = tex.schedule(defn)
        s[defn].reorder("i", "j")
        with pytest.raises(tex.ScheduleError, match=r"reduction_strategy: the innermost loop "
                                                    r"of stage C is not the reduction loop i"):
            s[defn].reduction_strategy(st)
    s = tex.schedule(defn)
    s[defn].reorder("i", "j")
    s[defn].reduction_strategy("inner_parallel", tail="mask")
    f = tex.compile(s)
    a = np.random.default_rng(6).integers(-128, 128, (300, 77), dtype=np.int8)
    assert np.array_equal(f(a), a.sum(axis=0, dtype=np.int32))


FULL_CASES = [("sum", "int8", "int32"), ("sum", "float32", "float32"),
              ("max", "float32", None), ("prod", "int64", "int64")]


@pytest.mark.parametrize("tail", TAILS)
@pytest.mark.parametrize("strategy", ["inner_reduction", "vector_accumulator"])
@pytest.mark.parametrize("case", FULL_CASES, ids=_case_id)
def test_full_reduction_ij_to_scalar(case, strategy, tail):
    combiner, dtype, acc = case
    i, j = tex.indices("i j")
    X = tex.tensor("X", (M, N), dtype)
    kw = {} if acc is None else {"dtype": acc}
    F = tex.compute("F", (), getattr(tex, combiner)(X[i, j], over=(i, j), **kw))
    f = _compile(F, strategy, tail)
    rng = np.random.default_rng(7)
    for m, n in [(1, 1), (3, 17), (17, 65), (5, 1000), (64, 513)]:
        for layout, a in _layouts(rng, lambda s: _data(rng, combiner, dtype, s), m, n):
            flat = np.ascontiguousarray(a).reshape(1, -1)
            got = np.asarray(f(a)).reshape(1)
            try:
                _check_rows(got, flat, combiner, acc)
            except AssertionError as err:
                raise AssertionError(f"{m}x{n}, {layout}: {err}") from None


def test_full_reduction_refuses_inner_parallel():
    i, j = tex.indices("i j")
    X = tex.tensor("X", (M, N), "float32")
    F = tex.compute("F", (), tex.sum(X[i, j], over=(i, j)))
    s = tex.schedule(F)
    with pytest.raises(tex.ScheduleError, match=r"reduction_strategy: stage F has no output "
                                                r"loop to spread over the vector lanes"):
        s[F].reduction_strategy("inner_parallel")
    assert s.history == []


def _matmul_epilogue(combiner):
    i, j, k = tex.indices("i j k")
    A = tex.tensor("A", (M, K), "float32")
    B = tex.tensor("B", (K, N), "float32")
    C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))
    return tex.compute("R", (i,), getattr(tex, combiner)(C[i, j], over=j))


def _check_epilogue(f, combiner):
    rng = np.random.default_rng(8)
    for m, kk, n in [(1, 1, 1), (5, 7, 17), (33, 16, 65), (70, 9, 513), (3, 4, 1000)]:
        a = rng.standard_normal((m, kk)).astype(np.float32)
        b = rng.standard_normal((kk, n)).astype(np.float32)
        c = a.astype(np.float64) @ b.astype(np.float64)
        got = f(a, b)
        if combiner.startswith("arg"):     # positions: compare the values they point at
            picked = c[np.arange(m), got]
            best = getattr(np, combiner[3:])(c, axis=1)
            np.testing.assert_allclose(picked, best, rtol=1e-5, atol=1e-5 * kk)
        else:
            want = _numpy(combiner, c, None)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * kk * np.sqrt(n))


@pytest.mark.parametrize("tail", TAILS)
@pytest.mark.parametrize("strategy", ["inner_reduction", "vector_accumulator"])
@pytest.mark.parametrize("combiner", ["max", "sum", "argmax"])
def test_fused_matmul_epilogue(combiner, strategy, tail):
    """R = max_j (A@B)[i, j] with s.fuse(R), then the strategy on R's reduction: the
    product rows live in a local buffer and the strategy reads them."""
    R = _matmul_epilogue(combiner)
    s = tex.schedule(R)
    s.fuse(R, at=s[R].loops[0])
    s[R].reduction_strategy(strategy, tail=tail)
    assert "C_local" in str(s)
    _check_epilogue(tex.compile(s), combiner)


@pytest.mark.parametrize("tail", TAILS)
def test_fused_matmul_epilogue_inner_parallel(tail):
    """inner_parallel splits the rows, which the fused producer's anchor forbids after
    fuse (a ScheduleError naming the anchor); before fuse it works: a block of W rows
    of the product is computed per vector of rows."""
    R = _matmul_epilogue("max")
    s = tex.schedule(R)
    s.fuse(R, at=s[R].loops[0])
    with pytest.raises(tex.ScheduleError, match=r"loop i anchors the local copy of C"):
        s[R].reduction_strategy("inner_parallel", tail=tail)
    s = tex.schedule(R)
    s[R].reduction_strategy("inner_parallel", tail=tail)
    s.fuse(R, at=s[R].loops[0])            # at the outermost loop: the block of rows
    assert f"alloc C_local[{target().lanes('float32')}, N]" in str(s)
    _check_epilogue(tex.compile(s), "max")


# ---------------------------------------------------------------- refusals

def test_refusals_name_the_problem():
    S = _row_reduction("sum", "int8", "int32")
    i, j = tex.indices("i j")
    E = tex.compute("E", (i, j), tex.tensor("X", (M, N), "int8")[i, j] * 2)
    with pytest.raises(tex.ScheduleError, match=r"'bogus' is not one of 'inner_parallel', "
                                                r"'inner_reduction', 'vector_accumulator'"):
        tex.schedule(S)[S].reduction_strategy("bogus")
    with pytest.raises(tex.ScheduleError, match="stage E has no reduction"):
        tex.schedule(E)[E].reduction_strategy("inner_reduction")
    with pytest.raises(tex.ScheduleError, match=r"tail='guard' is not one of 'peel', 'mask'"):
        tex.schedule(S)[S].reduction_strategy("inner_reduction", tail="guard")
    with pytest.raises(tex.ScheduleError):
        tex.schedule(S)[S].reduction_strategy("vector_accumulator", accumulators=0)
    s = tex.schedule(S)
    s[S].reduction_strategy("vector_accumulator")
    with pytest.raises(tex.ScheduleError, match="private partial results"):
        s[S].reduction_strategy("inner_reduction")


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_refused_strategy_leaves_the_schedule_unchanged(strategy):
    S = _row_reduction("sum", "float32", None)
    s = tex.schedule(S)
    before = str(s)
    with pytest.raises(tex.ScheduleError):
        s[S].reduction_strategy(strategy, tail="bogus")
    assert s.history == [] and str(s) == before


# ---------------------------------------------------------------- golden loop nests

def _reference_case():
    """The seed's running example: int8[384x512] -> int32[384] row sums (sizes symbolic)."""
    return _row_reduction("sum", "int8", "int32", name="S")


GOLDEN_HISTORY = {
    "inner_parallel": ["Split(i)", "Reorder(io, j, ii)", "SetKind(ii, vector)"],
    "inner_reduction": ["Split(j)", "SetKind(ji, vector)"],
    "vector_accumulator": ["Split(j)", "Privatize(ji)", "SetKind(ji, vector)"],
}


def _history(s):
    out = []
    for st in s.history:
        name = type(st).__name__
        if name == "Split":
            out.append(f"Split({st.loop})")
        elif name == "Reorder":
            out.append(f"Reorder({', '.join(st.loops)})")
        elif name == "Privatize":
            out.append(f"Privatize({st.loop})")
        else:
            out.append(f"SetKind({st.loop}, {st.kind})")
    return out


@pytest.mark.parametrize("tail", TAILS)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_golden_loop_nest_of_the_reference_case(strategy, tail, golden):
    S = _reference_case()
    with overriding(ZEN3):                  # 32 int8 lanes, no VNNI
        s = tex.schedule(S)
        s[S].reduction_strategy(strategy, tail=tail)
        golden(f"strategy_{strategy}_{tail}", str(s))
    assert _history(s) == GOLDEN_HISTORY[strategy]          # built from the primitives
    assert tex.schedule(S).replay(s.history_json()).__str__() == str(s)
    f = tex.compile(s)
    a = np.random.default_rng(9).integers(-128, 128, (384, 512), dtype=np.int8)
    assert np.array_equal(f(a), a.sum(axis=1, dtype=np.int32))


# ---------------------------------------------------------------- the benchmark rows

def test_bench_registers_each_case_with_each_strategy():
    from tex import bench
    cases = ["reduce_i8_384x512", "reduce_i8_4096x16384", "reduce_f32_4096x4096",
             "reduce_f32_384x512", "reduce_max_f32_4096x4096"]
    want = ["stream_read_bandwidth"] + [f"{c}{s}" for c in cases
                                        for s in ["", *(f"[{st}]" for st in STRATEGIES)]]
    assert [n for n in bench.select() if n.startswith(("reduce_", "stream_"))] == want
    assert all(bench.WORKLOADS[n].__doc__ for n in want)
    opts = bench.Options(repeat=1, min_sample_s=1e-4)
    for name in ("reduce_i8_384x512", "reduce_i8_384x512[vector_accumulator]"):
        result = bench.WORKLOADS[name](opts)        # checks the result against numpy first
        assert result.unit == "GB/s" and result.tex_s > 0 and result.numpy_s > 0


def test_auto_order_counts_only_reads_that_move_with_both_loops():
    """The auto schedule runs a row reduction along its rows when the body also reads a
    per-row value (softmax's sum of exp(S[i, j] - max[i]), LayerNorm's variance): that
    read is invariant along j and must not vote for column order. Column sums still run
    their rows outermost, and the results match numpy either way."""
    from tex.scheduler.auto import prefers_reduction_outside
    L, N = tex.sizes("L N")
    i, j = tex.indices("i j")
    X = tex.tensor("X", (L, N), "float32")
    m = tex.tensor("m", (L,), "float32")
    rows = tex.compute("Rs", (i,), tex.sum(tex.exp(X[i, j] - m[i]), over=j))
    var = tex.compute("Vr", (i,), tex.sum((X[i, j] - m[i]) ** 2, over=j))
    cols = tex.compute("Cs", (j,), tex.sum(X[i, j], over=i))
    assert not prefers_reduction_outside(rows)
    assert not prefers_reduction_outside(var)
    assert prefers_reduction_outside(cols)
    rng = np.random.default_rng(4)
    for shape in ((1, 1), (7, 65), (63, 1000)):
        x = rng.standard_normal(shape).astype(np.float32)
        mx = x.max(axis=1)
        np.testing.assert_allclose(tex.compile(rows)(x, mx), np.exp(x - mx[:, None]).sum(1),
                                   rtol=1e-5)
        np.testing.assert_allclose(tex.compile(cols)(x), x.sum(0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("combiner", ["sum", "max", "argmax"])
def test_auto_order_streams_an_output_index_that_is_not_the_last(combiner):
    """O[b, i] = reduce over j of X[i, j, b], X row-major: in output order each read of
    X strides by B. The auto schedule runs b inside the reduction in blocks of four
    vectors, their partial results in a local accumulator written to O's column once a
    block; X then streams. The results match numpy at sizes no block divides, for
    positional combiners too."""
    from tex.scheduler.order import index_inside_reduction, prefers_reduction_outside
    I, J, B = tex.sizes("I J B")
    i, j, b = tex.indices("i j b")
    X = tex.tensor("X", (I, J, B), "float32")
    O = tex.compute("O", (b, i), getattr(tex, combiner)(X[i, j, b], over=j))
    assert not prefers_reduction_outside(O) and index_inside_reduction(O) is b
    s = tex.schedule(O).auto()
    block = 4 * target().lanes(O.reduction.dtype)
    loops = [line.split()[1] for line in str(s).splitlines() if line.strip().startswith("for ")]
    assert loops[:2] == ["i", "bo"] and "j" in loops and loops[-1] == "bi", str(s)
    assert f"min({block}, " in str(s) and "O_acc[bi]" in str(s), str(s)
    f = tex.compile(s)
    rng = np.random.default_rng(8)
    for shape in [(1, 1, 1), (7, 3, 65), (2, 63, block + 1), (3, 5, 1000)]:
        x = rng.standard_normal(shape).astype(np.float32)
        want = getattr(np, combiner)(x, axis=1).T
        got = f(x)
        if combiner == "sum":
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        else:
            np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(f(x[:, :, ::-1]).shape, want.shape)


@pytest.mark.parametrize("cpu", [None, ZEN3], ids=["host", "zen3"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("combiner", ["max", "min"])
def test_auto_row_max_and_min_take_vector_accumulators_on_long_rows(combiner, dtype, cpu):
    """s.auto() gives a float row max/min the vector accumulator in a specialization for
    rows of one pass of it or more (W x U elements) with many rows, or rows too short for
    split-K's parts; other calls keep split-K (the two cannot be combined). Every
    specialization matches numpy exactly, NaNs, infinities and views included."""
    from tex.scheduler.auto_nest import MANY_ROWS, ONE_PART_LENGTH
    from tex.scheduler.strategies import accumulator_span
    from contextlib import nullcontext
    i, j = tex.indices("i j")
    X = tex.tensor("X", (M, N), dtype)
    S = tex.compute("S", (i,), getattr(tex, combiner)(X[i, j], over=j))
    with overriding(cpu) if cpu else nullcontext():
        span = accumulator_span(S)
        s = tex.schedule(S)
        s.auto()
        f = tex.compile(s)
    text = str(s)
    assert f"if N >= {span} and (M >= {MANY_ROWS} or N < {ONE_PART_LENGTH}):" in text
    assert text.count("S_parts") > 0 and "vector (peel tail)" in text
    rng = np.random.default_rng(11)
    for rows, n in [(1, 1), (5, 7), (70, span - 1), (70, span), (3, span + 1), (70, 1000),
                    (2, 5000), (64, 4100)]:
        x = rng.standard_normal((rows, 2 * n)).astype(dtype)
        x[rows // 2, 2 * (n - 1)] = np.nan if rows > 1 else x[0, 0]   # the view's last column
        x[0, 0] = np.inf
        view = x[:, ::2]                    # rows with a stride of two
        want = getattr(np, combiner)(view, axis=1)
        assert np.array_equal(f(view), want, equal_nan=True), (rows, n)
        assert np.array_equal(f(np.ascontiguousarray(view)), want, equal_nan=True), (rows, n)


def test_auto_max_over_several_indices_keeps_split_k_for_few_long_rows():
    """A max over (j, k) checks split-K's shape on its outermost reduced index (the one
    split-K divides): few rows of many j keep the parts even when k is short."""
    R, J, L = tex.sizes("R J L")
    i, j, k = tex.indices("i j k")
    X = tex.tensor("X", (R, J, L), "float32")
    S = tex.compute("S", (i,), tex.max(X[i, j, k], over=(j, k)))
    s = tex.schedule(S)
    s.auto()
    assert "(R >= 64 or J < 2048)" in str(s)
    f = tex.compile(s)
    rng = np.random.default_rng(12)
    for shape in [(1, 3000, 100), (70, 5, 64), (2, 7, 65), (1, 1, 1)]:
        x = rng.standard_normal(shape).astype(np.float32)
        assert np.array_equal(f(x), x.max(axis=(1, 2))), shape


def test_row_sums_build_the_split_k_parts_only_for_calls_that_some_thread_count_splits():
    """auto_nest.auto_split_k: a row sum's parts nest is a specialization for a reduction of
    at least 2048 with rows < 4 floor(length / 1024) (where AUTO_PARTS gives some thread
    count more than one part), so a first build for a square call leaves it out; a call
    with few long rows builds it and runs it in four parts a thread on 2 threads; every
    call agrees with numpy, each nest at its edges (2047 | 2048 long, 4 rows a
    1024-block)."""
    from tex.backends.llvm import codegen, runtime
    from tex.bench.linalg import auto_parts
    from tex.scheduler.ir import Loop, walk
    i, j = tex.indices("i j")
    X = tex.tensor("X", (M, N), "float32")
    Y = tex.compute("Y", (i,), tex.sum(X[i, j], over=j))
    f = runtime.compile(Y, sizes={M: 256, N: 256})
    parted = {n for n, g in enumerate(codegen.choices(f.kernel))
              if any(isinstance(x, Loop) and "Y_parts" in str(x.extent) for x in walk(g))}
    assert len(parted) == 1 and parted <= f._sig.built.deferred, f.loop_nest
    threads = tex.get_num_threads()
    tex.set_num_threads(2)
    try:
        assert auto_parts(f, {"M": 3, "N": 65536}) == 8
        assert auto_parts(f, {"M": 256, "N": 256}) == 1
        rng = np.random.default_rng(11)
        for m, n in [(256, 256), (3, 65536), (7, 2047), (7, 2048), (8, 2048), (9, 3072),
                     (1, 1), (0, 5000), (1000, 3000)]:
            x = rng.standard_normal((m, n)).astype(np.float32)
            want = x.astype(np.float64).sum(axis=1)
            np.testing.assert_allclose(f(x), want, rtol=1e-4, atol=1e-3 * math.sqrt(n))
        assert not f._sig.deferred & parted          # (3, 65536) built the parts nest
    finally:
        tex.set_num_threads(threads)


def test_parts_possible_holds_where_some_thread_count_splits():
    """auto_nest.parts_possible (the condition of split-K's specializations) holds at a
    (rows, length) whenever runtime.AUTO_PARTS gives more than one part to some thread
    count tex allows (a call outside it never needs the parts' nest), and otherwise only
    at rows that would need more threads than that."""
    import tex.symbolic as sp
    from tex.backends.llvm.calls import MAX_THREADS
    from tex.backends.llvm.runtime import AUTO_PARTS
    from tex.scheduler.auto_nest import parts_possible
    lengths = [0, 1, 1023, 1024, 2047, 2048, 2049, 3071, 3072, 4096, 5000, 65536, 300000]
    for rows in [0, 1, 3, 4, 5, 7, 8, 9, 11, 12, 15, 16, 63, 64, 100, 1000, 1023, 1024]:
        for length in lengths:
            some = any(eval(AUTO_PARTS.format(t=t, rows=rows, length=length)) > 1  # noqa: S307
                       for t in range(1, MAX_THREADS + 1))
            held = parts_possible(sp.Integer(rows), sp.Integer(length))
            assert held in (sp.true, sp.false)
            assert held is sp.true if some else (held is sp.false or rows >= 4 * MAX_THREADS), \
                (rows, length, held, some)


def test_a_totals_parts_are_built_where_some_thread_count_splits_it():
    """A total's (a scalar's) parts are a specialization for a megabyte of terms or more
    (auto_nest.TOTAL_PARTS_MIN_BYTES), exactly where runtime.STREAM_PARTS gives some
    thread count more than one part, in a loop or not."""
    import tex.symbolic as sp
    from tex.backends.llvm.calls import MAX_THREADS
    from tex.backends.llvm.runtime import STREAM_PARTS
    from tex.scheduler.auto_nest import TOTAL_PARTS_MIN_BYTES
    from tex.expr import at_least
    for block in (1, 2, 4, 8, 12, 16):
        for length in [0, 1, 2048, 65535, 65536, 87381, 131071, 131072, 262144, 1 << 20,
                       10 ** 7]:
            some = any(eval(STREAM_PARTS.format(t=t, rows=1, length=length, block=block),  # noqa: S307
                            {"_looping": lambda t, looping=looping: looping}) > 1
                       for t in range(1, MAX_THREADS + 1) for looping in (False, True))
            held = at_least(sp.Integer(length * block), TOTAL_PARTS_MIN_BYTES)
            assert held is (sp.true if some else sp.false), (block, length, held)


@pytest.mark.parametrize("n", [65536, 262_145, 1_000_003])
def test_a_dot_product_sums_right_in_parts_on_any_thread_count(n):
    """`i,i->` of 2 x 4 x 262145 bytes or more takes the parts' nest (of 2 x 4 x 65536,
    the plain one): against float64 on 1, 2 and 3 threads."""
    rng = np.random.default_rng(n)
    x, y = rng.standard_normal((2, n)).astype(np.float32)
    f = tex.compile(tex.einsum_program("i,i->", x, y))
    want = np.dot(x.astype(np.float64), y.astype(np.float64))
    before = tex.get_num_threads()
    try:
        for threads in (1, 2, 3):
            tex.set_num_threads(threads)
            np.testing.assert_allclose(float(f(op0=x, op1=y)), want, rtol=1e-5,
                                       atol=1e-5 * n ** 0.5)
    finally:
        tex.set_num_threads(before)


@pytest.mark.parametrize("cpu", [None, "znver3"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_auto_float_row_sums_use_the_vector_accumulator_from_256_and_sum_in_its_order(
        cpu, dtype):
    """auto_nest.row_accumulators: a float row sum (`ij->i`, and a row dot product)
    takes the vector accumulator on rows of SUM_MIN_LENGTH or more and keeps LLVM's loop
    below; the accumulator's code has no fast-math flags (ops.vector_flags: tex's lanes,
    accumulators and horizontal tree are the order, at any optimization level), so its
    first call is tiered; lengths around the threshold and every pass, strided and
    transposed rows, against numpy."""
    from tex.backends.llvm import tiers
    from tex.scheduler.auto_nest import SUM_MIN_LENGTH
    i, j = tex.indices("i j")
    X = tex.tensor("X", (M, N), dtype)
    Y = tex.tensor("Y", (M, N), dtype)
    rows = tex.compute("S", (i,), tex.sum(X[i, j], over=j))
    dots = tex.compute("D", (i,), tex.sum(X[i, j] * Y[i, j], over=j))
    rng = np.random.default_rng(3)
    for program, operands in [(rows, 1), (dots, 2)]:
        with overriding(target() if cpu is None else ZEN3):
            text = str(tex.schedule(program).auto())
            f = tex.compile(program)
        first = text.split("\nelif")[0]
        assert f"\nif N >= {SUM_MIN_LENGTH} and" in first and \
            "local buffer in registers" in first, text
        f(*[np.ones((7, 1000), dtype)] * operands)       # builds the accumulator's nest
        assert tiers.same_values(f._sig.built.make_ir()), program.name
        for n in (SUM_MIN_LENGTH - 1, SUM_MIN_LENGTH, SUM_MIN_LENGTH + 1, 1000, 4097):
            for _ in range(2):
                big = [rng.standard_normal((7, 2 * n + 3)) for _ in range(operands)]
                for view in (lambda a: a[:, :n], lambda a: a[:, 1:2 * n + 1:2],
                             lambda a: np.asfortranarray(a[:, :n])):
                    args = [view(a).astype(dtype) for a in big]
                    want = np.prod([a.astype(np.float64) for a in args], axis=0).sum(axis=1)
                    eps = np.finfo(dtype).eps
                    np.testing.assert_allclose(f(*args), want, rtol=0,
                                               atol=8 * eps * n ** 0.5 * max(1, abs(want).max()))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_float_sums_of_every_strategy_carry_no_fast_math_flags(strategy):
    """ops.vector_flags: the sums (and row dot products, as explicit FMAs, also in the
    scalar remainder: vector.fused_product) of every strategy's vector code, its peeled
    remainder and its loop for strided rows have no fast-math flags, so quick and
    optimized code agree (tiers.same_values); against numpy on contiguous and strided
    rows."""
    from tex.backends.llvm import tiers
    i, j = tex.indices("i j")
    X, Y = tex.tensor("X", (M, N), "float32"), tex.tensor("Y", (M, N), "float32")
    rng = np.random.default_rng(5)
    for body, operands in [(X[i, j], 1), (X[i, j] * Y[i, j], 2)]:
        S = tex.compute("S", (i,), tex.sum(body, over=j))
        s = tex.schedule(S)
        s[S].reduction_strategy(strategy)
        f = tex.compile(s)
        for view in (lambda a: a[:, :301], lambda a: a[:, ::2]):
            args = [view(rng.standard_normal((33, 603)).astype(np.float32))
                    for _ in range(operands)]
            want = np.prod([a.astype(np.float64) for a in args], axis=0).sum(axis=1)
            np.testing.assert_allclose(f(*args), want, rtol=0, atol=1e-4 * max(1, abs(want).max()))
            ir = f._sig.built.make_ir()
            assert tiers.same_values(ir), (strategy, body)
            # a product is an FMA in the scalar remainder too, as in the vector lanes
            assert not (target().has("fma") and "fmul float" in ir), (strategy, body)
