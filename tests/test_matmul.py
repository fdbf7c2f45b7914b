"""Contractions on the blocked (BLIS-style) auto schedule, against numpy: every shape
class (square, tall, wide, prime, degenerate), every dtype, transposed and strided
operands, `out=`, batched and multi-operand einsums, random block sizes, and the
golden printout of the auto schedule of a 1024 matmul."""
import re
import time

import numpy as np
import tex.symbolic as sp
import pytest
from hypothesis import given, settings, strategies as st

import tex
from tex.scheduler import target as targets
from cpus import ZEN3, ZEN5
from isolate import in_child
from tex.scheduler.blocking import Blocking, block_contraction, contraction_roles

from kernels import compiled

M, N, K = tex.sizes("M N K")
EDGES = [1, 2, 3, 17, 64, 65, 127]
SHAPES = [(m, n, k) for m in EDGES for n in (1, 3, 65, 127) for k in (1, 2, 64, 65)] + \
    [(1000, 1000, 1000), (1000, 17, 3), (3, 1000, 127), (127, 65, 1000), (130, 200, 300)]


def matmul(dtype, acc=None):
    """C = A @ B; with `acc`, the operands are cast to it first (int8 x int8 -> int32)."""
    i, j, k = tex.indices("i j k")
    A, B = tex.tensor("A", (M, K), dtype), tex.tensor("B", (K, N), dtype)
    a, b = A[i, k], B[k, j]
    if acc is not None:
        a, b = a.astype(acc), b.astype(acc)
    return tex.compute("C", (i, j), tex.sum(a * b, over=k, dtype=acc))


def batched_matmul(dtype):
    """C[b] = A[b] @ B[b] over a batch of NB products."""
    nb, i, j, k = tex.indices("b i j k")
    NB = tex.sizes("NB")
    A = tex.tensor("A", (NB, M, K), dtype)
    B = tex.tensor("B", (NB, K, N), dtype)
    return tex.compute("C", (nb, i, j), tex.sum(A[nb, i, k] * B[nb, k, j], over=k))


def kernel(dtype, acc=None):
    return compiled(("blocked-matmul", dtype, acc), lambda: matmul(dtype, acc))


def operands(rng, m, n, k, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return (rng.standard_normal((m, k)).astype(dtype),
                rng.standard_normal((k, n)).astype(dtype))
    lo, hi = (-128, 128) if dtype.itemsize == 1 else (-1000, 1000)
    return rng.integers(lo, hi, (m, k)).astype(dtype), rng.integers(lo, hi, (k, n)).astype(dtype)


def expected(a, b, acc=None):
    if acc is not None:
        return a.astype(acc) @ b.astype(acc)
    if a.dtype.kind == "f":
        return (a.astype(np.float64) @ b.astype(np.float64)).astype(a.dtype)
    return a @ b


def target_named(cpu):
    """The Target of LLVM CPU name `cpu` with the host's caches (None: the current one)."""
    return targets.target() if cpu is None else targets.named(cpu, targets.host().caches)


def check(got, want, k):
    if want.dtype.kind == "f":
        eps = np.finfo(want.dtype).eps
        np.testing.assert_allclose(got, want, rtol=0, atol=8 * eps * max(k, 1) ** 0.5 *
                                   max(1.0, float(np.abs(want).max(initial=0))))
    else:
        np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype and got.shape == want.shape


def test_matmul_is_blocked_by_default():
    """The auto schedule of a contraction packs both operands, keeps a register tile
    and shares the blocks among threads."""
    text = str(tex.schedule(matmul("float32")).auto())
    assert "B_pack[" in text and "A_pack[" in text
    assert "C_acc[" in text and "# unrolled" in text and "# vector" in text
    assert "# parallel" in text


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_float32_shapes(m, n, k):
    a, b = operands(np.random.default_rng(m * 1000 + n * 10 + k), m, n, k, "float32")
    check(kernel("float32")(a, b), expected(a, b), k)


@pytest.mark.parametrize("dtype", ["float64", "int32", "int64"])
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (7, 65, 63), (65, 127, 17), (200, 130, 300)])
def test_other_dtypes(dtype, m, n, k):
    """Integer sums accumulate in int64, as numpy's sum does."""
    a, b = operands(np.random.default_rng(k), m, n, k, dtype)
    acc = np.int64 if dtype.startswith("int") else None
    check(kernel(dtype)(a, b), expected(a, b, acc), k)


@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (3, 64, 2), (65, 127, 17), (127, 200, 1000)])
def test_int8_into_int32(m, n, k):
    a, b = operands(np.random.default_rng(k), m, n, k, "int8")
    check(kernel("int8", "int32")(a, b), expected(a, b, np.int32), k)


@pytest.mark.parametrize("layout", ["a.T", "b.T", "both.T", "strided", "negative", "F"])
def test_transposed_and_strided_operands(layout):
    rng = np.random.default_rng(3)
    m, n, k = 67, 129, 71
    if layout == "a.T":
        a, b = rng.standard_normal((k, m)).astype(np.float32).T, \
            rng.standard_normal((k, n)).astype(np.float32)
    elif layout == "b.T":
        a, b = rng.standard_normal((m, k)).astype(np.float32), \
            rng.standard_normal((n, k)).astype(np.float32).T
    elif layout == "both.T":
        a, b = rng.standard_normal((k, m)).astype(np.float32).T, \
            rng.standard_normal((n, k)).astype(np.float32).T
    elif layout == "strided":
        a = rng.standard_normal((2 * m, 3 * k)).astype(np.float32)[::2, ::3]
        b = rng.standard_normal((k, 2 * n)).astype(np.float32)[:, 1::2]
    elif layout == "negative":
        a = rng.standard_normal((m, k)).astype(np.float32)[::-1]
        b = rng.standard_normal((k, n)).astype(np.float32)[:, ::-1]
    else:
        a = np.asfortranarray(rng.standard_normal((m, k)).astype(np.float32))
        b = np.asfortranarray(rng.standard_normal((k, n)).astype(np.float32))
    check(kernel("float32")(a, b), expected(a, b), k)


def test_out_argument_and_strided_out():
    rng = np.random.default_rng(4)
    a, b = operands(rng, 70, 90, 33, "float32")
    f = kernel("float32")
    out = np.full((70, 90), np.nan, np.float32)
    assert f(a, b, out=out) is out
    check(out, expected(a, b), 33)
    wide = np.full((70, 180), np.nan, np.float32)
    f(a, b, out=wide[:, ::2])
    check(wide[:, ::2], expected(a, b), 33)
    assert np.isnan(wide[:, 1::2]).all()          # nothing written between the columns


@pytest.mark.parametrize("spec,shapes", [
    ("bmk,bkn->bmn", [(5, 33, 17), (5, 17, 70)]),
    ("ik,jk->ij", [(40, 30), (50, 30)]),
    ("ki,kj->ij", [(30, 40), (30, 50)]),
    ("ijk,jkl->il", [(9, 7, 5), (7, 5, 66)]),
    ("bij,jk->bik", [(3, 20, 15), (15, 70)]),
    ("ij,jk,kl->il", [(20, 30), (30, 40), (40, 50)]),
    ("mk,kn->nm", [(40, 30), (30, 50)]),
])
def test_einsum_contractions(spec, shapes):
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    want = np.einsum(spec, *[x.astype(np.float64) for x in arrays])
    got = tex.einsum(spec, *arrays)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_contraction_roles():
    C = matmul("float32")
    roles = contraction_roles(C)
    assert (roles.i.name, roles.j.name, roles.k.name) == ("i", "j", "k")
    assert (roles.a.name, roles.b.name, roles.batch) == ("A", "B", ())
    i, j = tex.indices("i j")
    X = tex.tensor("X", (M, N), "float32")
    assert contraction_roles(tex.compute("S", (i,), tex.sum(X[i, j], over=j))) is None
    A, B = tex.tensor("A", (M, K), "float32"), tex.tensor("B", (K, N), "float32")
    k = tex.indices("k")
    assert contraction_roles(tex.compute("T", (i, j), tex.max(A[i, k] * B[k, j], over=k))) \
        is None


def test_float_sum_without_fast_math_is_not_blocked():
    """Blocking reassociates the sum over k (a register tile per KC block)."""
    i, j, k = tex.indices("i j k")
    A, B = tex.tensor("A", (M, K), "float32"), tex.tensor("B", (K, N), "float32")
    C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k, fast_math=False))
    assert "pack" not in str(tex.schedule(C).auto())


@settings(max_examples=24, deadline=None)
@given(mr=st.integers(1, 5), vectors=st.sampled_from([8, 16, 24, 32]),
       kc=st.integers(1, 40), mc=st.integers(1, 4), nc=st.integers(1, 3),
       m=st.sampled_from([1, 7, 40]), n=st.sampled_from([1, 9, 70]),
       k=st.sampled_from([1, 5, 81]), dtype=st.sampled_from(["float32", "float64", "int32"]))
@in_child
def test_random_block_sizes(mr, vectors, kc, mc, nc, m, n, k, dtype):
    """Any block sizes give numpy's result on any shape: tails everywhere (in a child
    process: a wrong tail may crash)."""
    C = matmul(dtype)
    s = tex.schedule(C)
    block_contraction(s[C], contraction_roles(C), Blocking(mr, vectors, kc, mr * mc, vectors * nc))
    a, b = operands(np.random.default_rng(m + n + k), m, n, k, dtype)
    acc = np.int64 if dtype.startswith("int") else None
    check(tex.compile(s)(a, b), expected(a, b, acc), k)


