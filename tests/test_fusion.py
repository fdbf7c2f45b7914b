"""Fusion across definitions (schedule/fusion.py, epilogue.py, rewrite.py): each fusion
against numpy and against the unfused program (`tex.compile(out, fuse=False)`) on sizes
no tile divides, with the fused intermediate absent from `f.buffers`; programs that must
not fuse, and the printed reason; the user's `s.fuse` / `s.unfuse`; a fuzzer over random
DAGs of a contraction and its consumers."""
import pickle

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import tex
from isolate import in_child
from tex.backends import numpy_ref

M, N, K = tex.sizes("M N K")
SHAPES = [(1, 1, 1), (7, 65, 257), (65, 7, 1), (257, 1000, 7), (1000, 65, 65), (6, 16, 3)]


def _ops(dtype="float32"):
    i, j, k = tex.indices("i j k")
    A = tex.tensor("A", (M, K), dtype)
    B = tex.tensor("B", (K, N), dtype)
    bias = tex.tensor("bias", (N,), dtype)
    C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))
    return i, j, k, A, B, bias, C


def _programs(dtype):
    i, j, k, A, B, bias, C = _ops(dtype)
    X = tex.tensor("X", (M, N), dtype)
    relu = tex.compute("Relu", (i, j), tex.relu(C[i, j] + bias[j]))
    return {
        "rowmax": tex.compute("R", (i,), tex.max(C[i, j], over=j)),
        "rowmin_of_relu": tex.compute("Rn", (i,), tex.min(relu[i, j], over=j)),
        "colsum_weighted": tex.compute("Sw", (j,), tex.sum(C[i, j] * X[i, j], over=i)),
        "argmax": tex.compute("Am", (i,), tex.argmax(C[i, j] + bias[j], over=j)),
        "argmin_cols": tex.compute("An", (j,), tex.argmin(C[i, j], over=i)),
        "bias_transpose": tex.compute("T", (j, i), C[i, j] + bias[j]),
        "gelu_of_sum": tex.compute("E", (i, j), tex.gelu(
            tex.sum(A[i, k] * B[k, j], over=k), approximate="tanh")),
        "rowsum": tex.compute("Srow", (i,), tex.sum(C[i, j], over=j)),
        # a transcendental epilogue feeding a fused reduction (softmax's row sums)
        "rowsum_of_exp": tex.compute("Se", (i,), tex.sum(tex.exp(0.01 * C[i, j]), over=j)),
    }


def _arrays(program, shape, rng, dtype):
    m, n, kk = shape
    sizes = {"M": m, "N": n, "K": kk}
    out = []
    for t in program.inputs:
        dims = tuple(sizes[str(d)] for d in t.shape)
        out.append(rng.standard_normal(dims).astype(dtype))
    return out


def _allocated(f):
    return {b.name for b in f.buffers}


def _close(got, want, dtype, k):
    if want.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want)
    else:
        tol = (2e-4 if dtype == "float32" else 1e-10) * max(1, k)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(_programs("float32")))
def test_fusion_matches_numpy_and_the_unfused_program(name, dtype):
    out = _programs(dtype)[name]
    fused, unfused = tex.compile(out), tex.compile(out, fuse=False)
    assert "C" in _allocated(unfused) or "E_sum0" in _allocated(unfused)
    assert not _allocated(fused) & {"C", "E_sum0", "Relu"}, fused.buffers
    rng = np.random.default_rng(1)
    before = tex.get_num_threads()
    for threads in (1, 3):
        tex.set_num_threads(threads)
        try:
            for shape in SHAPES:
                arrays = _arrays(fused.program, shape, rng, dtype)
                want = numpy_ref.evaluate(unfused.program, arrays)[0]
                got = fused(*arrays)
                if name.startswith("arg"):
                    # ties between equal products may pick either: compare the values
                    c = arrays[0] @ arrays[1] if fused.program.inputs[0].name == "A" else None
                    if c is not None and np.unique(c).size == c.size:
                        np.testing.assert_array_equal(got, want)
                    np.testing.assert_array_equal(got, unfused(*arrays))
                else:
                    _close(got, want, dtype, shape[2])
                    _close(unfused(*arrays), want, dtype, shape[2])
        finally:
            tex.set_num_threads(before)


