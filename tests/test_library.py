"""Differential tests of the library functions (tex/library.py) and of sizes used as
values: compiled kernels against the NumPy reference and against numpy (or a numpy
spelling of scipy's function), with NaN, infinities, negative values, empty ranges and
awkward sizes (1, 7, 63, 65)."""
import numpy as np
import pytest

import tex
from test_dsl import check           # dtype and shape equal; floats close, NaN == NaN
from tex.backends.numpy_ref import evaluate

M, N = tex.sizes("M N")
i, j = tex.indices("i j")
SIZES = [1, 7, 63, 65]
SPECIALS = [0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 1e-8, -1e-8, 40.0, -40.0, 100.0, -100.0,
            np.nan, np.inf, -np.inf]


def values(dt, n, seed=0):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dt)
    if dt.kind == "f":
        v = np.concatenate([SPECIALS, rng.standard_normal(n) * 3])
    elif dt.kind == "b":
        v = rng.random(n) < 0.5
    else:
        info = np.iinfo(dt)
        v = np.concatenate([[0, 1, -1, info.min, info.max], rng.integers(-50, 50, n)])
    return v[:n].astype(dt) if n < len(v) else v.astype(dt)


# ---------------------------------------------------------------- elementwise

def _silu(x):
    with np.errstate(all="ignore"):
        return (x / (1 + np.exp(-x))).astype(x.dtype)


UNARY = {
    "sin": np.sin, "cos": np.cos, "floor": np.floor, "ceil": np.ceil, "round": np.round,
    "sign": np.sign, "isnan": np.isnan, "isfinite": np.isfinite, "log1p": np.log1p,
    "expm1": np.expm1, "silu": _silu, "softplus": lambda x: np.logaddexp(x.dtype.type(0), x),
    "rsqrt": lambda x: 1 / np.sqrt(x),
}
CASES = [(name, dt) for name in UNARY for dt in ("float32", "float64")]
CASES += [(name, "int32") for name in ("floor", "ceil", "round", "sign", "isnan", "isfinite",
                                       "sin", "rsqrt")]
CASES += [(name, "float16") for name in ("sin", "log1p", "expm1", "floor", "round", "sign")]
CASES += [("sign", "uint8"), ("sign", "int8"), ("floor", "bool")]


@pytest.mark.parametrize("name,dt", CASES)
def test_unary_functions_match_numpy(name, dt):
    X = tex.tensor("X", (N,), dt)
    f = tex.compile(tex.compute("Y", (i,), getattr(tex, name)(X[i])))
    atol = {"sin": 1e-6, "cos": 1e-6, "expm1": 1e-7}.get(name, 0.0)
    rtol = 1e-5 if dt == "float32" and name in ("sin", "cos", "silu", "softplus") else None
    if dt == "float16":
        rtol, atol = 2e-3, 1e-3
    for n in [0] + SIZES + [len(SPECIALS) + 5]:
        x = values(dt, n, seed=n)
        with np.errstate(all="ignore"):
            want = UNARY[name](x)
            got = f(x)
        ref, = evaluate(f.program, [x])
        check(got, ref, rtol, atol, f"{name}({dt}) n={n} compiled vs reference")
        check(ref, want, rtol, atol, f"{name}({dt}) n={n} reference vs numpy")


def test_round_is_half_to_even_and_takes_decimals():
    X = tex.tensor("X", (N,), "float64")
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 0.125, 0.375, 1234.5678, -0.0, np.nan, np.inf])
    for d in (0, 1, 2, -1, -2):
        f = tex.compile(tex.compute("Y", (i,), tex.round(X[i], d)))
        check(f(x), np.round(x, d), what=f"decimals={d}")
    Xi = tex.tensor("Xi", (N,), "int32")
    xi = np.array([-1234, -15, 0, 15, 25, 1234], np.int32)
    assert tex.round(Xi[i]) is not None and tex.round(Xi[i]).dtype == np.int32
    g = tex.compile(tex.compute("Yi", (i,), tex.round(Xi[i], -1)))
    check(g(xi), np.round(xi, -1), what="int decimals=-1")


@pytest.mark.parametrize("dt", ["float32", "float64", "int16"])
def test_clip(dt):
    X = tex.tensor("X", (N,), dt)
    f = tex.compile(tex.compute("Y", (i,), tex.clip(X[i], -3, 2)))
    lo = tex.compile(tex.compute("L", (i,), tex.clip(X[i], a_min=0)))
    x = values(dt, 40)
    check(f(x), np.clip(x, -3, 2))
    check(lo(x), np.clip(x, 0, None))
    with pytest.raises(ValueError, match="a_min"):
        tex.clip(X[i])