def test_history_replays_the_blocked_schedule():
    """The auto schedule's steps replay, the call-time part rule (AutoParts) included."""
    C = matmul("float32")
    s = tex.schedule(C).auto()
    again = tex.schedule(C).replay(s.history_json())
    assert str(again) == str(s)
    a, b = operands(np.random.default_rng(8), 40, 50, 30, "float32")
    check(tex.compile(again)(a, b), expected(a, b), 30)


def test_auto_parts_of_two_programs_stay_apart():
    """Two programs whose split parts share a name keep their own part rules."""
    C1 = matmul("float32")
    s1 = tex.schedule(C1).auto()
    b, i, j, k = tex.indices("b i j k")
    Bt = tex.sizes("Bt")
    X = tex.tensor("X", (Bt, M, K), "float32")
    Y = tex.tensor("Y", (Bt, K, N), "float32")
    C2 = tex.compute("C", (b, i, j), tex.sum(X[b, i, k] * Y[b, k, j], over=k))
    s2 = tex.schedule(C2).auto()
    x, y = operands(np.random.default_rng(9), 33, 20, 17, "float32")
    check(tex.compile(s1)(x, y), expected(x, y), 17)
    xs, ys = np.stack([x, x + 1]), np.stack([y, y - 1])
    got = tex.compile(s2)(xs, ys)
    np.testing.assert_allclose(got, xs @ ys, rtol=1e-4, atol=1e-4)


def test_an_operand_read_twice_is_not_blocked():
    i, j, k = tex.indices("i j k")
    A, B = tex.tensor("A", (M, K), "float32"), tex.tensor("B", (K, N), "float32")
    C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j] * B[k, j + 1], over=k))
    assert contraction_roles(C) is None
    a, b = operands(np.random.default_rng(10), 9, 8, 7, "float32")
    np.testing.assert_allclose(tex.compile(C)(a, b), a @ (b[:, :-1] * b[:, 1:]),
                               rtol=1e-4, atol=1e-4)


def test_fusing_into_a_specialized_stage_is_refused():
    """A producer computed inside one nest would be missing from the others."""
    i, j, k = tex.indices("i j k")
    A, B = tex.tensor("A", (M, K), "float32"), tex.tensor("B", (K, N), "float32")
    P = tex.compute("P", (i, k), A[i, k] * 2)
    C = tex.compute("C", (i, j), tex.sum(P[i, k] * B[k, j], over=k))
    s = tex.schedule(C).auto()
    with pytest.raises(tex.ScheduleError, match="has specialized schedules"):
        s.fuse(C, at=s[C].loops[0])


SHORT_EXTREMES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767)}


@pytest.mark.parametrize("cpu", [None, "znver3"])
@pytest.mark.parametrize("x,y", [("int8", "int8"), ("uint8", "int8"), ("uint8", "uint8"),
                                 ("int16", "int16"), ("int16", "uint8")])
def test_short_integer_products_summed_in_int32(cpu, x, y):
    """Products of 8- and 16-bit integers summed in int32 (an int8 matmul's register
    tile) run vpmaddwd, an int16 pair's product with one half zeroed: exact at the
    extremes (-128 * -128, 255 * 255, -32768 * -32768, sums that wrap as int32's do) at
    sizes no tile divides, on the host's code and on AVX2 code."""
    t = target_named(cpu)
    if targets.missing_here(t):
        pytest.skip(f"this host does not run {cpu}'s code")
    i, j, k = tex.indices("i j k")
    A, B = tex.tensor("A", (M, K), x), tex.tensor("B", (K, N), y)
    C = tex.compute("C", (i, j), tex.sum(A[i, k].astype("int32") * B[k, j].astype("int32"),
                                         over=k, dtype="int32"))
    with targets.overriding(t):
        f = tex.compile(C)
        rng = np.random.default_rng(3)
        for m, n, kk in [(1, 1, 1), (7, 65, 63), (65, 127, 17), (130, 200, 1000)]:
            a = rng.choice(SHORT_EXTREMES[x] + (0, 1, -1 if x != "uint8" else 2), (m, kk))
            b = rng.choice(SHORT_EXTREMES[y] + (0, 3), (kk, n))
            a, b = a.astype(x), b.astype(y)
            want = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)
            check(f(A=a, B=b), want, kk)
        # in the code the calls ran (f.llvm_ir would generate every nest's: 7 s a run)
        assert any("pmadd" in b.make_ir() for b in f._sig.builds)


def _paired_loops(kernel):
    """The loops of `kernel` (planned as the code generator plans it) whose steps the
    code generator runs two at a time (backends/llvm/pairs.py)."""
    from tex.backends.llvm.pairs import pairs_steps
    from tex.scheduler.ir import Loop, walk
    from tex.scheduler.vectorize import plan_vectors
    return [n for n in walk(plan_vectors(kernel)) if isinstance(n, Loop) and pairs_steps(n)]


@pytest.mark.parametrize("cpu", [None, "znver3"])
def test_short_product_tiles_pair_their_steps_of_k(cpu):
    """An int8 tile's reduction loops (every nest's: whole-K, blocked, edge tiles) run
    two steps of k a pmaddwd, the two steps' values in an int16 pair (pairs.py); a float
    tile's do not. Exact where the last step of k runs alone (odd K, K = 1: no pair at
    all) and on strided views, whose loads the pairs read at k and k + 1 alike."""
    t = target_named(cpu)
    if targets.missing_here(t):
        pytest.skip(f"this host does not run {cpu}'s code")
    i, j, k = tex.indices("i j k")

    def matmul(dtype, acc):
        A, B = tex.tensor("A", (M, K), dtype), tex.tensor("B", (K, N), dtype)
        body = A[i, k] * B[k, j] if acc is None else A[i, k].astype(acc) * B[k, j].astype(acc)
        return tex.compute("C", (i, j), tex.sum(body, over=k, dtype=acc))
    rng = np.random.default_rng(11)
    with targets.overriding(t):
        assert not _paired_loops(tex.schedule(matmul("float32", None)).auto().kernel())
        C = matmul("int8", "int32")
        assert len(_paired_loops(tex.schedule(C).auto().kernel())) >= 4
        f = tex.compile(C)
        for m, n, kk in [(1, 1, 1), (6, 64, 2), (13, 70, 3), (65, 7, 64), (130, 129, 1001)]:
            a = rng.integers(-128, 128, (m, 2 * kk), dtype=np.int8)[:, ::2]
            b = rng.integers(-128, 128, (kk, n + 3), dtype=np.int8)[:, 3:]
            want = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)
            check(f(A=a, B=b), want, kk)


@pytest.mark.parametrize("cpu", ["sapphirerapids", "alderlake"])
def test_vnni_cpus_sum_short_products_by_vpdpwssd(cpu):
    """On a CPU with VNNI (AVX-512's or AVX-VNNI), each product of the int8 tile and its
    add into the accumulator are one vpdpwssd (Target.codegen_features: +fast-dpwssd), not
    a vpmaddwd and a vpaddd, which LLVM's Intel tunings otherwise split them into: twice
    the uops. Only the assembly is read: the host need not run it. Sizes that no tile
    divides (the edge tiles' code too), known at compile time: a symbolic M, N, K gives
    every nest of the schedule, a module four to six times the size (3-4 s of LLVM)."""
    i, j, k = tex.indices("i j k")
    A, B = tex.tensor("A", (1000, 1001), "int8"), tex.tensor("B", (1001, 999), "int8")
    C = tex.compute("C", (i, j), tex.sum(A[i, k].astype("int32") * B[k, j].astype("int32"),
                                         over=k, dtype="int32"))
    with targets.overriding(targets.named(cpu)):
        asm = tex.compile(C).asm
    assert "vpdpwssd" in asm and "vpmaddwd" not in asm


@pytest.mark.parametrize("cpu", ["znver3", "znver5"])
def test_golden_auto_schedule_of_a_1024_matmul(cpu, golden):
    """For an AVX2 CPU with 16 vector registers and a 512 KiB L2 (Zen 3), and an AVX-512
    one with 32 registers and a 1 MiB L2 (Zen 5)."""
    i, j, k = tex.indices("i j k")
    A = tex.tensor("A", (1024, 1024), "float32")
    B = tex.tensor("B", (1024, 1024), "float32")
    C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))
    with targets.overriding({"znver3": ZEN3, "znver5": ZEN5}[cpu]):
        golden(f"auto_matmul_1024_{cpu}", str(tex.schedule(C).auto()))




@pytest.mark.parametrize("m,n,k", [(12, 16, 1), (65, 16, 63), (7, 17, 1000), (1000, 31, 65),
                                   (13, 32, 127), (100, 47, 300), (11, 20, 64), (12, 8, 1),
                                   (63, 9, 65), (1000, 15, 7), (11, 12, 100), (25, 8, 1023)])
def test_narrow_products(m, n, k):
    """Half a vector to three vectors of columns: on AVX-512 hosts a register tile of one
    vector and up to 12 rows (the full tile is four vectors wide), its upper lanes masked
    below a vector; a view of B too."""
    a, b = operands(np.random.default_rng(m + n + k), m, n, k, "float32")
    check(kernel("float32")(a, b), expected(a, b), k)
    wide = np.random.default_rng(1).standard_normal((k, 2 * n)).astype(np.float32)
    check(kernel("float32")(a, wide[:, ::2]), expected(a, wide[:, ::2]), k)