def test_a_transcendental_epilogue_runs_rolled_on_a_copy_of_the_tile():
    """gelu's tanh on a register tile: the tile is copied out after the k loop and the
    epilogue runs one row at a time (unrolled, the polynomial constants held registers
    through the micro-kernel and its accumulators spilled); an epilogue without one
    (a max) stays unrolled on the accumulators."""
    progs = _programs("float32")
    gelu = tex.compile(progs["gelu_of_sum"]).loop_nest
    assert "E_sum0_tile[iii, jii] = E_sum0_acc[iii, jii]" in gelu
    epilogue = gelu[gelu.index("E_sum0_tile[iii, jii] = "):]
    assert re.search(r"for iii in 0\.\.6:\n", epilogue) and "tanh(" in epilogue
    assert "_tile" not in tex.compile(progs["rowmax"]).loop_nest


def test_argmax_ties_go_to_the_first_position_like_numpy():
    i, j, k, A, B, bias, C = _ops()
    Am = tex.compute("Am", (i,), tex.argmax(C[i, j], over=j))
    f = tex.compile(Am)
    assert "C" not in _allocated(f)
    a = np.ones((9, 3), np.float32)
    b = np.zeros((3, 300), np.float32)
    b[:, [5, 17, 250]] = 1.0                 # three equal maxima per row, in three lanes
    np.testing.assert_array_equal(f(a, b), np.full(9, 5))
    b[:, 200] = np.nan                       # numpy: the first NaN wins
    np.testing.assert_array_equal(f(a, b), (a @ b).argmax(1))
    # equal maxima (and NaNs) in the same lane of different vectors of one register
    # tile, which the epilogue folds into one vector of partials (stage._fold_lanes)
    b = np.zeros((3, 300), np.float32)
    b[:, [19, 3, 67]] = 1.0
    np.testing.assert_array_equal(f(a, b), np.full(9, 3))
    b[:, [50, 34]] = np.nan
    np.testing.assert_array_equal(f(a, b), np.full(9, 34))


@pytest.mark.parametrize("cpu", [None, "haswell"])
def test_a_reduction_over_columns_deals_the_column_blocks_in_parts(cpu):
    """A consumer reducing over j keeps its lane partials per part of the column blocks
    (epilogue.privatize_parts), so the threads share the column blocks in one parallel
    region: `R_lanes[C_column_parts, M, W]`, up to four parts a thread when each gets four blocks.
    Max, min and argmax (ties, NaN) against numpy on 1 to 3 threads, sizes no block
    divides, strided operands; part counts of 1 (few blocks, or uneven ones), 2 and 3."""
    from tex.backends.llvm.calls import thread_parts
    from tex.scheduler import target as targets
    i, j, k, A, B, bias, C = _ops()
    progs = {"max": tex.compute("R", (i,), tex.max(C[i, j], over=j)),
             "min": tex.compute("Rn", (i,), tex.min(C[i, j] + bias[j], over=j)),
             "argmax": tex.compute("Am", (i,), tex.argmax(C[i, j], over=j))}
    t = targets.target() if cpu is None else targets.named(cpu, targets.host().caches)
    rng = np.random.default_rng(11)
    before = tex.get_num_threads()
    try:
        with targets.overriding(t):
            for name, out in progs.items():
                f = tex.compile(out)
                assert re.search(r"for \w+ in 0\.\.C_column_parts:  # parallel", f.loop_nest)
                lanes = [b for b in f.buffers if b.name.endswith("_lanes")]
                assert [str(b.shape[0]) for b in lanes] == ["C_column_parts"], f.buffers
                # the rule's part counts: at 1792 columns 4 on the host (28 blocks of
                # 64: 7 a part) and 8 on AVX2 (16 of 112), 2 and 3 at 2049 on the host,
                # 1 at 100
                parts = next(p for p in f.kernel.params if getattr(p, "rule", "") == "threads")
                # (750 on the host: 8 parts of 2 blocks for 12 blocks, the last two empty)
                for m, kk, n in [(7, 5, 1000), (65, 33, 2049), (13, 3, 100), (9, 4, 1792),
                                 (5, 3, 750)]:
                    if n == 1792:          # 1 part while the CPUs are crowded
                        assert [thread_parts(2, m * kk, n, parts.block, lambda: c)
                                for c in (0, 1)] == [{64: 4, 112: 8}[parts.block], 1]
                    a = rng.integers(-2, 3, (m, kk)).astype(np.float32)   # ties
                    b = rng.integers(-2, 3, (kk, 2 * n)).astype(np.float32)[:, ::2]
                    bias = rng.integers(-2, 3, n).astype(np.float32)
                    if m > 3:
                        a[3, 0] = np.nan
                    c = a @ b
                    want = {"max": lambda: c.max(1), "min": lambda: (c + bias).min(1),
                            "argmax": lambda: c.argmax(1)}[name]()
                    for threads in (1, 2, 3):
                        tex.set_num_threads(threads)
                        got = f(a, b, bias) if name == "min" else f(a, b)
                        np.testing.assert_array_equal(got, want)
    finally:
        tex.set_num_threads(before)


