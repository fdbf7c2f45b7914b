"""Corners of numpy's semantics that tex must share (a review's findings): half precision
sums, comparisons across signedness and beyond a type's range, integer powers,
reductions' initial=, clip bounds."""
import numpy as np
import pytest

import tex

N, M = tex.sizes("N M")
i, j = tex.indices("i j")


@pytest.mark.parametrize("fast_math", [True, False])
def test_half_precision_sums_add_up_in_single_precision(fast_math):
    # a float16 accumulator stops growing at 2048 (3000 ones summed to 2048, 0.1s to 256)
    V = tex.tensor("V", (N,), "float16")
    s = tex.compute("s", (), tex.sum(V[i], over=i, fast_math=fast_math))
    p = tex.compute("p", (), tex.prod(V[i], over=i, fast_math=fast_math))
    for x in (np.full(3000, 0.1, np.float16), np.ones(3001, np.float16)):
        got = s(x)
        assert got.dtype == np.float16
        assert got == x.sum()
    x = np.array([300, 300, 0.5], np.float16)
    assert p(x) == np.prod(x) == np.float16(45000)


def test_half_precision_matmul_is_as_accurate_as_numpy():
    A = tex.tensor("A", (N, M), "float16")
    B = tex.tensor("B", (M, N), "float16")
    k = tex.indices("k")
    C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))
    rng = np.random.default_rng(0)
    a = rng.uniform(0, 2, (9, 1000)).astype(np.float16)
    b = rng.uniform(0, 2, (1000, 9)).astype(np.float16)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    err_tex = np.abs(C(a, b).astype(np.float64) - exact).max()
    err_numpy = np.abs((a @ b).astype(np.float64) - exact).max()
    assert err_tex <= 2 * err_numpy + 1.0      # one half-precision ulp at ~1000 is 0.5


@pytest.mark.parametrize("signed", ["int8", "int64"])
@pytest.mark.parametrize("op", ["<", "<=", ">", ">=", "==", "!="])
def test_signed_against_uint64_compares_values(signed, op):
    # numpy resolves these to (int64, uint64) and compares exactly: -1 < 2**64 - 1
    A = tex.tensor("A", (N,), signed)
    U = tex.tensor("U", (N,), "uint64")
    info = np.iinfo(signed)
    a = np.array([0, -1, 5, info.min, info.max, 3], signed)
    u = np.array([0, 2**64 - 1, 5, 7, info.max, 2**63], np.uint64)
    left = tex.compute("l", (i,), eval(f"A[i] {op} U[i]"))
    right = tex.compute("r", (i,), eval(f"U[i] {op} A[i]"))
    np.testing.assert_array_equal(left(a, u), eval(f"a {op} u"))
    np.testing.assert_array_equal(right(u, a), eval(f"u {op} a"))


@pytest.mark.parametrize("value", [2**63, 2**64, 2**70, -2**63 - 1, 300, -129])
@pytest.mark.parametrize("op", ["<", "<=", ">", ">=", "==", "!="])
def test_comparison_with_an_int_beyond_the_type_is_exact(value, op):
    # it went through float64 (int64 2**63 - 1 == 2**63 was True) or raised OverflowError
    for dt, x in (("int64", np.array([2**63 - 1, -2**63, 0])), ("int8", np.array([127, -128, 0],
                                                                              np.int8))):
        if np.iinfo(dt).min <= value <= np.iinfo(dt).max:
            continue
        A = tex.tensor("A", (N,), dt)
        f = tex.compute("c", (i,), eval(f"A[i] {op} value"))
        g = tex.compute("d", (i,), eval(f"value {op} A[i]"))
        np.testing.assert_array_equal(f(x), eval(f"x {op} value"))
        np.testing.assert_array_equal(g(x), eval(f"value {op} x"))


def test_integer_powers():
    P, E = tex.tensor("P", (N,), "int32"), tex.tensor("E", (N,), "int32")
    with pytest.raises(ValueError, match="negative integer powers"):
        P[i] ** -1
    # a negative exponent known only at run time: numpy raises; tex gives the integer
    # part of the true value (README)
    f = tex.compute("pw", (i,), P[i] ** E[i])
    p = np.array([1, -1, -1, 2, 0, -3, 5, -2, 7], np.int32)
    e = np.array([-1, -1, -2, -1, -1, -2, 2, 3, 0], np.int32)
    np.testing.assert_array_equal(f(p, e), [1, -1, 1, 0, 0, 0, 25, -8, 1])


def test_half_precision_floor_division_rounds_once():
    H, G = tex.tensor("H", (N,), "float16"), tex.tensor("G", (N,), "float16")
    fd = tex.compute("fd", (i,), H[i] // G[i])
    md = tex.compute("md", (i,), H[i] % G[i])
    rng = np.random.default_rng(1)
    h = rng.uniform(-300, 300, 20000).astype(np.float16)
    g = rng.uniform(-1, 1, 20000).astype(np.float16)
    h[:2], g[:2] = [188.5, 1], [0.0603, 0]
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(fd(h, g), h // g)
        np.testing.assert_array_equal(md(h, g), h % g)


def test_half_precision_floor_division_in_a_vectorized_reduction():
    """tex's own vector loop of a reduction computes the half divmod on vectors (it
    once widened them as if scalars: an LLVM type error at the build)."""
    H, G = tex.tensor("H", (N, M), "float16"), tex.tensor("G", (N, M), "float16")
    rng = np.random.default_rng(2)
    h = rng.uniform(-300, 300, (5, 333)).astype(np.float16)
    g = rng.uniform(-1, 1, (5, 333)).astype(np.float16)
    g[0, :3] = 0
    with np.errstate(all="ignore"):
        for reduce, ref in ((tex.argmax, np.argmax), (tex.max, np.max)):
            for op in (lambda a, b: a // b, lambda a, b: a % b):
                f = tex.compute("r", (i,), reduce(op(H[i, j], G[i, j]), over=j))
                np.testing.assert_array_equal(f(h, g), ref(op(h, g), axis=1))


def test_initial_is_cast_to_the_reductions_dtype():
    Y = tex.tensor("Y", (N, M), "int8")
    X = tex.tensor("X", (N, M), "float32")
    y = np.array([[1, -5], [-7, -9]], np.int8)
    x = np.array([[1, 2]], np.float32)
    got = tex.compute("m", (i,), tex.max(Y[i, j], over=j, initial=1.5))(y)
    want = np.max(y, axis=1, initial=1.5)
    assert got.dtype == want.dtype == np.int8
    np.testing.assert_array_equal(got, want)
    got = tex.compute("n", (i,), tex.min(X[i, j], over=j, initial=np.float64(0.5)))(x)
    assert got.dtype == np.float32 and got[0] == 0.5
    with pytest.raises(OverflowError, match="max: initial=1000"):
        tex.max(Y[i, j], over=j, initial=1000)


def test_clip_drops_int_bounds_beyond_the_type():
    Q = tex.tensor("Q", (N,), "uint8")
    q = np.array([0, 3, 7, 255], np.uint8)
    for lo, hi in ((-3, 5), (2, 300), (-1, 256)):
        got = tex.compute("c", (i,), tex.clip(Q[i], lo, hi))(q)
        want = np.clip(q, lo, hi)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