def test_narrow_tile_on_avx512_only():
    """The 12 x 16 tile is a specialization of the AVX-512 schedule (ZEN5), from half a
    vector of float32 columns on (float64 from a whole vector); the AVX2 schedule (ZEN3)
    keeps dot products below its full tile's two vectors. On AVX-512 the dot products
    take what no tile takes below a vector of columns, and the calls with 6 to 11 rows
    below the full tile's columns."""
    with targets.overriding(ZEN5):
        avx512 = str(tex.schedule(matmul("float32")).auto())
        avx512_f64 = str(tex.schedule(matmul("float64")).auto())
    with targets.overriding(ZEN3):
        avx2 = str(tex.schedule(matmul("float32")).auto())
    assert "M >= 12 and N >= 8 and N < 48" in avx512 and "12*iio" in avx512
    assert "N < 16 or (M >= 6 and N < 48)" in avx512
    assert "M >= 12 and N >= 8 and N < 24" in avx512_f64 and \
        "N < 8 or (M >= 6 and N < 24)" in avx512_f64
    assert "M >= 12" not in avx2 and "N < 16" in avx2


def test_batched_products_between_the_tiles_keep_the_batch_on_the_threads():
    """A batch of products with 6 to 11 rows and fewer columns than the full tile keeps
    the generic order, whose batch loop the threads share (the dot products' one block
    of rows would run each batch on one thread); the results match numpy."""
    M, N, K, NB = tex.sizes("M N K NB")
    b, i, j, k = tex.indices("b i j k")
    A, B = tex.tensor("A", (NB, M, K), "float32"), tex.tensor("B", (NB, K, N), "float32")
    C = tex.compute("C", (b, i, j), tex.sum(A[b, i, k] * B[b, k, j], over=k))
    with targets.overriding(ZEN5):
        text = str(tex.schedule(C).auto())
    assert "(M >= 6 and N < 48)" not in text
    f = tex.compile(C)
    rng = np.random.default_rng(8)
    for nb, m, n, kk in [(50, 8, 32, 32), (3, 11, 17, 65), (7, 6, 47, 9)]:
        a = rng.standard_normal((nb, m, kk)).astype(np.float32)
        bb = rng.standard_normal((nb, kk, n)).astype(np.float32)
        np.testing.assert_allclose(f(a, bb), a @ bb, rtol=1e-4, atol=1e-4 * kk)


def test_few_rows_in_a_loop_split_a_shorter_k_across_the_threads():
    """A row (or a few) times B splits K into four parts a thread from 1024 a thread on,
    from 256 a thread while calls come as in a loop (runtime.STREAM_PARTS asks the
    thread runtime), and never when B is too small for a team; called in a
    loop, such products then run on a team (the parts loop is the parallel one), right
    against numpy at K and N around the bounds, on 2 and 3 threads."""
    from tex.backends.llvm import runtime, threads

    def parts(t, k, n, looping, itemsize=4):
        return eval(runtime.STREAM_PARTS.format(t=t, rows=n, length=k,  # noqa: S307
                                                block=itemsize),
                    {"_looping": lambda t: looping})
    assert [parts(2, k, 1000, True) for k in (511, 512, 2047, 2048)] == [1, 8, 8, 8]
    assert [parts(2, k, 1000, False) for k in (511, 512, 2047, 2048)] == [1, 1, 1, 8]
    # a B of less than MIDDLING_MIN_BYTES gets no team: no parts
    assert parts(2, 4096, 63, True) == 1 and parts(2, 4096, 64, False) == 8
    assert parts(2, 4096, 31, True, 8) == 1 and parts(2, 4096, 32, False, 8) == 8
    assert parts(1, 5000, 5000, True) == 1 and parts(3, 1000, 1000, True) == 12
    rng = np.random.default_rng(41)
    before = tex.get_num_threads()
    try:
        for nt in (2, 3):
            tex.set_num_threads(nt)
            for m, k, n in [(1, 600, 1000), (1, 1500, 257), (2, 1000, 300), (3, 777, 1000),
                            (1, 513, 256), (5, 2047, 65)]:
                a, b = operands(rng, m, n, k, "float32")
                want = expected(a, b)
                out = np.empty((m, n), np.float32)
                teams = threads.runtime().teams.value
                for _ in range(4):
                    tex.einsum("ik,kj->ij", a, b, out=out)
                    check(out, want, k)
                if nt == 2 and (m, k, n) == (1, 600, 1000):
                    deadline = time.monotonic() + 60     # (a loaded machine: a crowded
                    while threads.runtime().teams.value == teams and \
                            time.monotonic() < deadline:  # CPU list refuses the team)
                        for _ in range(4):
                            tex.einsum("ik,kj->ij", a, b, out=out)
                        check(out, want, k)
                    assert threads.runtime().teams.value > teams
    finally:
        tex.set_num_threads(before)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_vector_times_matrix_streams_rows_of_b_on_every_thread(dtype):
    """A row vector times a matrix (one row known at compile time, as tex.einsum's
    (1, K) operands are, or none): the reduction is split into four parts a thread,
    each streaming its block of B's rows eight at a time into a register tile of the
    output row; K and N that neither four nor a vector divides, 1 and 3 threads, a
    strided B; a symbolic M of 1 and 2 rows (a specialization per number of rows:
    test_few_rows_...) alike."""
    i, j, k = tex.indices("i j k")
    A, B = tex.tensor("A", (1, K), dtype), tex.tensor("B", (K, N), dtype)
    row = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))
    text = str(tex.schedule(row).auto())
    assert "C_part[" in text and re.search(r"kii\w* in 0\.\.min\(8, .*# unrolled", text)
    before = tex.get_num_threads()
    rng = np.random.default_rng(0)
    try:
        for threads in (1, 3):
            tex.set_num_threads(threads)
            for n, kk in [(16, 1), (17, 7), (63, 65), (65, 3), (1000, 1000), (130, 4099)]:
                for m in (1, 2):
                    a, b = operands(rng, m, n, kk, dtype)
                    check(tex.einsum("ik,kj->ij", a, b), expected(a, b), kk)
                    check(kernel(dtype)(a, b), expected(a, b), kk)
                    wide = rng.standard_normal((kk, 2 * n)).astype(dtype)
                    check(tex.einsum("ik,kj->ij", a, wide[:, 1::2]),
                          expected(a, wide[:, 1::2]), kk)
                check(tex.einsum("k,kj->j", a[0], b), expected(a[:1], b)[0], kk)
    finally:
        tex.set_num_threads(before)


@pytest.mark.parametrize("cpu", [None, "haswell"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_one_row_no_wider_than_its_tile_keeps_the_tile_in_registers_for_all_of_k(cpu, dtype):
    """A row vector times a matrix of at most one register tile's columns (one row known
    at compile time, as tex.einsum's (1, K) operands are, or a symbolic M's one-row
    specialization): its specialization runs the passes over B's rows inside the column
    tile, so the tile accumulates all of a part's K in registers (no partial sums stored
    after each pass); wider products keep the pass outermost, and only fewer than 8
    columns run dot products over B copied transposed. Every column count around the
    vector's and the tile's width, K that no pass divides, 1 and 3 threads, strided and
    column-major B, against numpy."""
    t = target_named(cpu)
    i, j, k = tex.indices("i j k")
    A, B = tex.tensor("A", (1, K), dtype), tex.tensor("B", (K, N), dtype)
    row = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))
    lanes = t.lanes(dtype)
    width = 4 * lanes
    fs = []
    for program, narrow_if, wide_if in [
            (row, rf"N <= {width}:", r":\n"),          # (the last block: else)
            (matmul(dtype), rf"M == 1 and N <= {width}:", r"M == 1:")]:
        with targets.overriding(t):
            text = str(tex.schedule(program).auto())
            fs.append(tex.compile(program))
        blocks = re.split(r"^(?:if |elif |else)", text, flags=re.M)
        narrow = [b for b in blocks if re.match(narrow_if, b)]
        wide = [b for b in blocks if re.match(wide_if, b)]
        assert len(narrow) == 1 and len(wide) == 1, text
        # dot products (B copied transposed at each call) only below 8 columns
        assert program is not row or blocks[1].startswith("N < 8:"), text
        (jo, _), (kio, _) = _depth(narrow[0], "jo"), _depth(narrow[0], "kio")
        assert kio > jo and "] += C_acc" not in narrow[0], text   # the pass inside the tile
        kio, at = _depth(wide[0], "kio")
        assert _depth(wide[0], "jo", at)[0] > kio and "] += C_acc" in wide[0], text
    rng = np.random.default_rng(23)
    before = tex.get_num_threads()
    try:
        for threads in (1, 3):
            tex.set_num_threads(threads)
            for n in sorted({1, lanes - 1, lanes, lanes + 1, width - 1, width, width + 1,
                             2 * width + 3}):
                for kk in (1, 7, 1000):
                    a, b = operands(rng, 1, n, kk, dtype)
                    wide_b = rng.standard_normal((kk, 2 * n)).astype(dtype)
                    for view in (b, wide_b[:, 1::2], np.asfortranarray(b)):
                        for f in fs:
                            check(f(a, view), expected(a, view), kk)
    finally:
        tex.set_num_threads(before)