def test_a_parallel_loop_over_a_reduced_index_is_kept_apart_or_refused():
    """A user's parallel loop over the columns of a fused row max: the lanes are kept
    per part (a part count bounded over the loops around it: the panels of a column
    block), and the results are right; a second parallel loop the lanes do not move
    with (a total max over i and j) is refused by name, not run racing."""
    i, j, k, A, B, bias, C = _ops()
    R = tex.compute("R", (i,), tex.max(C[i, j], over=j))
    def columns_in_blocks():
        s = tex.schedule(R)
        s.fuse(R, into=C)
        s[C].split("j", 64)
        s[C].split("ji", 16, tail="guard")
        s[C].reorder("jo", "i", "jio", "k", "jii")
        s[C].vectorize("jii", tail="mask")
        s[C].pack(B, "jo", layout="loops")
        return s
    s = columns_in_blocks()
    s[C].parallel("jo")                       # the lanes get jo as their first index
    f = tex.compile(s)
    assert [str(b.shape[0]) for b in f.buffers if b.name == "R_lanes"] == \
        ["Max(1, ceiling(N/64))"], f.buffers
    rng = np.random.default_rng(2)
    a = rng.standard_normal((9, 5)).astype(np.float32)
    b = rng.standard_normal((5, 700)).astype(np.float32)
    np.testing.assert_array_equal(f(a, b), (a @ b).max(1))
    T = tex.compute("T", (), tex.max(C[i, j], over=(i, j)))
    s = tex.schedule(T).auto()
    with pytest.raises(tex.ScheduleError,
                       match=r"T reduces over i, j in C's epilogue, but C's loop (joo|io) runs"):
        s["C#1"].parallel("io")              # the blocked specialization's row blocks
    s = columns_in_blocks()
    s[C].parallel("jio")          # extent ceiling(Min(64, N - 64*jo)/16): 4 parts at most
    f = tex.compile(s)
    assert [str(b.shape[0]) for b in f.buffers if b.name == "R_lanes"] == ["4"], f.buffers
    np.testing.assert_array_equal(f(a, b), (a @ b).max(1))


def test_empty_reduced_range_raises_like_numpy():
    i, j, k, A, B, bias, C = _ops()
    f = tex.compile(tex.compute("R", (i,), tex.max(C[i, j], over=j)))
    with pytest.raises(ValueError, match="zero-size array"):
        f(np.ones((3, 2), np.float32), np.ones((2, 0), np.float32))


def test_geglu_is_two_slices_sharing_a():
    """G = gelu(C[:, :h]) * C[:, h:]: one nest computes both halves of B's product,
    and C is never stored."""
    i, j, k, A, B, bias, C = _ops()
    rng = np.random.default_rng(2)
    for h in (40, 96):
        G = tex.compute("G", (i, j), tex.gelu(C[i, j], approximate="tanh") * C[i, j + h])
        s = tex.schedule(G).auto()
        assert "C as 2 slices" in str(s)
        f = tex.compile(s)
        assert "C" not in _allocated(f)
        for m, kk, n in [(7, 65, 2 * h), (65, 3, 2 * h + 5), (1, 1, 2 * h), (33, 17, 2 * h - 9)]:
            a = rng.standard_normal((m, kk)).astype(np.float32)
            b = rng.standard_normal((kk, n)).astype(np.float32)
            c = a.astype(np.float64) @ b
            left = c[:, :n - h]
            want = 0.5 * left * (1 + np.tanh(0.7978845608028654 * (left + 0.044715 * left**3)))
            np.testing.assert_allclose(f(a, b), want * c[:, h:], rtol=1e-4, atol=1e-4 * kk)