# ---------------------------------------------------------------- sizes as values

def test_size_values_promote_as_python_ints():
    X = tex.tensor("X", (M, N), "float32")
    X8 = tex.tensor("X8", (M, N), "int8")
    assert (tex.sum(X[i, j], over=j) / N).dtype == np.float32      # as x.sum(1) / x.shape[1]
    assert (X[i, j] * (1 / tex.sqrt(N))).dtype == np.float32       # 1 / math.sqrt(n)
    assert (X[i, j] / (N / 2)).dtype == np.float32                 # n / 2 is a Python float
    assert (X8[i, j] * N).dtype == np.int64                        # a size never narrows
    assert (X8[i, j] < N).dtype == np.bool_
    assert tex.where(X8[i, j] > 0, X8[i, j], N).dtype == np.int64
    assert (tex.cast(X8[i, j], "uint64") + N).dtype == np.uint64
    assert (N * X[i, j] + 1).dtype == np.float32


@pytest.mark.parametrize("m,n", [(1, 1), (7, 63), (3, 65), (5, 0)])
def test_sizes_as_values_in_kernels(m, n):
    X = tex.tensor("X", (M, N), "float32")
    X8 = tex.tensor("X8", (M, N), "int8")
    mean = tex.compile(tex.compute("mu", (i,), tex.sum(X[i, j], over=j) / N))
    scaled = tex.compile(tex.compute("Sc", (i, j), X[i, j] * (1 / tex.sqrt(N)) + N // 2))
    ramp = tex.compile(tex.compute("R", (i, j), X8[i, j] * N + (M - i)))
    half = tex.compile(tex.compute("H", (i, j), X[i, j] / (N / 2)))
    rng = np.random.default_rng(m * 100 + n)
    x = rng.standard_normal((m, n)).astype(np.float32)
    x8 = rng.integers(-128, 128, (m, n)).astype(np.int8)
    with np.errstate(all="ignore"):
        check(mean(x), x.sum(1) / np.float32(n) if n else np.full(m, np.nan, np.float32),
              what="sum / N")
        check(scaled(x), x * np.float32(1 / np.sqrt(n)) + np.float32(n // 2), rtol=1e-6,
              what="1 / sqrt(N)")
        check(half(x), x / np.float32(n / 2), what="N / 2")
    check(ramp(x8), x8.astype(np.int64) * n + (m - np.arange(m))[:, None], what="int8 * N")
    P = tex.param("P")
    by_param = tex.compile(tex.compute("Pp", (i, j), X[i, j] * P + M))
    check(by_param(x, P=3), x * np.float32(3) + np.float32(m), what="a parameter as a value")
    for f, a in ((mean, x), (scaled, x), (ramp, x8), (half, x)):
        with np.errstate(all="ignore"):
            # atol: the row sum's order depends on the vector width (a cancelling sum of
            # 65 terms moves by ~1e-8 between AVX2 and AVX-512 orders)
            check(f(a), evaluate(f.program, [a])[0], rtol=1e-6, atol=1e-6,
                  what="compiled vs reference")


# ---------------------------------------------------------------- library reductions

def _np_logsumexp(x, axis):
    m = np.max(x, axis=axis, keepdims=True) if x.shape[axis] else \
        np.full(x.shape[:axis] + (1,) + x.shape[axis + 1:], -np.inf, x.dtype)
    m = np.where(np.isfinite(m), m, 0).astype(x.dtype)
    with np.errstate(all="ignore"):
        return (np.log(np.sum(np.exp(x - m), axis=axis)) + np.squeeze(m, axis)).astype(x.dtype)


def _np_softmax(x, axis):
    with np.errstate(all="ignore"):
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)


def _reduction_input(dt, m, n, seed):
    rng = np.random.default_rng(seed)
    if np.dtype(dt).kind == "f":
        return (rng.standard_normal((m, n)) * 4 + 1).astype(dt)
    return rng.integers(-100, 100, (m, n)).astype(dt)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")     # numpy: var of 1 value, ddof=1
@pytest.mark.parametrize("dt", ["float32", "float64", "int32"])
@pytest.mark.parametrize("m,n", [(1, 1), (7, 63), (3, 65), (4, 2)])
def test_mean_var_std_logsumexp_softmax(dt, m, n):
    X = tex.tensor("X", (M, N), dt)
    x = _reduction_input(dt, m, n, seed=m + n)
    xf = x if x.dtype.kind == "f" else x.astype(np.float64)
    cases = {
        "mean": (tex.mean(X[i, j], over=j), x.mean(axis=1)),
        "var": (tex.var(X[i, j], over=j), x.var(axis=1)),
        "var1": (tex.var(X[i, j], over=j, ddof=1), x.var(axis=1, ddof=1)),
        "std": (tex.std(X[i, j], over=j), x.std(axis=1)),
        "logsumexp": (tex.logsumexp(X[i, j], over=j), _np_logsumexp(xf, 1)),
    }
    prog = tex.compile(tuple(tex.compute(name, (i,), e) for name, (e, _) in cases.items()))
    with np.errstate(all="ignore"):
        got = prog(x)
        refs = evaluate(prog.program, [x])
    for (name, (_, want)), g, r in zip(cases.items(), got, refs):
        rtol = 1e-4 if x.dtype == np.float32 else 1e-10
        check(g, r, rtol, 1e-6, f"{name} compiled vs reference")
        check(r, want, rtol, 1e-6, f"{name} reference vs numpy")
    sm = tex.compile(tex.compute("P", (i, j), tex.softmax(X[i, j], over=j)))
    check(sm(x), _np_softmax(xf, 1), 1e-5 if x.dtype == np.float32 else 1e-12, 1e-7,
          "softmax")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_reductions_over_all_axes_and_empty_ranges():
    X = tex.tensor("X", (M, N), "float64")
    total = tex.compile((tex.compute("mu", (), tex.mean(X[i, j], over=(i, j))),
                         tex.compute("v", (), tex.var(X[i, j], over=(i, j), ddof=1))))
    x = _reduction_input("float64", 7, 65, 3)
    mu, v = total(x)
    check(mu, np.asarray(x.mean()), 1e-12)
    check(v, np.asarray(x.var(ddof=1)), 1e-12)
    rows = tex.compile((tex.compute("m", (i,), tex.mean(X[i, j], over=j)),
                        tex.compute("lse", (i,), tex.logsumexp(X[i, j], over=j)),
                        tex.compute("v1", (i,), tex.var(X[i, j], over=j, ddof=1))))
    empty = np.zeros((3, 0))
    m, lse, v1 = rows(empty)
    assert np.isnan(m).all() and np.isneginf(lse).all() and np.isnan(v1).all()
    m, lse, v1 = rows(np.ones((3, 1)))          # n - ddof = 0: numpy gives nan for 0/0
    with np.errstate(all="ignore"):
        check(v1, np.ones((3, 1)).var(axis=1, ddof=1))


def test_logsumexp_and_softmax_with_infinities_and_nan():
    X = tex.tensor("X", (M, N), "float32")
    x = np.array([[-np.inf, -np.inf, -np.inf], [np.inf, 1.0, 2.0], [np.nan, 1.0, 0.0],
                  [1000.0, 1000.0, -1000.0], [-1000.0, -1001.0, -1002.0]], np.float32)
    lse = tex.compile(tex.compute("lse", (i,), tex.logsumexp(X[i, j], over=j)))
    check(lse(x), _np_logsumexp(x, 1), 1e-6)
    sm = tex.compile(tex.compute("P", (i, j), tex.softmax(X[i, j], over=j)))
    check(sm(x), _np_softmax(x, 1), 1e-6)          # stable: 1000s do not overflow
    assert np.isfinite(sm(x)[3:]).all()


def test_mean_of_float16_and_int8_follow_numpy_dtypes():
    X16 = tex.tensor("X16", (M, N), "float16")
    X8 = tex.tensor("X8", (M, N), "int8")
    assert tex.mean(X16[i, j], over=j).dtype == np.float16
    assert tex.mean(X8[i, j], over=j).dtype == np.float64
    assert tex.var(X8[i, j], over=j).dtype == np.float64
    assert tex.mean(X8[i, j], over=j, dtype="float32").dtype == np.float32
    f = tex.compile(tex.compute("m16", (i,), tex.mean(X16[i, j], over=j)))
    x = (np.random.default_rng(0).standard_normal((5, 300)) * 10).astype(np.float16)
    check(f(x), x.mean(axis=1), rtol=2e-3, atol=1e-3)
    g = tex.compile(tex.compute("m8", (i,), tex.mean(X8[i, j], over=j)))
    x8 = np.full((2, 1000), 127, np.int8)       # would overflow an int8 accumulator
    check(g(x8), x8.mean(axis=1))


def test_softmax_computes_its_max_once_and_is_indexed_like_its_argument():
    X = tex.tensor("X", (M, N), "float32")
    P = tex.compute("P", (i, j), tex.softmax(X[i, j], over=j))
    assert P.indices == (i, j) and P.shape == (M, N)
    defs = tex.Program(P).definitions
    assert [d.name for d in defs] == ["P_max0", "P_sum1", "P"]