def test_one_row_keeps_dot_products_where_the_row_tile_would_not_read_along_b():
    """Only a float32/float64 product whose row tile reads along B's rows leaves the dot
    products to the row tile from 8 columns on: A @ B.T, a transposed output (whose one
    row is N's), a float16 sum and SSE's narrower vectors keep them (a reviewer's find:
    A @ B.T at M = 1 and 8 to 15 columns went from 4 to 63 us); all match numpy, A @ B.T
    at 1 to 6 rows."""
    i, j, k = tex.indices("i j k")
    A32, B32 = tex.tensor("A", (M, K), "float32"), tex.tensor("B", (K, N), "float32")
    Bt = tex.tensor("B", (N, K), "float32")
    A16, B16 = tex.tensor("A", (M, K), "float16"), tex.tensor("B", (K, N), "float16")
    product = tex.sum(A32[i, k] * B32[k, j], over=k)
    # (program, cpu, numpy's result, operand shapes of m rows and n columns, row counts)
    a_bt = tex.compute("C", (i, j), tex.sum(A32[i, k] * Bt[j, k], over=k))
    cases = [(a_bt, None, lambda a, b: a @ b.T, lambda m, n: ((m, 300), (n, 300)),
              (1, 2, 5, 6)),
             (tex.compute("C", (j, i), product), None, lambda a, b: (a @ b).T,
              lambda m, n: ((n, 300), (300, m)), (1,)),
             (tex.compute("C", (i, j), tex.sum(A16[i, k] * B16[k, j], over=k)), None,
              lambda a, b: a @ b, lambda m, n: ((m, 300), (300, n)), (1,)),
             (tex.compute("C", (i, j), product), "x86-64", lambda a, b: a @ b,
              lambda m, n: ((m, 300), (300, n)), (1,))]
    rng = np.random.default_rng(29)
    for program, cpu, want, shapes, row_counts in cases:
        with targets.overriding(target_named(cpu)):
            text = str(tex.schedule(program).auto())
            f = tex.compile(program)
        assert not re.search(r"Eq\([MN], 1\) & \([MN] >= 8\)", text), text
        for m in row_counts:
            for n in (7, 8, 12, 15, 33, 100):
                sa, sb = shapes(m, n)
                a = rng.standard_normal(sa).astype(program.dtype)
                b = rng.standard_normal(sb).astype(program.dtype)
                ref = want(a.astype(np.float64), b.astype(np.float64))
                tol = (0.5 if a.dtype == np.float16 else 1e-4) * 300 ** 0.5
                np.testing.assert_allclose(f(a, b), ref, rtol=0, atol=tol)