def test_slices_along_rows():
    i, j, k, A, B, bias, C = _ops()
    P = tex.compute("P", (i, j), C[i, j] * C[i + 32, j])
    s = tex.schedule(P).auto()
    assert "C as 2 slices" in str(s)
    f = tex.compile(s)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((64, 9)).astype(np.float32)
    b = rng.standard_normal((9, 70)).astype(np.float32)
    c = a @ b
    np.testing.assert_allclose(f(a, b), c[:32] * c[32:], rtol=1e-4, atol=1e-4)


def test_common_definitions_are_computed_once():
    i, j, k, A, B, bias, C = _ops()
    C2 = tex.compute("C2", (i, j), tex.sum(A[i, k] * B[k, j], over=k))
    E = tex.compute("E", (i, j), C[i, j] - C2[i, j] + 1)
    s = tex.schedule((E, C2)).auto()
    assert any("computes what" in note for note in s.rewrites)
    f = tex.compile(s)
    a = np.random.default_rng(4).standard_normal((9, 5)).astype(np.float32)
    b = np.random.default_rng(5).standard_normal((5, 33)).astype(np.float32)
    e, c2 = f(a, b)
    np.testing.assert_allclose(e, np.ones_like(e))
    np.testing.assert_allclose(c2, a @ b, rtol=1e-5, atol=1e-5)
    # the gelu of a sum uses the sum five times: one contraction, fused
    E5 = _programs("float32")["gelu_of_sum"]
    assert [d.name for d in tex.schedule(E5).program.definitions] == ["E_sum0", "E"]


def test_a_sum_over_the_output_moves_inside_the_contraction():
    i, j, k, A, B, bias, C = _ops()
    S = tex.compute("Srow", (i,), tex.sum(C[i, j], over=j))
    s = tex.schedule(S).auto()
    assert "C is not computed" in str(s)
    names = {d.name for d in s.program.definitions}
    assert "C" not in names and "Srow" in names
    with pytest.raises(tex.ScheduleError, match="C is not computed"):
        s[C]
    # not when C is read elsewhere, or the sum is not reassociable
    R = tex.compute("R", (i,), tex.max(C[i, j], over=j))
    assert "C" in {d.name for d in tex.schedule((S, R)).auto().program.definitions}
    S_exact = tex.compute("Sx", (i,), tex.sum(C[i, j], over=j, fast_math=False))
    assert "C" in {d.name for d in tex.schedule(S_exact).auto().program.definitions}


# ---------------------------------------------------------------- must not fuse

def test_neighbouring_offsets_do_not_fuse_and_say_why():
    i, j, k, A, B, bias, C = _ops()
    D = tex.compute("D", (i, j), C[i, j + 1] - C[i, j])
    s = tex.schedule(D).auto()
    text = str(s)
    assert "# not fused: D into C" in text and "neighbouring offsets" in text
    f = tex.compile(s)
    a = np.random.default_rng(6).standard_normal((7, 5)).astype(np.float32)
    b = np.random.default_rng(7).standard_normal((5, 20)).astype(np.float32)
    c = a @ b
    np.testing.assert_allclose(f(a, b), c[:, 1:] - c[:, :-1], rtol=1e-5, atol=1e-5)


def test_a_transposed_second_read_does_not_fuse():
    i, j, k, A, B, bias, C = _ops()
    A2 = tex.tensor("A2", (M, M), "float32")
    Sq = tex.compute("Sq", (i, j), tex.sum(A2[i, k] * A2[k, j], over=k))
    Sym = tex.compute("Sym", (i, j), Sq[i, j] + Sq[j, i])
    s = tex.schedule(Sym).auto()
    assert "not fused: Sym into Sq" in str(s)
    a = np.random.default_rng(8).standard_normal((13, 13)).astype(np.float32)
    sq = a @ a
    np.testing.assert_allclose(tex.compile(s)(a), sq + sq.T, rtol=1e-5, atol=1e-5)