@pytest.mark.parametrize("cpu", [None, "haswell"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_few_rows_times_b_transposed_run_dot_products_by_columns(cpu, dtype):
    """x @ W.T with one row (tex.einsum's, or a symbolic M's, from half a vector's K on)
    or fewer rows than the register tile where K is at least DOT_MIN_VECTORS vectors
    (and, for float64, N past the streamed tile's L1 pass): a dot product per element, the
    columns outermost and parallel and k innermost, so each row of B is read once for
    every row of A (the streamed row tile stepped down B's columns: 5 x 512 @ (4096 x
    512).T 5x slower); the rest keeps the streamed tile. Row counts below, at and above
    MR, columns and K around those bounds, strided and transposed views, 1 and 3
    threads, against numpy."""
    from tex.scheduler.auto import DOT_MIN_VECTORS
    t = target_named(cpu)
    i, j, k = tex.indices("i j k")
    Bt = tex.tensor("B", (N, K), dtype)
    a_bt = tex.compute("C", (i, j), tex.sum(tex.tensor("A", (M, K), dtype)[i, k] * Bt[j, k],
                                            over=k))
    one = tex.compute("C", (i, j), tex.sum(tex.tensor("A", (1, K), dtype)[i, k] * Bt[j, k],
                                           over=k))
    lanes = t.lanes(dtype)
    one_k, long_k = max(4, lanes // 2), DOT_MIN_VECTORS * lanes
    wide = r" and N >= \d+" if dtype == "float64" else ""
    fs = []
    for program, cases in [(a_bt, [rf"M == 1 and K >= {one_k}:",
                                   rf"K >= {long_k}{wide} and M < (\d+):"]),
                           (one, [rf"K >= {one_k}:"])]:
        with targets.overriding(t):
            text = str(tex.schedule(program).auto())
            fs.append(tex.compile(program))
        for case in cases:
            blocks = [b for b in re.split(r"^(?:if |elif |else)", text, flags=re.M)
                      if re.match(case, b)]
            assert len(blocks) == 1, text
            (jd, _), (idp, _), (kd, _) = (_depth(blocks[0], x) for x in "jik")
            assert jd < idp < kd and re.search(r"for j\w* in .*# parallel", blocks[0]), text
            rows_bound = re.match(case, blocks[0])
        if program is a_bt:
            mr = int(rows_bound.group(1))                   # (the second case's M < MR)
            # the streamed tile for the rest: one row's short K, more rows' from two on
            assert re.search(r"^elif M == 1:", text, flags=re.M), text
            assert re.search(r"^elif M == 2:", text, flags=re.M), text
    rng = np.random.default_rng(31)
    before = tex.get_num_threads()
    try:
        for threads in (1, 3):
            tex.set_num_threads(threads)
            for m in sorted({1, 2, mr - 1, mr, mr + 1}):
                for n in (1, 7, 63, 65, 400):
                    for kk in sorted({1, 7, one_k - 1, one_k, long_k - 1, long_k, 1000}):
                        a = rng.standard_normal((kk, m)).astype(dtype).T   # along k: strided
                        wide_b = rng.standard_normal((n, 2 * kk)).astype(dtype)
                        for b in (wide_b[:, :kk], wide_b[:, 1::2]):
                            want = expected(a, b.T)
                            check(fs[0](a, b), want, kk)
                            if m == 1:
                                check(fs[1](a, b), want, kk)
    finally:
        tex.set_num_threads(before)


def _depth(nest, loop, after=0):
    """(indentation, line number) of the first `for loop...` line of a printed nest at or
    after line `after`."""
    lines = nest.splitlines()
    at = next(n for n in range(after, len(lines)) if re.match(rf"\s*for {loop}\w* in", lines[n]))
    return len(lines[at]) - len(lines[at].lstrip()), at


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_column_sums_stream_rows_like_a_vector_times_a_matrix(dtype):
    """sum over i of X[i, j] (and of a function of it) is a vector of ones times X: the
    same streamed schedule, with sizes no tile divides, 1 and 3 threads, strided views."""
    i, j = tex.indices("i j")
    X = tex.tensor("X", (M, N), dtype)
    colsum = tex.compute("S", (j,), tex.sum(X[i, j], over=i))
    text = str(tex.schedule(colsum).auto())
    assert "S_part[" in text and re.search(r"\w+ in 0\.\.min\(8, .*# unrolled", text)
    f, g = tex.compile(colsum), tex.compile(tex.compute("E", (j,), tex.sum(tex.exp(X[i, j] / 4),
                                                                            over=i)))
    before = tex.get_num_threads()
    rng = np.random.default_rng(3)
    try:
        for threads in (1, 3):
            tex.set_num_threads(threads)
            for m, n in [(1, 16), (7, 17), (65, 63), (1000, 65), (4099, 130), (3, 1000)]:
                x = rng.standard_normal((m, 2 * n)).astype(dtype)
                for view in (x[:, :n], x[:, 1::2]):
                    want = view.astype(np.float64).sum(0).astype(dtype)
                    check(f(view), want, m)
                    check(tex.einsum("ij->j", view), want, m)
                    check(g(view), np.exp(view.astype(np.float64) / 4).sum(0).astype(dtype), m)
    finally:
        tex.set_num_threads(before)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "uint16", "int32", "int64"])
def test_column_maxima_and_minima_stream_rows(dtype):
    """max and min over the rows stream X's rows into a register tile as a column sum
    does (helper survey: one strided column after another, 0.2-0.7x numpy's x.max(0));
    sizes no tile divides, 1 and 3 threads, strided and Fortran views, and NaN in a float
    column wins its maximum and its minimum, as in numpy."""
    i, j = tex.indices("i j")
    X = tex.tensor("X", (M, N), dtype)
    hi = tex.compute("Hi", (j,), tex.max(X[i, j], over=i))
    lo = tex.compute("Lo", (j,), tex.min(X[i, j], over=i))
    for out in (hi, lo):
        text = str(tex.schedule(out).auto())
        assert "_part[" in text and re.search(r"\w+ in 0\.\.min\(8, .*# unrolled", text), text
    f, g = tex.compile(hi), tex.compile(lo)
    before = tex.get_num_threads()
    rng = np.random.default_rng(5)
    try:
        for threads in (1, 3):
            tex.set_num_threads(threads)
            for m, n in [(1, 16), (7, 17), (65, 63), (1000, 65), (4099, 130), (3, 1000)]:
                x = (rng.standard_normal((m, 2 * n)) * 50).astype(dtype)
                if x.dtype.kind == "f" and m > 2:
                    x[m // 2, 3] = np.nan
                for view in (x[:, :n], x[:, 1::2], np.asfortranarray(x[:, :n])):
                    np.testing.assert_array_equal(f(view), view.max(0))
                    np.testing.assert_array_equal(g(view), view.min(0))
    finally:
        tex.set_num_threads(before)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_column_means_and_variances_stream_rows_with_their_epilogue(dtype):
    """tex.mean and tex.var over the rows (a column sum with a division in its epilogue,
    and the sum of squared deviations from a vector of means) stream X's rows as a
    column sum alone does, not one strided column after another (helper survey: 0.27x
    numpy); std with ddof, and a function of X, a vector over j and one over i, too."""
    i, j = tex.indices("i j")
    X = tex.tensor("X", (M, N), dtype)
    w, a = tex.tensor("w", (N,), dtype), tex.tensor("a", (M,), dtype)
    mean = tex.compute("Mu", (j,), tex.mean(X[i, j], over=i))
    var = tex.compute("Var", (j,), tex.var(X[i, j], over=i))
    for out in (mean, var):
        text = str(tex.schedule(out).auto())
        assert "_part[" in text and "# vector" in text and \
            re.search(r"\w+ in 0\.\.min\(8, .*# unrolled", text), text
    f = tex.compile((mean, var))
    g = tex.compile(tex.compute("Sd", (j,), tex.std(X[i, j], over=i, ddof=1)))
    h = tex.compile(tex.compute("F", (j,), tex.sum(tex.exp(X[i, j] - w[j]) * a[i], over=i)))
    before = tex.get_num_threads()
    rng = np.random.default_rng(4)
    try:
        for threads in (1, 3):
            tex.set_num_threads(threads)
            for m, n in [(1, 16), (7, 17), (65, 63), (1000, 65), (4099, 130), (3, 1000)]:
                x = (rng.standard_normal((m, 2 * n)) + 3).astype(dtype)
                v = rng.standard_normal(n).astype(dtype)
                b = rng.standard_normal(m).astype(dtype)
                for view in (x[:, :n], x[:, 1::2], np.asfortranarray(x[:, :n])):
                    x64 = view.astype(np.float64)
                    mu, var_ = f(view)
                    check(mu, x64.mean(0).astype(dtype), m)
                    check(var_, x64.var(0).astype(dtype), m)
                    if m > 1:
                        check(g(view), x64.std(0, ddof=1).astype(dtype), m)
                    want = (np.exp(x64 - v) * b[:, None]).sum(0)
                    check(h(X=view, w=v, a=b), want.astype(dtype), m)
    finally:
        tex.set_num_threads(before)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_kernel_built_for_one_call_builds_other_specializations_when_called(dtype):
    """compile(..., sizes=) (tex.einsum's first compile) builds only the specialization
    those sizes run; a call that needs another gets STATUS_DEFERRED before anything is
    computed, builds it, and runs: correct results, into out= too, misaligned inputs
    too, and each choice is built once."""
    from tex.backends.llvm import codegen, runtime
    f = runtime.compile(matmul(dtype), sizes={M: 256, N: 256, K: 256})
    n_choices = len(codegen.choices(f.kernel))
    assert n_choices >= 3
    assert len(f._sig.built.deferred) == n_choices - 1       # the full-tile one built
    rng = np.random.default_rng(7)
    seen = [f._sig.deferred]
    for m, n, k in [(256, 256, 256), (63, 7, 65), (2, 1000, 3), (1000, 7, 1), (65, 65, 65),
                    (1, 1, 1), (63, 7, 65)]:
        a, b = operands(rng, m, n, k, dtype)
        out = np.full((m, n), np.nan, dtype)
        f(a, b, out=out)
        np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
        raw = np.empty(a.nbytes + 1, np.uint8)[1:].view(dtype).reshape(a.shape)  # misaligned
        raw[...] = a
        np.testing.assert_allclose(f(raw, b), a @ b, rtol=1e-4, atol=1e-4)
        if f._sig.deferred != seen[-1]:
            assert f._sig.deferred < seen[-1]             # only ever grows
            seen.append(f._sig.deferred)
        # a new choice is a build of its own: the nests built before are not rebuilt
        assert all(len(b.deferred) == n_choices - 1 for b in f._sig.builds)
    assert len(seen) <= n_choices and len(f._sig.builds) == len(seen)
    if dtype == "float32":      # (every nest of a matmul: seconds of LLVM, once is enough)
        full = runtime.compile(matmul(dtype), sizes=runtime.EVERY)
        assert not full._sig.built.deferred


def test_the_nests_a_build_leaves_out_are_those_substitution_finds_not_taken():
    """compile_kernel decides which nests sizes need through choices.decider's generated
    Python: the same choices as substituting the sizes into each condition, at sizes around
    every tile (and over several calls at once: those none of them takes)."""
    from tex.backends.llvm import choices, codegen
    i, j, k, l = tex.indices("i j k l")
    L = tex.sizes("L")
    C = tex.compute("C", (i, j), tex.sum(tex.tensor("A", (M, K), "float32")[i, k] *
                                         tex.tensor("B", (K, N), "float32")[k, j], over=k))
    E = tex.compute("E", (i, l), tex.sum(C[i, j] * tex.tensor("D", (N, L), "float32")[j, l],
                                         over=j))
    rng = np.random.default_rng(13)
    for program in (matmul("float64"), E):
        kernel = tex.compile(program).kernel
        names = sorted(kernel.bindings, key=str)
        calls = [dict(zip(names, rng.choice([1, 2, 5, 6, 7, 8, 12, 15, 16, 17, 48, 64, 65,
                                             1000, 5000], len(names)).tolist()))
                 for _ in range(60)]
        # (the generated function itself: not_taken falls back to substitution when it
        # raises)
        generated = choices._generated_decider(
            tuple(g.cond for g in codegen.choices(kernel)))
        seen = set()
        for call in calls:
            got = choices.not_taken(kernel, call)
            assert got == choices._not_taken_by_substitution(kernel, call), call
            assert generated(call) == got, call
            seen.add(got)
        assert len(seen) > 3                                   # the calls take different nests
        assert choices.not_taken(kernel, calls[:3]) == \
            choices._not_taken_by_substitution(kernel, calls[:3])


def _holds(cond, values):
    """`cond` at `values` as Python's `and`/`or` reach its parts (a part after one that
    decides is not evaluated): the reference for the generated deciders."""
    if isinstance(cond, sp.And):
        return all(_holds(c, values) for c in cond.args)
    if isinstance(cond, sp.Or):
        return any(_holds(c, values) for c in cond.args)
    if isinstance(cond, sp.Not):
        return not _holds(cond.args[0], values)
    return bool(cond.xreplace({s: sp.Integer(v) for s, v in values.items()}))


@pytest.mark.parametrize("condition", ["K >= 1 and N // K >= 4", "K == 0 or N % K == 0",
                                       "M >= 8 and (K == 0 or N % K != 0)"])
def test_a_decider_divides_by_a_size_only_where_its_condition_does(condition):
    """A specialization whose condition divides by a size that may be 0, written so that
    the division is reached only where the size is not: choices.decider's generated
    Python, which computes the parts conditions share once, keeps that division where
    `and`/`or` reach it, so a call with K = 0 decides its nest (no fallback, no nest
    built for nothing)."""
    from tex.backends.llvm import choices, codegen
    s = tex.schedule(matmul("float32"))
    s["C"].specialize(condition)
    kernel = tex.compile(s).kernel
    conds = tuple(g.cond for g in codegen.choices(kernel))
    generated = choices._generated_decider(conds)
    for m in (1, 8, 64):
        for n in (0, 1, 3, 8, 12):
            for kk in (0, 1, 2, 3, 4):
                call = {M: m, N: n, K: kk}
                want = frozenset(x for x, c in enumerate(conds) if not _holds(c, call))
                assert generated(call) == want, call
                assert choices.not_taken(kernel, call) == want, call


def test_a_build_emits_only_what_its_nests_read():
    """A split-K partial that one specialization alone uses is taken inside that nest (a
    build that leaves the nest out emits nothing for it). Results are the differential
    tests' business; this pins the IR's diet (the golden IR of test_vector pins the
    parallel loops' contexts, which carry only what their statements read)."""
    from tex.backends.llvm import codegen
    kernel = tex.compile(matmul("float32")).kernel
    owned = codegen.choice_owners(kernel)
    assert owned and all(g.choice for g in owned.values())     # the nests' own partials
    n = len(codegen.choices(kernel))
    every = str(codegen.build(kernel, "k"))
    first = str(codegen.build(kernel, "k", deferred=frozenset(range(1, n))))
    takes = every.count("call ptr @\"tex_rt_take\"")
    assert first.count("call ptr @\"tex_rt_take\"") < takes


def test_a_chain_builds_the_choices_of_each_stage_its_calls_need(monkeypatch):
    """Two products in one kernel (E = (A @ B) @ D), each stage with specializations: a
    call needs one choice of each stage; a new combination builds its choices next to
    the other stage's (never a ping-pong between builds that each lack one), and calls
    alternating between combinations run the builds they need: they switch between
    builds until their switches have cost what one build of every choice so far costs
    (builds.SWITCH_S, NEST_BUILD_S), then get that build."""
    from tex.backends.llvm import builds as kernel_builds, codegen
    i, j, k, l = tex.indices("i j k l")
    L = tex.sizes("L")
    A, B = tex.tensor("A", (M, K), "float32"), tex.tensor("B", (K, N), "float32")
    D = tex.tensor("D", (N, L), "float32")
    C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))
    E = tex.compute("E", (i, l), tex.sum(C[i, j] * D[j, l], over=j))
    f = tex.compile(E)
    n_choices = len(codegen.choices(f.kernel))
    rng = np.random.default_rng(11)
    shapes = [(64, 5, 70, 65), (2, 5, 70, 3), (64, 9, 3, 65), (1, 3, 2, 65), (64, 5, 70, 65),
              (2, 5, 70, 3), (3, 64, 64, 1)]
    builds, switches = [], []
    for rounds in range(4):
        if rounds == 2:        # from now on a switch costs as much as a nest's build
            monkeypatch.setattr(kernel_builds, "SWITCH_S", kernel_builds.NEST_BUILD_S)
        for m, kk, n, ll in shapes:
            a = rng.standard_normal((m, kk)).astype(np.float32)
            b = rng.standard_normal((kk, n)).astype(np.float32)
            d = rng.standard_normal((n, ll)).astype(np.float32)
            want = (a.astype(np.float64) @ b @ d).astype(np.float32)
            np.testing.assert_allclose(f(a, b, d), want, rtol=1e-4, atol=1e-4 * kk * n)
        builds.append(len(f._sig.builds))
        switches.append(f._sig.switches)
    # at most a build per combination of choices (and the first, empty one: tex.compile
    # builds nothing before a call), all made in the first round; the second switches
    assert builds[0] <= len(set(shapes)) + 1 and len(f._sig.deferred) < n_choices
    assert builds[1] == builds[0] and switches[1] >= switches[0] + len(shapes) - 1
    # the switches that cost what a build of all costs got it (once: it has them all)
    assert builds[2] == builds[1] + 1 and builds[3] == builds[2]
    assert not f._sig.built.deferred - f._sig.deferred


def test_tex_compile_builds_at_the_first_call_what_the_call_runs():
    """Without sizes, no nest is built until a call needs it; f.llvm_ir shows every
    nest (what a user inspects is the whole kernel) without building them."""
    from tex.backends.llvm import codegen
    f = tex.compile(matmul("float32"))
    n = len(codegen.choices(f.kernel))
    assert f._sig.built.deferred == frozenset(range(n))
    a, b = operands(np.random.default_rng(3), 2, 3, 5, "float32")
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-5)
    assert len(f._sig.built.deferred) == n - 1
    small_ir = f._sig.built.make_ir()
    assert len(f.llvm_ir) > 2 * len(small_ir) and len(f._sig.built.deferred) == n - 1
    assert f.llvm_ir.count("define ") > small_ir.count("define ")
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-5)


@pytest.mark.parametrize("cpu, dtype, counts", [(None, "float32", (1, 2, 4, 6, 7)),
                                                (None, "float64", (3, 5)),
                                                ("haswell", "float32", (1, 3, 5, 6))])
def test_few_rows_stream_b_once_into_a_tile_of_every_row(cpu, dtype, counts):
    """A symbolic number of rows below the register tile's gets a specialization per
    count (Eq(M, m) makes M the constant m in its loops), its rows unrolled inside the
    stream of B's rows: counts from 1 to MR - 1 and the blocked tile from MR on (each
    new count builds the kernel again with one more nest), with K and N that no vector
    divides, strided operands, 1 and 3 threads, float32 and float64, for the host and an
    AVX2 target."""
    from tex.backends.llvm import codegen
    from tex.scheduler.blocking import default_blocking
    t = target_named(cpu)
    rng = np.random.default_rng(5)
    before = tex.get_num_threads()
    try:
        with targets.overriding(t):
            mr = default_blocking("float32", 4, t).mr
            text = str(tex.schedule(matmul("float32")).auto())
            for m in range(1, mr):
                assert f"M == {m}" in text
            assert re.search(r"for i in 0\.\.3:  # unrolled", text), text
            f = tex.compile(matmul(dtype))
            for threads in (1, 3):
                tex.set_num_threads(threads)
                for m in counts:
                    for n, kk in [(17, 7), (130, 1001)]:
                        a, b = operands(rng, m, n, kk, dtype)
                        check(f(a, b), expected(a, b), kk)
                        wide = rng.standard_normal((kk, 2 * n)).astype(dtype)
                        check(f(a, wide[:, ::2]), expected(a, wide[:, ::2]), kk)
            # the counts called built their own choices, and only those (one row has
            # two: no wider than its tile, n = 17, and wider, n = 130)
            built = len(codegen.choices(f.kernel)) - len(f._sig.deferred)
            assert built <= len(counts) + (1 in counts)
    finally:
        tex.set_num_threads(before)


@pytest.mark.parametrize("cpu", [None, "haswell"])
def test_few_rows_tile_stays_in_registers(cpu):
    """The few-rows tile (m rows x a full tile's columns) is a LOCAL buffer whose rows the
    vector loop walks with masks in the partial column tile; its masked-off lanes are
    still inside it (vector_plan.lanes_in_bounds), so every access is a plain one and
    LLVM keeps the tile in registers: no stack array of m x width elements is left in
    the optimized code (one masked access had kept it in memory: a store after every
    FMA, 0.48x numpy at 4 x 65536 @ 65536 x 512)."""
    from tex.backends.llvm import jit, runtime
    from tex.scheduler.blocking import full_tile_vectors
    t = target_named(cpu)
    with targets.overriding(t):
        width = full_tile_vectors() * t.lanes("float32")
        for m in (2, 4):
            f = runtime.compile(matmul("float32"), sizes={M: m, N: 100, K: 37})
            optimized = str(jit.optimized_module(f._sig.built.make_ir()))
            # the streamed nest runs in its parallel region's function (the kernel's
            # body allocates the other nests' buffers)
            regions = re.findall(r"define internal void @\S+\.par\d+\(.*?\n}", optimized,
                                 re.S)
            assert regions
            assert not any(f"alloca [{m * width} x float]" in r for r in regions), (cpu, m)
            rng = np.random.default_rng(m)
            a, b = operands(rng, m, 100, 37, "float32")
            check(f(A=a, B=b), expected(a, b), 37)


@pytest.mark.parametrize("cpu", [None, "haswell"])
def test_int8_tile_stays_in_registers_in_every_edge_version(cpu):
    """The int8 -> int32 register tile's vector loop runs a register of B's bytes (64
    lanes on AVX-512), so an edge version of fewer columns (48 of 64) ends in a masked
    chunk; its lanes are still inside the tile's row (vector_plan.lanes_in_bounds), so
    its accesses are plain too and no version leaves the tile in memory (one masked
    version kept the stores of all of them in the k loop: 2048^3 at 37 GOP/s where
    1024^3 ran 65). Blocked nests (K past one block) with every edge width."""
    from tex.backends.llvm import jit, runtime
    t = target_named(cpu)
    with targets.overriding(t):
        for n in (100, 120, 65):
            f = runtime.compile(matmul("int8", "int32"), sizes={M: 200, N: n, K: 1500})
            optimized = str(jit.optimized_module(f._sig.built.make_ir()))
            regions = [r for r in re.findall(r"define internal void @\S+\.par\d+\(.*?\n}",
                                             optimized, re.S) if "pmadd" in r]
            assert regions
            assert not any(re.search(r"alloca \[\d+ x i32\]", r) for r in regions), (cpu, n)
            a, b = operands(np.random.default_rng(n), 200, n, 1500, "int8")
            check(f(A=a, B=b), expected(a, b, np.int32), 1500)


def test_a_condition_that_fixes_a_size_makes_it_constant_in_the_specialization():
    s = tex.schedule(matmul("float32"))
    spec = s["C"].specialize(sp.Eq(M, 3) & (N >= 16))
    spec.unroll(spec.loops[0])                   # a constant extent: it unrolls
    assert re.search(r"M == 3.*\n +for i\w* in 0\.\.3:  # unrolled", str(s)), str(s)
    f = tex.compile(s)
    rng = np.random.default_rng(2)
    for m, n, kk in [(3, 16, 5), (3, 65, 7), (2, 16, 5), (4, 70, 9)]:
        a, b = operands(rng, m, n, kk, "float32")
        check(f(a, b), expected(a, b), kk)