def test_a_consumer_never_sees_a_partial_sum():
    """k blocked outside the register tile accumulates C in memory: fusing is refused;
    split into private parts, the merge comes first and the fusion holds."""
    i, j, k, A, B, bias, C = _ops()
    R = tex.compute("R", (i,), tex.max(C[i, j], over=j))
    s = tex.schedule(R)
    ko, ki = s[C].split(k, 8)
    s[C].reorder(ko, i, j, ki)
    with pytest.raises(tex.ScheduleError, match="never sees a partial result"):
        s.fuse(R)
    s = tex.schedule(R)
    s[C].split_k(k, 3)
    s.fuse(R)
    f = tex.compile(s)
    assert "C" not in _allocated(f)
    rng = np.random.default_rng(9)
    for m, kk, n in [(7, 65, 9), (1, 1, 1), (20, 100, 3)]:
        a = rng.standard_normal((m, kk)).astype(np.float32)
        b = rng.standard_normal((kk, n)).astype(np.float32)
        np.testing.assert_allclose(f(a, b), (a @ b).max(1), rtol=1e-5, atol=1e-4)


def test_user_fusion_keeps_the_producers_schedule_or_refuses():
    i, j, k, A, B, bias, C = _ops()
    R = tex.compute("R", (i,), tex.max(C[i, j], over=j))
    s = tex.schedule(R)
    io, ii = s[C].split(i, 4)
    s[C].parallel(io)
    s.fuse(R)
    assert "for io in" in str(s) and "# C: R (max over j) in its epilogue" in str(s)
    with pytest.raises(tex.ScheduleError, match="runs in C's epilogue"):
        s[R].split(i, 2)
    with pytest.raises(tex.ScheduleError, match="two threads would combine"):
        s[C].parallel(j)
    s.unfuse(R)
    s[R].parallel(i)
    assert "R" not in str(s).split("\n")[0]
    t = tex.schedule(R)
    t[R].split(i, 2)
    with pytest.raises(tex.ScheduleError, match="has a schedule of its own"):
        t.fuse(R)


def test_fused_schedules_replay_and_pickle():
    i, j, k, A, B, bias, C = _ops()
    G = tex.compute("G", (i, j), tex.gelu(C[i, j], approximate="tanh") * C[i, j + 16])
    s = tex.schedule(G).auto()
    again = tex.schedule(G).replay(s.history_json())
    assert str(again) == str(s)
    f = tex.compile(s)
    g = pickle.loads(pickle.dumps(f))
    a = np.random.default_rng(10).standard_normal((8, 4)).astype(np.float32)
    b = np.random.default_rng(11).standard_normal((4, 40)).astype(np.float32)
    np.testing.assert_array_equal(f(a, b), g(a, b))


# ---------------------------------------------------------------- fuzzer

UNARY = {"relu": tex.relu, "tanh": tex.tanh, "neg": lambda x: -x, "sq": lambda x: x * x}