@pytest.mark.parametrize("cpu", [None, "haswell"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_an_edge_tile_updates_only_the_vectors_of_columns_it_has(cpu, dtype):
    """schedule/edge_tiles.py: the register tile at the right edge runs an update loop
    of as many vectors as it has columns (the printed nest shows the versions); every
    remainder of N by the tile's width, from one column to one short of the tile,
    gives numpy's product, with 1 and 3 threads, and with a strided B."""
    t = target_named(cpu)
    rng = np.random.default_rng(17)
    before = tex.get_num_threads()
    try:
        with targets.overriding(t):
            text = str(tex.schedule(matmul(dtype)).auto())
            versions = re.findall(r"# edge tile: (\d+) of (\d+) vectors", text)
            assert versions, text
            vectors = int(versions[0][1])
            width = vectors * t.lanes(dtype)
            assert sorted({int(c) for c, _ in versions}) == list(range(1, vectors))
            f = tex.compile(matmul(dtype))
            for threads in (1, 3):
                tex.set_num_threads(threads)
                for rem in sorted({1, t.lanes(dtype) - 1, t.lanes(dtype), t.lanes(dtype) + 1,
                                   width // 2, width - 1}):
                    n = 2 * width + rem if width >= 48 else 3 * width + rem
                    a, b = operands(rng, 13, n, 37, dtype)
                    check(f(a, b), expected(a, b), 37)
                    wide = rng.standard_normal((37, 2 * n)).astype(dtype)
                    check(f(a, wide[:, ::2]), expected(a, wide[:, ::2]), 37)
    finally:
        tex.set_num_threads(before)


@pytest.mark.parametrize("cpu", [None, "haswell"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_few_rows_edge_tile_reading_b_in_place_updates_only_its_vectors(cpu, dtype):
    """The few-rows nest reads B in place (no zero-padded panel), so its update at the
    right edge is guarded by the matrix's edge: edge_tiles versions it in its partial
    tile, a version's last vector keeping the guard (5 x 1000 @ 1000 x 32 on AVX-512:
    15 -> 5 us). Every remainder of N by the tile's width, row counts 1 to 5, contiguous,
    strided and column-major B, 1 and 3 threads, against numpy."""
    t = target_named(cpu)
    rng = np.random.default_rng(29)
    before = tex.get_num_threads()
    try:
        with targets.overriding(t):
            f = tex.compile(matmul(dtype))
            lanes = t.lanes(dtype)
            for threads in (1, 3):
                tex.set_num_threads(threads)
                for m in range(1, 6):
                    for n in sorted({1, lanes - 1, lanes, lanes + 1, 2 * lanes + 3,
                                     3 * lanes, 4 * lanes - 1, 4 * lanes + 5}):
                        a, b = operands(rng, m, n, 37, dtype)
                        check(f(a, b), expected(a, b), 37)
                        wide = rng.standard_normal((37, 2 * n)).astype(dtype)
                        check(f(a, wide[:, ::2]), expected(a, wide[:, ::2]), 37)
                        check(f(a, np.asfortranarray(b)), expected(a, b), 37)
    finally:
        tex.set_num_threads(before)


def test_a_guard_that_moves_with_the_tile_gives_no_edge_versions():
    """A guarded update whose edge moves with a loop of the tile (the vector loop is a
    split of k, or the unrolled loop is a split of j) has no width the versions could
    test outside it: edge_tiles leaves it alone (it once put `if K - 64*ko > 48` outside
    `for ko`: KeyError at compile time). And the pass is idempotent."""
    from tex.scheduler.edge_tiles import edge_tiles
    from tex.scheduler.printer import format_nest
    rng = np.random.default_rng(31)
    i, k = tex.indices("i k")
    X = tex.tensor("X", (M, K), "float32")
    S = tex.compute("S", (i,), tex.sum(X[i, k], over=k))
    s = tex.schedule(S)
    io, ii = s[S].split(i, 4, tail="guard")
    ko, ki = s[S].split(k, 64, tail="guard")
    s[S].reorder(io, ko, ii, ki)
    s[S].unroll(ii)
    s[S].vectorize(ki, tail="mask")
    x = rng.standard_normal((5, 130)).astype(np.float32)
    np.testing.assert_allclose(tex.compile(s)(x), x.sum(1), rtol=1e-5, atol=1e-4)

    j = tex.indices("j")
    A, B = tex.tensor("A", (M, K), "float32"), tex.tensor("B", (K, N), "float32")
    C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))
    s = tex.schedule(C)
    jo, j1 = s[C].split(j, 128, tail="guard")
    j1o, ji = s[C].split(j1, 64, tail="guard")
    s[C].reorder(i, jo, k, j1o, ji)
    s[C].unroll(j1o)
    s[C].vectorize(ji, tail="mask")
    a, b = operands(rng, 3, 100, 20, "float32")
    check(tex.compile(s)(a, b), expected(a, b), 20)

    kernel = edge_tiles(tex.schedule(matmul("float32")).auto().kernel())
    assert format_nest(edge_tiles(kernel)) == format_nest(kernel)


def test_a_register_tile_tests_its_strides_before_its_k_loop():
    """vector.unit_steps_test: the unit-step test of B's columns is made once before the
    few-rows tile's k loop, which then runs m x v FMAs in one basic block; tested inside
    (for each row's vector loop) it had to be unswitched by LLVM, which gave up once
    the edge versions stood beside it and left the accumulators spilled (5 x 1000 @
    1000 x 64: 5 -> 9 us)."""
    from tex.backends.llvm import jit, runtime
    from tex.scheduler.blocking import full_tile_vectors
    m = 5
    f = runtime.compile(matmul("float32"), sizes={M: m, N: 100, K: 37})
    optimized = str(jit.optimized_module(f._sig.built.make_ir()))
    products = max(len(re.findall(r" = fmul [^\n]*<\d+ x float>|@llvm\.fma\.v", block))
                   for block in re.split(r"\n[\w.\-]+:", optimized))
    assert products >= m * full_tile_vectors(), products
    rng = np.random.default_rng(m)
    a, b = operands(rng, m, 100, 37, "float32")
    check(f(A=a, B=b), expected(a, b), 37)


def test_threads_that_need_the_same_new_nest_build_it_once():
    """Four threads call a compiled matmul with a row count none of its builds has, at
    once: each gets the right product, and the nest is built once (build_choice holds
    a lock; the threads that wait find the build)."""
    import threading
    f = tex.compile(matmul("float32"))
    rng = np.random.default_rng(23)
    a, b = operands(rng, 64, 70, 33, "float32")
    check(f(a, b), expected(a, b), 33)
    builds = len(f._sig.builds)
    few = [operands(rng, 3, 70, 33, "float32") for _ in range(4)]
    results = [None] * 4
    start = threading.Barrier(4)

    def call(n):
        start.wait()
        results[n] = f(*few[n])
    threads = [threading.Thread(target=call, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for (x, y), got in zip(few, results):
        check(got, expected(x, y), 33)
    assert len(f._sig.builds) == builds + 1


@pytest.mark.parametrize("cpu", [None, "haswell"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_batched_products_with_a_short_reduction_keep_all_of_k_in_the_tile(cpu, dtype):
    """A batch of products whose reduction fits one kc block runs the fused nest's order
    (k whole inside the register tile, A read in place: no packed A, no k blocks, no
    partial sums); a longer reduction keeps the blocked schedule. Both against numpy at
    sizes no tile divides, K at kc and kc + 1, strided operands, 1 and 3 threads."""
    from tex.scheduler.blocking import default_blocking
    t = target_named(cpu)
    C = batched_matmul(dtype)
    rng = np.random.default_rng(11)
    before = tex.get_num_threads()
    try:
        with targets.overriding(t):
            kc = default_blocking(dtype, np.dtype(dtype).itemsize, t).kc
            text = str(tex.schedule(C).auto())
            assert f"K <= {kc}" in text, text
            whole = re.split(r"\n(?:if |elif |else:)", text.split(f"K <= {kc}")[1])[0]
            assert "A_pack" not in whole and "C_part" not in whole and "B_pack" in whole
            f = tex.compile(C)
            for threads in (1, 3):
                tex.set_num_threads(threads)
                for nbatch, m, n, kk in [(3, 13, 17, 7), (2, 65, 63, 1), (5, 7, 33, 65),
                                         (1, 30, 40, kc), (2, 13, 50, kc + 1)]:
                    a = rng.standard_normal((nbatch, m, kk)).astype(dtype)
                    wide = rng.standard_normal((nbatch, kk, 2 * n)).astype(dtype)
                    for b in (wide[:, :, ::2], np.ascontiguousarray(wide[:, :, ::2])):
                        want = np.einsum("bik,bkj->bij", a.astype(np.float64),
                                         b.astype(np.float64)).astype(dtype)
                        check(f(A=a, B=b), want, kk)
                        check(f(A=a.transpose(0, 2, 1).copy().transpose(0, 2, 1), B=b),
                              want, kk)
    finally:
        tex.set_num_threads(before)


def test_a_square_operand_gets_its_whole_k_condition_as_a_power():
    """A (L x L) @ B (L x D): the whole-k condition's rows x K is L**2, which the kernel's
    dispatch and the call path both evaluate (the attention head's S @ V)."""
    L, D = tex.sizes("L D")
    i, j, k = tex.indices("i j k")
    A, B = tex.tensor("A", (L, L), "float32"), tex.tensor("B", (L, D), "float32")
    C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))
    assert "L**2" in str(tex.schedule(C).auto())
    f = tex.compile(C)
    rng = np.random.default_rng(2)
    for n, d in [(65, 64), (13, 70), (600, 33), (7, 5)]:
        a, b = operands(rng, n, d, n, "float32")
        check(f(A=a, B=b), expected(a, b), n)


def test_a_contraction_over_two_indices_keeps_the_blocked_schedule():
    """The whole-k order runs every reduced index inside the tile and packs all of B
    for it: only a single reduced index gets it (two of them, or a window, stay blocked:
    6 x (40000 x 8) x 128 packed all 156 MB of B and ran 2.3x slower)."""
    from tex.scheduler.blocking import default_blocking
    Kx, Lx = tex.sizes("Kx Lx")
    i, j, k, l = tex.indices("i j k l")
    A = tex.tensor("A", (M, Kx, Lx), "float32")
    B = tex.tensor("B", (Kx, Lx, N), "float32")
    C = tex.compute("C", (i, j), tex.sum(A[i, k, l] * B[k, l, j], over=(k, l)))
    kc = default_blocking("float32", 4).kc
    assert f"<= {kc}" not in str(tex.schedule(C).auto())
    a = np.random.default_rng(4).standard_normal((13, 40, 8)).astype(np.float32)
    b = np.random.default_rng(5).standard_normal((40, 8, 70)).astype(np.float32)
    check(tex.compile(C)(A=a, B=b), np.einsum("ikl,klj->ij", a.astype(np.float64),
                                              b.astype(np.float64)).astype(np.float32), 320)


def test_a_size_squared_in_a_shape():
    """A dimension N*N (sympy's N**2) in the call path's shape checks and in the kernel."""
    i, j = tex.indices("i j")
    X = tex.tensor("X", (N * N,), "float32")
    W = tex.tensor("W", (N,), "float32")              # binds N
    f = tex.compile((tex.compute("Y", (i,), X[i] * 2.0), tex.compute("V", (j,), W[j] + 1.0)))
    x, w = np.arange(49, dtype=np.float32), np.arange(7, dtype=np.float32)
    y, v = f(X=x, W=w)
    np.testing.assert_array_equal(y, 2 * x)
    np.testing.assert_array_equal(v, w + 1)
    with pytest.raises(tex.ShapeError):
        f(X=np.arange(50, dtype=np.float32), W=w)


@pytest.mark.parametrize("cpu", [None, "haswell"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_batches_of_products_narrower_than_a_tile(cpu, dtype):
    """A batch of products with fewer columns than the narrowest tile (3 x 3, 8 x 8,
    64 x 4) runs the whole-k nest with a one-vector tile, columns masked and rows guarded,
    not dot products: against numpy for rows below and above the tile's, K of 1 and at
    kc, strided and transposed operands, 1 and 3 threads."""
    from tex.scheduler.blocking import default_blocking
    t = target_named(cpu)
    C = batched_matmul(dtype)
    rng = np.random.default_rng(12)
    before = tex.get_num_threads()
    try:
        with targets.overriding(t):
            kc = default_blocking(dtype, np.dtype(dtype).itemsize, t, vectors=1).kc
            text = str(tex.schedule(C).auto())
            lanes = t.lanes(dtype)
            # (one column block: A is read once whatever its size)
            assert re.search(rf"^(el)?if K <= {kc} and N < \d+", text, re.M), text
            f = tex.compile(C)
            for threads in (1, 3):
                tex.set_num_threads(threads)
                for nbatch, m, n, kk in [(50, 3, 3, 3), (9, 8, 8, 8), (4, 64, 4, 64),
                                         (3, 13, lanes - 1, 1), (2, 1, 1, 7), (2, 5, 7, kc)]:
                    a = rng.standard_normal((nbatch, m, kk)).astype(dtype)
                    wide = rng.standard_normal((nbatch, kk, 2 * n)).astype(dtype)
                    b = wide[:, :, ::2]
                    want = np.einsum("bik,bkj->bij", a.astype(np.float64),
                                     b.astype(np.float64)).astype(dtype)
                    check(f(A=a, B=b), want, kk)
                    check(f(A=a.transpose(0, 2, 1).copy().transpose(0, 2, 1),
                            B=np.ascontiguousarray(b)), want, kk)
    finally:
        tex.set_num_threads(before)


@pytest.mark.parametrize("cpu", [None, "haswell"])
def test_products_of_one_column_block_run_the_whole_k_nest_whatever_the_size_of_a(cpu):
    """A product whose columns fit the whole-k nest's one column block reads A once
    there, so that nest serves it even with A beyond L2 (1024 x 1024 @ 1024 x 16 on AVX-512:
    the blocked tier packed all of A, 0.84x numpy); one column more goes blocked. Against
    numpy at the block's width and one past it, an odd M, a transposed A, 1 and 3
    threads."""
    from tex.scheduler.blocking import default_blocking, fused_columns
    t = target_named(cpu)
    rng = np.random.default_rng(13)
    before = tex.get_num_threads()
    try:
        with targets.overriding(t):
            full = default_blocking("float32", 4, t)
            width = fused_columns(full)
            text = str(tex.schedule(matmul("float32")).auto())
            assert f"N <= {width} or K*M <= " in text, text
            f = tex.compile(matmul("float32"))
            for threads in (1, 3):
                tex.set_num_threads(threads)
                for m, k, n in [(1001, 700, width), (1001, 700, width + 1), (700, 1024, 16)]:
                    a, b = operands(rng, m, n, k, "float32")
                    check(f(A=a, B=b), expected(a, b), k)
                    check(f(A=np.asfortranarray(a), B=b), expected(a, b), k)
    finally:
        tex.set_num_threads(before)


@pytest.mark.parametrize("cpu", ["znver5", "znver3"])
def test_a_k_major_panel_is_copied_row_by_row(cpu):
    """A's panel of a product with A read k-major (A[k, i], A_pack[ir, k, ii]) is copied
    with the loop over A's rows outermost, each row read once across the panel's tiles;
    a row-major A's copy keeps the panel's order (its innermost loop strides by K). The
    dot products of the narrowest products copy a k-major A too (A_pack[ii, k]: it was
    read down its columns once per output column; 4096 x 32 A @ x 8, AVX2 code, 1
    thread: 1.79 -> 0.31 ms), a row-major A is read in place. Results against numpy
    where A is packed, at sizes no tile divides."""
    t = {"znver5": ZEN5, "znver3": ZEN3}[cpu]
    i, j, k = tex.indices("i j k")
    At, B = tex.tensor("A", (K, M), "float32"), tex.tensor("B", (K, N), "float32")
    kmajor = tex.compute("C", (i, j), tex.sum(At[k, i] * B[k, j], over=k))
    with targets.overriding(t):
        texts = {"k": str(tex.schedule(kmajor).auto()),
                 "i": str(tex.schedule(matmul("float32")).auto())}
    for first, text in texts.items():
        lines = text.splitlines()
        panels = [lines[n + 1].split()[1] for n, line in enumerate(lines)
                  if line.strip().startswith("alloc A_pack[") and line.count(",") == 2]
        assert panels and all(v.startswith(first) for v in panels), (panels, text)
        dots = [line for line in lines if re.match(r"\s*alloc A_pack\[\d+, K\]", line)]
        assert bool(dots) is (first == "k"), text
    if targets.missing_here(t):
        pytest.skip(f"this host does not run {cpu}'s code")
    rng = np.random.default_rng(5)
    with targets.overriding(t):
        f = tex.compile(kmajor)
        for m, kk, n in [(130, 1100, 65), (7, 3, 1), (65, 2500, 17), (257, 64, 200),
                         (33, 4100, 5), (130, 700, 3)]:
            a, b = operands(rng, m, n, kk, "float32")
            check(f(A=np.ascontiguousarray(a.T), B=b), expected(a, b), kk)


@pytest.mark.parametrize("cpu", ["znver5", "znver3"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_products_of_one_column_block_keep_a_long_k_in_the_tile(cpu, dtype):
    """A product of one column block (each tier's: AVX-512's one-vector tile below three
    vectors of columns, the full tile's) with K beyond one kc block runs the whole-k nest,
    A's rows read in place, while B's K x NR panel fits half of L2, A is read once (one
    panel of columns, or its block of rows and B's panel within L2) and the rows make
    four row blocks; past those bounds, or with A read k-major, the blocked tier packs
    A. Against numpy on both sides of each bound, with A transposed and strided, on 1
    and 3 threads."""
    from tex.scheduler.blocking import default_blocking, fused_columns
    t = {"znver5": ZEN5, "znver3": ZEN3}[cpu]
    itemsize = np.dtype(dtype).itemsize
    with targets.overriding(t):
        text = str(tex.schedule(matmul(dtype)).auto())
    l2 = t.cache(2, 0)
    shapes, reaches = [], []
    for vectors in (None, 1) if t.vector_bits == 512 else (None,):
        bl = default_blocking(dtype, itemsize, t, vectors=vectors)
        reach = (l2 // 2) // (bl.nr * itemsize)
        reaches.append(reach)
        rows, cols = 4 * bl.mc, min(fused_columns(bl), 2 * bl.nr + 3)
        assert f"K <= {reach}" in text and f"M >= {rows}" in text, text
        tile = re.split(r"\n(?:if |elif |else:)", text.split(f"K <= {reach}")[1])[0]
        assert "A_pack" not in tile and "C_part" not in tile and "B_pack" in tile, tile
        shapes += [(rows, bl.kc + 1, bl.nr), (rows - 1, bl.kc + 1, bl.nr),
                   (rows + 5, reach, bl.nr - 3), (rows + 5, reach + 1, bl.nr),
                   (rows + 7, min(reach, l2 // ((bl.nr + bl.mc) * itemsize)), cols),
                   (rows, l2 // ((bl.nr + bl.mc) * itemsize) + 1, bl.nr + 1)]
    # an A read k-major (A[k, i]) would be packed whole there: its long K stays blocked
    i, j, k = tex.indices("i j k")
    At, B = tex.tensor("A", (K, M), dtype), tex.tensor("B", (K, N), dtype)
    with targets.overriding(t):
        kmajor = str(tex.schedule(tex.compute("C", (i, j), tex.sum(At[k, i] * B[k, j],
                                                                     over=k))).auto())
    assert "K <= " in kmajor and not any(f"K <= {r}" in kmajor for r in reaches), kmajor
    if targets.missing_here(t):
        pytest.skip(f"this host does not run {cpu}'s code")
    rng = np.random.default_rng(17)
    before = tex.get_num_threads()
    try:
        with targets.overriding(t):
            f = tex.compile(matmul(dtype))
            for threads in (1, 3):
                tex.set_num_threads(threads)
                for m, k, n in shapes:
                    a, b = operands(rng, m, n, k, dtype)
                    check(f(A=a, B=b), expected(a, b), k)
                    check(f(A=np.asfortranarray(a), B=b), expected(a, b), k)
                    wide = np.repeat(a, 2, axis=1)
                    check(f(A=wide[:, ::2], B=b), expected(a, b), k)
    finally:
        tex.set_num_threads(before)


def test_a_blocked_product_builds_its_split_k_parts_only_for_calls_some_thread_count_splits():
    """The full tile's blocked tier with split-K's parts is a specialization of its own
    (auto_nest.parts_possible: a long k and too few blocks for some thread count), so a
    kernel built for 1024^3 leaves the parts out; a call with few blocks and a long k
    builds them and runs eight parts on 2 threads. Every call agrees with numpy."""
    from tex.backends.llvm import codegen, runtime
    from tex.bench.linalg import auto_parts
    from tex.scheduler.ir import Loop, walk
    f = runtime.compile(matmul(np.float32), sizes={M: 1024, N: 1024, K: 1024})
    parted = {n for n, g in enumerate(codegen.choices(f.kernel))
              if any(isinstance(x, Loop) and str(x.extent) == "C_parts" for x in walk(g))}
    assert parted and parted <= f._sig.built.deferred, f.loop_nest
    threads = tex.get_num_threads()
    tex.set_num_threads(2)
    try:
        assert auto_parts(f, {"M": 40, "K": 8192, "N": 100}) == 8
        assert auto_parts(f, {"M": 1024, "K": 1024, "N": 1024}) == 1
        rng = np.random.default_rng(5)
        for m, k, n in [(256, 256, 256), (40, 8192, 100), (13, 3001, 70), (40, 2047, 100),
                        (7, 4096, 33)]:
            a, b = operands(rng, m, n, k, np.float32)
            np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-4, atol=1e-3 * np.sqrt(k))
        assert not f._sig.deferred >= parted            # (40, 8192, 100) built them
    finally:
        tex.set_num_threads(threads)