@st.composite
def dags(draw):
    """A contraction C (operands maybe transposed), then a chain of consumers: an
    elementwise op (maybe with a bias along either axis, maybe stored transposed), a
    reduction over one or both axes, or GEGLU-like slices."""
    i, j, k = tex.indices("i j k")
    A = tex.tensor("A", (M, K) if draw(st.booleans()) else (K, M), "float32")
    B = tex.tensor("B", (K, N), "float32")
    a_read = A[i, k] if A.shape[0] is M else A[k, i]
    C = tex.compute("C", (i, j), tex.sum(a_read * B[k, j], over=k))
    node, idx = C, (i, j)
    for n in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["unary", "bias", "transpose", "reduce", "slices"]))
        if len(idx) < 2 and kind in ("transpose", "slices", "bias"):
            kind = "unary"
        read = node[idx]
        name = f"D{n}"
        if kind == "unary":
            f = UNARY[draw(st.sampled_from(sorted(UNARY)))]
            node = tex.compute(name, idx, f(read))
        elif kind == "bias":
            v = tex.tensor(f"v{n}", (N,), "float32")
            node = tex.compute(name, idx, read * 0.5 + v[j])
        elif kind == "transpose":
            idx = idx[::-1]
            node = tex.compute(name, idx, read + 1.0)
        elif kind == "slices":
            shifted = [x + 16 if x is j else x for x in idx]
            node = tex.compute(name, idx, read * node[tuple(shifted)])
        else:
            comb = draw(st.sampled_from(["sum", "max", "min", "argmax"]))
            over = draw(st.sampled_from([(x,) for x in idx] + [tuple(idx)]))
            if comb == "argmax" and len(over) > 1:
                over = over[:1]
            keep = tuple(x for x in idx if x not in over)
            node = tex.compute(name, keep, getattr(tex, comb)(read, over=over))
            idx = keep
            if comb == "argmax" or not idx:
                break
    shape = draw(st.sampled_from([(7, 50, 5), (1, 49, 1), (13, 70, 17), (6, 64, 64)]))
    return node, shape


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=dags(), seed=st.integers(0, 3))
@in_child
def test_random_dags_match_the_reference(case, seed):
    out, (m, n, kk) = case
    f = tex.compile(out)
    program = f.program
    rng = np.random.default_rng(seed)
    sizes = {"M": m, "N": n, "K": kk}
    arrays = [rng.standard_normal(tuple(sizes[str(d)] for d in t.shape)).astype(t.dtype)
              for t in program.inputs]
    want = numpy_ref.evaluate(program, arrays)[0]
    got = f(*arrays)
    if want.dtype.kind in "iu":            # argmax: compare the values it picks
        unfused = tex.compile(out, fuse=False)(*arrays)
        np.testing.assert_array_equal(got, unfused)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * max(1, np.abs(want).max()))


def test_a_normalization_keeps_its_rows_and_says_why_it_does_not_fuse():
    """LayerNorm: the mean and variance are reductions fused with their division (the
    merge of split rows); the normalized output reads them broadcast along j, which
    would recompute them per element: not fused, and each reason says that."""
    R, D = tex.sizes("R D")
    i, j = tex.indices("i j")
    X = tex.tensor("X", (R, D), "float32")
    mu = tex.compute("mu", (i,), tex.mean(X[i, j], over=j))
    var = tex.compute("var", (i,), tex.mean((X[i, j] - mu[i]) ** 2, over=j))
    Y = tex.compute("Y", (i, j), (X[i, j] - mu[i]) / tex.sqrt(var[i] + 1e-5))
    s = tex.schedule(Y).auto()
    text = str(s)
    assert "# mu_sum0: mu (stored) in its epilogue" in text
    reasons = [line for line in text.splitlines() if line.startswith("# not fused")]
    assert reasons and all("would be recomputed" in r for r in reasons), reasons
    x = np.random.default_rng(12).standard_normal((33, 65)).astype(np.float32)
    m = x.mean(1, keepdims=True)
    want = (x - m) / np.sqrt(((x - m) ** 2).mean(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(tex.compile(s)(x), want, rtol=1e-4, atol=1e-4)


def test_a_sum_of_a_product_of_separate_factors_factorizes():
    """sum over (i, j) of A[i] * B[j] is sum(A) * sum(B): numpy's einsum("i,j->") path,
    and a 2**31 x 2**31 broadcast that could never be stored sums in seconds."""
    M_, N_ = tex.sizes("M N")
    i, j = tex.indices("i j")
    A1, B1 = tex.tensor("A", (M_,), "float64"), tex.tensor("B", (N_,), "float64")
    T = tex.compute("T", (i, j), A1[i] * B1[j])
    R = tex.compute("R", (), tex.sum(T[i, j], over=(i, j)))
    s = tex.schedule(R).auto()
    assert "T is not computed" in str(s)
    f = tex.compile(s)
    a, b = np.arange(7.0), np.arange(65.0) - 3
    np.testing.assert_allclose(f(a, b), np.einsum("i,j->", a, b))
    rows = tex.compute("Rr", (i,), tex.sum(T[i, j], over=j))      # A[i] * sum(B)
    np.testing.assert_allclose(tex.compile(rows)(a, b), np.outer(a, b).sum(1))
