"""Differential tests of the DSL: compiled kernels (tex.compile, llvmlite) against the NumPy
reference (tex.backends.numpy_ref.evaluate) and, where numpy has the operation, against
numpy itself.

Kernels are cached in a module-level dict keyed by what they compute, so each distinct
kernel is compiled once per session. Floats compare with assert_allclose(equal_nan=True);
integers and bools compare exactly.
"""
import math
import operator

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import tex
from isolate import in_child
from kernels import compiled
from tex.backends.numpy_ref import evaluate
from tex.expr import Access, free_indices, walk

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "float32", "float64"]
INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8"]
FLOAT_DTYPES = ["float32", "float64"]
RTOL = {"float16": 2e-3, "float32": 1e-5, "float64": 1e-12}
EPS = {"float16": 2.0 ** -10, "float32": 2.0 ** -23, "float64": 2.0 ** -52}

M, N, K = tex.sizes("M N K")
i, j, k = tex.indices("i j k")



def check(got, want, rtol=None, atol=0.0, what=""):
    """Equal dtype and shape; floats close (NaN == NaN), everything else exact."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    if got.dtype.kind == "f":
        rtol = RTOL[got.dtype.name] if rtol is None else rtol
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True,
                                   err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def differential(f, arrays, direct=None, rtol=None, atol=0.0, what=""):
    """compiled == reference, and reference == numpy (`direct`) when given; where the
    reference refuses (a max over an empty axis), the compiled code refuses too."""
    try:
        evaluate(f.program, arrays)
    except ValueError as err:
        with pytest.raises(ValueError, match="zero-size array"):
            f(*arrays)
        return (err,)
    got = f(*arrays)
    got = got if isinstance(got, tuple) else (got,)
    ref = evaluate(f.program, arrays)
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        check(g, r, rtol, atol, f"{what} compiled vs reference")
    if direct is not None:
        direct = direct if isinstance(direct, tuple) else (direct,)
        for r, d in zip(ref, direct):
            check(r, d, rtol, atol, f"{what} reference vs numpy")
    return got


FLOAT_SPECIALS = [0.0, -0.0, 1.0, -1.0, 0.5, np.nan, np.inf, -np.inf]


def int_specials(dt):
    info = np.iinfo(dt)
    vals = [0, 1, 2, 7, info.min, info.max, info.max - 1, info.min + 1]
    if info.min < 0:
        vals[2:4] = [-1, -2]
    return vals


def sample(dt, n, seed, specials=True, offset=0):
    """n values of dtype dt: the specials first (repeated or tiled, so that two arrays made
    with offset 0 and 1 meet every pair of specials), then random values."""
    dt = np.dtype(dt)
    rng = np.random.default_rng(seed)
    if dt.kind == "b":
        return rng.random(n) < 0.5
    if dt.kind in "iu":
        info = np.iinfo(dt)
        out = rng.integers(info.min, info.max, n, endpoint=True, dtype=dt)
        sp = int_specials(dt)
    else:
        out = (rng.standard_normal(n) * 3).astype(dt)
        sp = FLOAT_SPECIALS
    if specials:
        grid = np.repeat(sp, len(sp)) if offset == 0 else np.tile(sp, len(sp))
        m = min(n, len(grid))
        out[:m] = np.array(grid[:m]).astype(dt)
    return out


def erf64(a):
    return np.vectorize(math.erf, otypes=[np.float64])(np.asarray(a, np.float64))


# ================================================================ unary elementwise ops

def _gelu_direct(a, approximate):
    x = np.asarray(a, np.float64)
    if approximate == "none":
        return 0.5 * x * (1 + erf64(x / math.sqrt(2)))
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


UNARY = {
    # name: (tex builder, numpy on arrays or None, result computed in float64 by `direct`)
    "negative": (operator.neg, np.negative),
    "absolute": (tex.abs, np.absolute),
    "abs_operator": (abs, np.absolute),
    "invert": (operator.invert, np.invert),
    "exp": (tex.exp, np.exp),
    "log": (tex.log, np.log),
    "sqrt": (tex.sqrt, np.sqrt),
    "tanh": (tex.tanh, np.tanh),
    "erf": (tex.erf, None),
    "gelu": (tex.gelu, None),
    "gelu_tanh": (lambda e: tex.gelu(e, approximate="tanh"), None),
    "relu": (tex.relu, lambda a: np.maximum(a, 0)),
    "sigmoid": (tex.sigmoid, lambda a: 1 / (1 + np.exp(-a))),
}


def _numpy_unary(name, a, result_dtype):
    fn = UNARY[name][1]
    with np.errstate(all="ignore"):
        if name == "erf":
            return erf64(a).astype(result_dtype)
        if name == "gelu":
            return _gelu_direct(a, "none").astype(result_dtype)
        if name == "gelu_tanh":
            return _gelu_direct(a, "tanh").astype(result_dtype)
        return fn(a)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary(name, dt):
    build, np_fn = UNARY[name]
    x = tex.tensor("x", (N,), dt)
    a = sample(dt, 101, seed=1)
    try:
        with np.errstate(all="ignore"):
            np_result = None if np_fn is None else np_fn(a)
    except TypeError:                      # numpy rejects it: so does tex, at definition
        with pytest.raises(TypeError):
            build(x[i])
        return
    f = compiled(("unary", name, dt), lambda: tex.compute("C", (i,), build(x[i])))
    out_dt = f.program.outputs[0].dtype
    if np_result is not None:
        assert out_dt == np_result.dtype, f"{name}({dt}) -> {out_dt}, numpy {np_result.dtype}"
    direct = _numpy_unary(name, a, out_dt)
    atol = 0.0
    if name in ("gelu", "gelu_tanh", "sigmoid") and out_dt.kind == "f":
        # 1 + erf(x) cancels for x << 0: absolute error ~ eps * |x|
        finite = np.abs(a[np.isfinite(a)].astype(np.float64))
        atol = 8 * EPS[out_dt.name] * max(1.0, float(finite.max(initial=1.0)))
    differential(f, [a], direct, atol=atol, what=f"{name}({dt})")


# ================================================================ binary elementwise ops

BINARY = {
    "add": (operator.add, np.add),
    "subtract": (operator.sub, np.subtract),
    "multiply": (operator.mul, np.multiply),
    "true_divide": (operator.truediv, np.true_divide),
    "floor_divide": (operator.floordiv, np.floor_divide),
    "remainder": (operator.mod, np.remainder),
    "power": (operator.pow, np.power),
    "bitwise_and": (operator.and_, np.bitwise_and),
    "bitwise_or": (operator.or_, np.bitwise_or),
    "bitwise_xor": (operator.xor, np.bitwise_xor),
    "left_shift": (operator.lshift, np.left_shift),     # counts beyond the width included
    "right_shift": (operator.rshift, np.right_shift),
    "less": (operator.lt, np.less),
    "less_equal": (operator.le, np.less_equal),
    "greater": (operator.gt, np.greater),
    "greater_equal": (operator.ge, np.greater_equal),
    "equal": (operator.eq, np.equal),
    "not_equal": (operator.ne, np.not_equal),
    "maximum": (tex.maximum, np.maximum),
    "minimum": (tex.minimum, np.minimum),
}


def _binary_case(name, dta, dtb, n=100):
    a = sample(dta, n, seed=2, offset=0)
    b = sample(dtb, n, seed=3, offset=1)
    if name == "power" and np.dtype(dtb).kind in "iu":
        # numpy refuses negative integer powers of integers (tex gives 0: tested below)
        b = np.random.default_rng(4).integers(0, 9, n).astype(dtb)
    return a, b


def _run_binary(name, dta, dtb):
    build, np_fn = BINARY[name]
    x, y = tex.tensor("x", (N,), dta), tex.tensor("y", (N,), dtb)
    a, b = _binary_case(name, dta, dtb)
    try:
        with np.errstate(all="ignore"):
            want = np_fn(a, b)
    except TypeError:
        with pytest.raises(TypeError):
            build(x[i], y[i])
        return
    f = compiled(("binary", name, dta, dtb), lambda: tex.compute("C", (i,), build(x[i], y[i])))
    rtol = 1e-6 if name == "power" and want.dtype == np.float32 else None
    differential(f, [a, b], want, rtol=rtol, what=f"{name}({dta}, {dtb})")


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("name", list(BINARY))
def test_binary_same_dtype(name, dt):
    _run_binary(name, dt, dt)


MIXED_PAIRS = [(a, b) for a in DTYPES for b in DTYPES if a != b]


@pytest.mark.parametrize("dta,dtb", MIXED_PAIRS)
@pytest.mark.parametrize("name", ["add", "less", "maximum", "floor_divide"])
def test_binary_mixed_dtypes(name, dta, dtb):
    _run_binary(name, dta, dtb)


def test_numpy_rejections_raise_type_error_at_definition():
    b8, f32 = tex.tensor("b8", (N,), "bool"), tex.tensor("f32", (N,), "float32")
    for build in (lambda: b8[i] - b8[i], lambda: -b8[i], lambda: ~f32[i],
                  lambda: f32[i] & f32[i], lambda: f32[i] ^ b8[i], lambda: f32[i] | 1):
        with pytest.raises(TypeError):
            build()


def test_names_a_compiled_function_cannot_take_are_refused_at_definition():
    """Inputs and parameters are a compiled function's keyword arguments: a Python keyword
    as their name would have compiled to a call path that is not Python (SyntaxError)."""
    for make, what in ((lambda n: tex.tensor(n, (N,), "float32"), "tensor"),
                       (tex.param, "parameter")):
        for name in ("lambda", "None", "class"):
            with pytest.raises(ValueError, match=f"{what} name '{name}' is a Python keyword"):
                make(name)
        with pytest.raises(ValueError, match=f"{what} name 'a b' is not an identifier"):
            make("a b")


def test_a_reduction_over_an_index_its_body_already_reduces_is_refused():
    """API.md: over= naming an index the body does not use raises at definition time; an
    index an inner reduction already binds is not one the body uses (it compiled, then
    failed at the first call with KeyError)."""
    A = tex.tensor("A", (N, N), "float32")
    with pytest.raises(ValueError, match="sum: index j named in over= is already reduced"):
        tex.sum(tex.sum(A[i, j], over=j), over=j)
    tex.sum(tex.sum(A[i, j], over=j) * A[i, k], over=k)     # an index of its own: fine


@in_child
def _indices_below_zero():
    N_ = tex.sizes("N")
    x = tex.tensor("x", (N_,), "float64")
    out = []
    for index in (N_ - 10, N_ - 2**40):          # read before the buffer; the second crashed
        with pytest.raises(tex.ShapeError, match="compute last: tensor x, dimension 0: "
                                                 "index N - .* goes down to N - .* below 0"):
            tex.compute("last", (), x[index])(x=np.arange(5.0))
    out.append(float(tex.compute("second_last", (), x[N_ - 2])(x=np.arange(5.0))))
    M_, K_ = tex.sizes("M K")
    X = tex.tensor("X", (M_, K_), "float64")
    y = tex.tensor("y", (M_,), "float64")
    with pytest.raises(tex.ShapeError, match="compute D: tensor y, dimension 0: index i - j "
                                             "goes down to 1 - K = -2, below 0"):
        tex.compute("D", (i, j), X[i, j] * y[i - j])(X=np.ones((3, 3)), y=np.arange(3.0))
    y2 = tex.tensor("y2", (M_ + K_ - 1,), "float64")
    band = tex.compute("E", (i, j), X[i, j] * y2[i - j + K_ - 1])(X=np.ones((3, 4)),
                                                                   y2=np.arange(6.0))
    out.append(band.tolist())
    return out


def test_an_index_below_zero_is_refused_at_call_time():
    """A symbolic offset (x[N - 10]) or a difference of indices (y[i - j]) can reach
    below 0 for some sizes: the call refuses, as it does past the dimension; it read
    before the buffer (a segfault for x[N - 2**40])."""
    last, band = _indices_below_zero()
    assert last == 3.0
    assert band == [[3.0 - j + i for j in range(4)] for i in range(3)]


def test_integer_power_negative_exponent_truncates():
    # numpy raises for negative integer powers of integers; tex gives the integer part
    # of the true value (1 ** -5 is 1, (-1) ** -3 is -1, 2 ** -1 is 0)
    x, y = tex.tensor("x", (N,), "int32"), tex.tensor("y", (N,), "int32")
    f = compiled(("binary", "power", "int32", "int32"),
                 lambda: tex.compute("C", (i,), x[i] ** y[i]))
    a = np.array([2, -3, 5, 0, 1, -1, -1, -1], np.int32)
    b = np.array([-1, -2, 3, -1, -5, 3, -3, -2], np.int32)
    got = differential(f, [a, b])[0]
    assert list(got) == [0, 0, 125, 0, 1, -1, -1, 1]


def test_weak_python_scalars_promote_as_numpy():
    u8, f32, i8 = (tex.tensor("u8", (N,), "uint8"), tex.tensor("f32", (N,), "float32"),
                   tex.tensor("i8", (N,), "int8"))
    a_u8 = np.array([0, 5, 200, 255], np.uint8)
    a_f32 = np.array([1.5, -2, np.nan, 0], np.float32)
    a_i8 = np.array([-128, -1, 0, 127], np.int8)
    cases = [
        ("u8+3", u8, a_u8, lambda e: e + 3, lambda a: a + 3),
        ("3-u8", u8, a_u8, lambda e: 3 - e, lambda a: 3 - a),
        ("u8<-1", u8, a_u8, lambda e: e < -1, lambda a: a < -1),
        ("u8>=-1", u8, a_u8, lambda e: e >= -1, lambda a: a >= -1),
        ("u8!=300", u8, a_u8, lambda e: e != 300, lambda a: a != 300),
        ("-1<u8", u8, a_u8, lambda e: -1 < e, lambda a: -1 < a),
        ("i8*2.5", i8, a_i8, lambda e: e * 2.5, lambda a: a * 2.5),
        ("i8//2", i8, a_i8, lambda e: e // 2, lambda a: a // 2),
        ("f32*0.1", f32, a_f32, lambda e: e * 0.1, lambda a: a * 0.1),
        ("2**f32", f32, a_f32, lambda e: 2 ** e, lambda a: 2 ** a),
        ("where f32 1.0", f32, a_f32, lambda e: tex.where(e > 0, e, 1.0),
         lambda a: np.where(a > 0, a, 1.0)),
        ("where u8 7", u8, a_u8, lambda e: tex.where(e > 9, 7, e),
         lambda a: np.where(a > 9, 7, a)),
    ]
    for what, t, a, build, direct in cases:
        f = compiled(("weak", what), lambda: tex.compute("C", (i,), build(t[i])))
        with np.errstate(all="ignore"):
            differential(f, [a], direct(a), what=what)
    # numpy refuses a Python int that the array's integer type cannot hold
    with pytest.raises(OverflowError):
        np.array([1], np.uint8) + (-3)
    with pytest.raises(OverflowError):
        u8[i] + (-3)
    with pytest.raises(OverflowError):
        i8[i] * 1000


@pytest.mark.parametrize("dt", INT_DTYPES)
def test_integer_division_by_zero_and_int_min(dt):
    """x // 0 and x % 0 give 0 (numpy's value, without a SIGFPE); INT_MIN // -1 wraps."""
    x, y = tex.tensor("x", (N,), dt), tex.tensor("y", (N,), dt)
    info = np.iinfo(dt)
    a = np.array([info.min, info.min, info.max, 7, -7 if info.min else 7, 0, 1, info.min],
                 dt)
    b = np.array([-1 if info.min else 1, 0, 0, 0, 2, 0, -1 if info.min else 3, 1], dt)
    a, b = np.tile(a, 9), np.tile(b, 9)          # long enough for the vector loop
    for name in ("floor_divide", "remainder"):
        build, np_fn = BINARY[name]
        f = compiled(("binary", name, dt, dt),
                     lambda: tex.compute("C", (i,), build(x[i], y[i])))
        with np.errstate(all="ignore"):
            want = np_fn(a, b)
        got = differential(f, [a, b], want, what=f"{name} {dt}")[0]
        assert (got[1::8] == 0).all() and (got[3::8] == 0).all()


# ================================================================ where, min/max NaN, casts

@pytest.mark.parametrize("dta", DTYPES)
@pytest.mark.parametrize("dtb", DTYPES)
def test_where(dta, dtb):
    c = tex.tensor("c", (N,), "bool")
    x, y = tex.tensor("x", (N,), dta), tex.tensor("y", (N,), dtb)
    cond = sample("bool", 77, seed=5)
    a, b = sample(dta, 77, seed=6), sample(dtb, 77, seed=7, offset=1)
    f = compiled(("where", dta, dtb), lambda: tex.compute("W", (i,), tex.where(c[i], x[i], y[i])))
    differential(f, [cond, a, b], np.where(cond, a, b), what=f"where {dta} {dtb}")


@pytest.mark.parametrize("dt", FLOAT_DTYPES)
def test_where_on_a_comparison(dt):
    x = tex.tensor("x", (N,), dt)
    f = compiled(("where-cmp", dt),
                 lambda: tex.compute("W", (i,), tex.where(x[i] > 0, x[i] * 2, -x[i])))
    a = sample(dt, 70, seed=8)
    differential(f, [a], np.where(a > 0, a * 2, -a))


@pytest.mark.parametrize("dt", FLOAT_DTYPES)
def test_maximum_minimum_propagate_nan(dt):
    x, y = tex.tensor("x", (N,), dt), tex.tensor("y", (N,), dt)
    a = np.array([np.nan, 1, np.nan, -np.inf, 2, np.nan] * 11, dt)
    b = np.array([1, np.nan, np.nan, np.nan, -3, -np.inf] * 11, dt)
    for fn, np_fn in ((tex.maximum, np.maximum), (tex.minimum, np.minimum)):
        f = compiled(("binary", np_fn.__name__, dt, dt),
                     lambda: tex.compute("C", (i,), fn(x[i], y[i])))
        got = differential(f, [a, b], np_fn(a, b))[0]
        assert np.isnan(got[[0, 1, 2, 3]]).all()


def _cast_input(src, dst, n=90):
    """Values of dtype src whose conversion to dst numpy defines (float -> int only in range)."""
    src, dst = np.dtype(src), np.dtype(dst)
    if src.kind == "f" and dst.kind in "iu":
        info = np.iinfo(dst)
        lo, hi = max(info.min, -1e6), min(info.max, 1e6)
        rng = np.random.default_rng(9)
        vals = rng.uniform(lo, hi + 0.99, n)
        vals[:6] = [0.0, -0.0, 0.5, lo, hi, hi + 0.5]
        if info.min < 0:
            vals[6:9] = [-0.5, -1.5, lo - 0.5]
        return np.clip(vals.astype(src), lo, hi + 0.5).astype(src)
    return sample(src, n, seed=10)


@pytest.mark.parametrize("src", DTYPES)
@pytest.mark.parametrize("dst", DTYPES)
def test_cast(src, dst):
    x = tex.tensor("x", (N,), src)
    a = _cast_input(src, dst)
    f = compiled(("cast", src, dst), lambda: tex.compute("C", (i,), tex.cast(x[i], dst)))
    with np.errstate(all="ignore"):
        want = a.astype(dst)
    differential(f, [a], want, what=f"cast {src}->{dst}")
    assert x[i].astype(dst).dtype == np.dtype(dst)


@pytest.mark.parametrize("dt", FLOAT_DTYPES)
def test_float_to_int_cast_out_of_range_saturates(dt):
    """numpy leaves out-of-range float -> int to the hardware; tex saturates and never traps."""
    x = tex.tensor("x", (N,), dt)
    f = compiled(("cast", dt, "int32"), lambda: tex.compute("C", (i,), tex.cast(x[i], "int32")))
    a = np.array([np.nan, np.inf, -np.inf, 1e20, -1e20, 3.7, -3.7], dt)
    got = f(a)
    assert got.dtype == np.int32
    assert list(got) == [0, 2 ** 31 - 1, -2 ** 31, 2 ** 31 - 1, -2 ** 31, 3, -3]
    g = compiled(("cast", dt, "uint8"), lambda: tex.compute("C", (i,), tex.cast(x[i], "uint8")))
    assert list(g(np.array([-5, 300, 255.5, np.nan], dt))) == [0, 255, 255, 0]


# ================================================================ reductions

COMBINERS = ["sum", "prod", "max", "min", "argmax", "argmin"]


def _reduction_input(dt, shape, combiner, seed):
    dt = np.dtype(dt)
    rng = np.random.default_rng(seed)
    if dt.kind == "f":
        if combiner == "prod":
            return rng.uniform(0.5, 1.9, shape).astype(dt)
        return (rng.standard_normal(shape) * 4).astype(dt)
    if dt.kind == "b":
        return rng.random(shape) < (0.9 if combiner == "prod" else 0.5)
    info = np.iinfo(dt)
    if combiner in ("max", "min", "argmax", "argmin"):
        # narrow range: ties happen, and the first index must win
        return rng.integers(max(info.min, -5), min(info.max, 5), shape, endpoint=True,
                            dtype=dt)
    return rng.integers(info.min, info.max, shape, endpoint=True, dtype=dt)


def _numpy_reduce(combiner, a, axes, dtype):
    if combiner == "sum":
        return np.sum(a, axis=axes, dtype=dtype)
    if combiner == "prod":
        return np.prod(a, axis=axes, dtype=dtype)
    if combiner in ("max", "min"):
        return (np.max if combiner == "max" else np.min)(a, axis=axes).astype(dtype)
    lead = a.shape[:a.ndim - len(axes)]
    flat = a.reshape(lead + (int(np.prod(a.shape[a.ndim - len(axes):])),))
    return (np.argmax if combiner == "argmax" else np.argmin)(flat, axis=-1).astype(np.int64)


def _reduction_tolerance(combiner, a, out_dt, n):
    out_dt = np.dtype(out_dt)
    if out_dt.kind != "f":
        return None, 0.0
    eps = EPS[out_dt.name]
    if combiner == "sum":
        # reassociation: |error| <= n * eps * sum |x|
        scale = float(np.abs(a.astype(np.float64)).sum(axis=tuple(range(1, a.ndim))).max(initial=0))
        return 0.0, 2 * n * eps * scale + 1e-30
    if combiner == "prod":
        return 4 * n * eps, 0.0
    return None, 0.0


def _reduction_program(combiner, dt, two, dtype=None):
    red = getattr(tex, combiner)
    if two:
        X = tex.tensor("X", (M, N, K), dt)
        body, over = X[i, j, k], (j, k)
    else:
        X = tex.tensor("X", (M, N), dt)
        body, over = X[i, j], j
    kw = {} if dtype is None else {"dtype": dtype}
    return tex.compute("R", (i,), red(body, over=over, **kw))


@pytest.mark.parametrize("two", [False, True], ids=["over1", "over2"])
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("combiner", COMBINERS)
def test_reduction(combiner, dt, two):
    f = compiled(("reduce", combiner, dt, two), lambda: _reduction_program(combiner, dt, two))
    out_dt = f.program.outputs[0].dtype
    shape = (5, 9, 13) if two else (5, 67)
    a = _reduction_input(dt, shape, combiner, seed=11)
    axes = (1, 2) if two else (1,)
    n = int(np.prod(shape[1:]))
    direct = _numpy_reduce(combiner, a, axes, out_dt)
    assert direct.dtype == out_dt, f"{combiner}({dt}) accumulates in {out_dt}, numpy {direct.dtype}"
    rtol, atol = _reduction_tolerance(combiner, a, out_dt, n)
    differential(f, [a], direct, rtol=rtol, atol=atol, what=f"{combiner} {dt}")
    # an empty reduced range gives numpy's answer: the identity of sum and prod, and
    # numpy's ValueError for the combiners that have none (max, min, argmax, argmin)
    empty = a[:, :0]
    if combiner in ("sum", "prod"):
        got = differential(f, [empty])[0]
        check(got, _numpy_reduce(combiner, empty, axes, out_dt))
    else:
        with pytest.raises(ValueError):
            _numpy_reduce(combiner, empty, axes, out_dt)
        with pytest.raises(ValueError, match="zero-size array to reduction operation"):
            f(empty)
    # no rows at all
    assert f(a[:0]).shape == (0,)


@pytest.mark.parametrize("src,acc", [("int8", "int32"), ("int8", "int16"), ("uint8", "int32"),
                                     ("bool", "int32"), ("int16", "int64"),
                                     ("int8", "int8"), ("float32", "float64")])
@pytest.mark.parametrize("combiner", ["sum", "prod"])
def test_reduction_dtype_widening(combiner, src, acc):
    """`dtype=` accumulates in the wider type: sums that overflow int8 but not int32 are exact."""
    f = compiled(("reduce-dtype", combiner, src, acc),
                 lambda: _reduction_program(combiner, src, False, dtype=acc))
    assert f.program.outputs[0].dtype == np.dtype(acc)
    rng = np.random.default_rng(12)
    if combiner == "sum":
        a = np.full((4, 300), 100).astype(src)       # row 0 sums to 30000 (or 300 for bool)
        a[1] = rng.integers(-128 if src in ("int8", "int16") else 0, 128, 300).astype(src)
        if src[0] in "iu":
            a[2] = np.iinfo(src).max
        a[3] = (np.arange(300) % 3).astype(src)
    else:
        a = rng.integers(1, 4, (4, 6)).astype(src)
        a[0] = 3                                     # 3**6 = 729: wraps in int8
    want = _numpy_reduce(combiner, a, (1,), acc)
    rtol = 1e-12 if acc == "float64" else None
    got = differential(f, [a], want, rtol=rtol, what=f"{combiner} {src}->{acc}")[0]
    if src == "int8" and acc == "int32":
        assert got[0] == (30000 if combiner == "sum" else 729)     # would wrap in int8
    if acc == "int8":
        assert got[0] == np.int64(30000 if combiner == "sum" else 729).astype(np.int8)


def test_argmax_dtype_must_be_int64():
    X = tex.tensor("X", (M, N), "float32")
    with pytest.raises(TypeError):
        tex.argmax(X[i, j], over=j, dtype="int32")
    assert tex.argmax(X[i, j], over=j, dtype="int64").dtype == np.int64


@pytest.mark.parametrize("dt", FLOAT_DTYPES)
@pytest.mark.parametrize("combiner", COMBINERS[2:])
@pytest.mark.parametrize("two", [False, True], ids=["over1", "over2"])
def test_reduction_nan_and_ties(combiner, dt, two):
    """max/min propagate NaN; argmax/argmin return the first NaN; ties give the first index."""
    f = compiled(("reduce", combiner, dt, two), lambda: _reduction_program(combiner, dt, two))
    n = 70
    rows = np.random.default_rng(13).standard_normal((9, n)).astype(dt)
    rows[0, 40] = np.nan                          # one NaN late in the row
    rows[1, [3, 50]] = np.nan                     # first NaN wins
    rows[2, :] = np.nan                           # all NaN
    rows[3, :] = 2.5                              # all tied -> index 0
    rows[4, :] = -1.0
    rows[4, [17, 33, 69]] = 9.0                   # tied maxima -> 17
    rows[4, [5, 60]] = -9.0                       # tied minima -> 5
    rows[5, :] = -np.inf                          # all -inf
    rows[6, :] = np.inf
    rows[7, 0] = np.nan                           # NaN first
    rows[8, [10, 20]] = [np.inf, -np.inf]
    rows[8, 64] = np.nan                          # NaN after the infinities (vector tail)
    a = rows.reshape(9, 7, 10) if two else rows
    got = differential(f, [a], _numpy_reduce(combiner, a, (1, 2) if two else (1,),
                                             f.program.outputs[0].dtype))[0]
    if combiner in ("max", "min"):
        assert np.isnan(got[[0, 1, 2, 7, 8]]).all()
    else:
        assert list(got[[0, 1, 2, 3, 7, 8]]) == [40, 3, 0, 0, 0, 64]
        assert got[4] == (17 if combiner == "argmax" else 5)


@pytest.mark.parametrize("dt", FLOAT_DTYPES)
def test_fast_math_reductions_keep_nan_and_inf(dt):
    """fast_math lets reductions reassociate; it must not fold the body into the
    accumulator (`acc + (x - x)` -> `acc`) and lose a NaN or an inf."""
    x = tex.tensor("x", (N,), dt)
    a = np.ones(67, dt)
    for what, bad in (("nan", np.nan), ("inf", np.inf)):
        b = a.copy()
        b[40] = bad
        for combiner in ("sum", "prod", "max", "min"):
            f = compiled(("x-x", combiner, dt), lambda: tex.compute(
                "R", (), getattr(tex, combiner)(x[i] - x[i], over=i)))
            got = differential(f, [b], what=f"{combiner}(x - x) with {what}")[0]
            assert np.isnan(got), f"{combiner}(x - x) over an array with {what}: {got}"
        f = compiled(("x+1-x", dt), lambda: tex.compute("R", (), tex.sum((x[i] + 1) - x[i],
                                                                         over=i)))
        assert np.isnan(f(b))


def test_argmax_integer_ties_and_extremes():
    f = compiled(("reduce", "argmax", "int8", False),
                 lambda: _reduction_program("argmax", "int8", False))
    g = compiled(("reduce", "argmin", "int8", False),
                 lambda: _reduction_program("argmin", "int8", False))
    a = np.full((3, 66), -128, np.int8)
    a[1, [7, 8, 65]] = 127
    a[2, [0, 30]] = 5
    check(f(a), np.array([0, 7, 0]))
    check(g(a), np.array([0, 0, 1]))


@pytest.mark.parametrize("n", [0, 1, 7, 63, 65, 1000])
def test_sizes(n):
    x, y = tex.tensor("x", (N,), "float32"), tex.tensor("y", (N,), "float32")
    f = compiled("sizes-ew", lambda: tex.compute("C", (i,), x[i] * 2 + y[i]))
    a, b = sample("float32", n, 14, specials=False), sample("float32", n, 15, specials=False)
    differential(f, [a, b], a * 2 + b)
    for dt in ("float32", "int8"):
        for combiner in ("sum", "max", "argmax"):
            g = compiled(("reduce", combiner, dt, False),
                         lambda: _reduction_program(combiner, dt, False))
            for shape in ((3, n), (n, 3)):
                X = _reduction_input(dt, shape, combiner, 16)
                direct = (_numpy_reduce(combiner, X, (1,), g.program.outputs[0].dtype)
                          if shape[1] else None)
                rtol, atol = _reduction_tolerance(combiner, X, g.program.outputs[0].dtype,
                                                  shape[1])
                differential(g, [X], direct, rtol=rtol, atol=atol,
                             what=f"{combiner} {dt} {shape}")


# ================================================================ affine index expressions

def _gemm(dt="float32"):
    A, B = tex.tensor("A", (M, K), dt), tex.tensor("B", (K, N), dt)
    return A, B, tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))


def _gelu_np(x):
    return (0.5 * x * (1 + erf64(x * 0.7071067811865476))).astype(x.dtype)


@pytest.mark.parametrize("n", [1, 2, 7, 8, 65])
def test_two_slices_of_a_gemm(n):
    """G = gelu(C[:, :N-H]) * C[:, H:] with H = N // 2 (GEGLU)."""
    def build():
        A, B, C = _gemm()
        H = N // 2
        return tex.compute("G", (i, j), tex.gelu(C[i, j]) * C[i, j + H])
    f = compiled("geglu", build)
    rng = np.random.default_rng(17)
    a = rng.standard_normal((5, 9)).astype(np.float32)
    b = rng.standard_normal((9, n)).astype(np.float32)
    c = a @ b
    h = n // 2
    want = _gelu_np(c[:, :n - h]) * c[:, h:]
    got = differential(f, [a, b], rtol=1e-4, atol=1e-5)[0]
    assert got.shape == (5, n - h)
    check(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n", [0, 1, 2, 7, 64, 65])
def test_strided_access(n):
    x = tex.tensor("x", (N,), "int32")
    f = compiled("odd", lambda: tex.compute("O", (i,), x[2 * i + 1] * 10 + x[2 * i]))
    a = np.arange(n, dtype=np.int32) * 3 - 7
    m = len(a[1::2])
    differential(f, [a], a[1::2] * 10 + a[:2 * m:2])
    g = compiled("stride3", lambda: tex.compute("S", (i,), x[3 * i + 2]))
    differential(g, [a], a[2::3])


@pytest.mark.parametrize("n", [0, 1, 6, 7, 65])
def test_explicit_extent(n):
    jh = tex.indices("jh", extent=N // 2)
    x = tex.tensor("x", (N,), "float64")
    f = compiled("halves", lambda: tex.compute("Hs", (jh,), x[jh] - x[jh + N // 2]))
    a = np.random.default_rng(18).standard_normal(n)
    h = n // 2
    differential(f, [a], a[:h] - a[h:2 * h])


@pytest.mark.parametrize("n", [0, 1, 2, 7, 64, 65, 1000])
def test_decreasing_indices_read_backwards(n):
    """An index with a negative coefficient (`x[N - 1 - j]`) reads the axis backwards:
    its extent comes from the first element (j up to N here, (N + 1) // 2 for a step
    of -2), in elementwise code, a reduction and both axes of a matrix."""
    x = tex.tensor("x", (N,), "float32")
    X = tex.tensor("X", (M, N), "float64")
    a = np.random.default_rng(19).standard_normal(n).astype(np.float32)
    b = np.random.default_rng(20).standard_normal((5, n))
    differential(compiled("rev", lambda: tex.compute("Rv", (j,), x[N - 1 - j])), [a], a[::-1])
    differential(compiled("rev2", lambda: tex.compute("Rv2", (j,), x[N - 1 - 2 * j] + 1)),
                 [a], a[::-1][::2] + 1)
    differential(compiled("flipdot", lambda: tex.compute(
        "Fd", (), tex.sum(x[N - 1 - j] * x[j], over=j))), [a], np.dot(a[::-1], a),
        rtol=1e-5, atol=1e-5 * n)
    differential(compiled("rot180", lambda: tex.compute(
        "R180", (i, j), X[M - 1 - i, N - 1 - j] - X[i, j])), [b], b[::-1, ::-1] - b)


def test_a_decreasing_index_that_starts_past_the_end_is_refused_at_call_time():
    x = tex.tensor("x", (N,), "float64")
    f = compiled("pastend", lambda: tex.compute("Pe", (j,), x[N - j]))   # x[N] first
    with pytest.raises(tex.ShapeError, match=r"^compute Pe: tensor x, dimension 0: index "
                                             r"N - j reaches N = 4, past the end "
                                             r"\(N = 4 elements\)$"):
        f(np.ones(4))


def test_explicit_extent_beyond_the_array_is_refused_at_call_time():
    jx = tex.indices("jx", extent=N)
    x = tex.tensor("x", (N,), "float64")
    f = compiled("overrun", lambda: tex.compute("Ov", (jx,), x[jx + 1]))
    with pytest.raises(tex.ShapeError, match="x"):
        f(np.ones(5))
    assert f(np.ones(0)).shape == (0,)


def test_offset_by_constant_and_index_values():
    x = tex.tensor("x", (N,), "int64")
    f = compiled("shift2", lambda: tex.compute("Sh", (i,), x[i + 2] - x[i] + i))
    a = np.arange(10) ** 2
    differential(f, [a], a[2:] - a[:-2] + np.arange(8))
    X = tex.tensor("X", (M, N), "float32")
    g = compiled("transpose-offset", lambda: tex.compute("T", (j, i), X[i + 1, j] * 2))
    b = np.random.default_rng(19).standard_normal((4, 6)).astype(np.float32)
    differential(g, [b], (b[1:] * 2).T)


# ================================================================ multi-definition programs

def test_reduction_reading_a_definition():
    def build():
        A, B, C = _gemm()
        return tex.compute("R", (i,), tex.max(C[i, j], over=j))
    f = compiled("gemm-max", build)
    rng = np.random.default_rng(20)
    for m, kk, n in ((5, 9, 7), (1, 1, 1), (3, 65, 66), (0, 3, 4)):
        a = rng.standard_normal((m, kk)).astype(np.float32)
        b = rng.standard_normal((kk, n)).astype(np.float32)
        differential(f, [a, b], (a @ b).max(axis=1), rtol=1e-4, atol=1e-5)
    assert f.input_names == ("A", "B")


def test_nested_reduction_is_lifted():
    X = tex.tensor("X", (M, N), "float64")
    bias = tex.tensor("bias", (M,), "float64")
    f = compiled("lifted", lambda: tex.compute(
        "D", (i,), tex.sum(X[i, j], over=j) * 2 + bias[i] - tex.max(X[i, j], over=j)))
    rng = np.random.default_rng(21)
    a, b = rng.standard_normal((6, 13)), rng.standard_normal(6)
    differential(f, [a, b], a.sum(1) * 2 + b - a.max(1), rtol=1e-12, atol=1e-12)
    assert len(f.program.definitions) == 3


def test_softmax_like_chain_and_several_outputs():
    X = tex.tensor("X", (M, N), "float32")

    def build():
        mx = tex.compute("mx", (i,), tex.max(X[i, j], over=j))
        e = tex.compute("e", (i, j), tex.exp(X[i, j] - mx[i]))
        s = tex.compute("s", (i,), tex.sum(e[i, j], over=j))
        p = tex.compute("p", (i, j), e[i, j] / s[i])
        am = tex.compute("am", (i,), tex.argmax(p[i, j], over=j))
        return (p, am)
    f = compiled("softmax", build)
    a = np.random.default_rng(22).standard_normal((7, 65)).astype(np.float32)
    e = np.exp(a - a.max(1, keepdims=True))
    want = (e / e.sum(1, keepdims=True), a.argmax(1))
    got = differential(f, [a], want, rtol=1e-5, atol=1e-7)
    assert isinstance(got, tuple) and len(got) == 2


def test_transposed_consumer_and_full_reduction():
    def build():
        A, B, C = _gemm("float64")
        bias = tex.tensor("bias", (N,), "float64")
        T = tex.compute("T", (j, i), C[i, j] + bias[j])
        total = tex.compute("total", (), tex.sum(T[j, i], over=(j, i)))
        return (T, total)
    f = compiled("transposed", build)
    rng = np.random.default_rng(23)
    a, b, bias = rng.standard_normal((4, 5)), rng.standard_normal((5, 3)), rng.standard_normal(3)
    t = (a @ b + bias).T
    got = differential(f, [a, b, bias], (t, np.asarray(t.sum())), rtol=1e-10, atol=1e-12)
    assert got[1].shape == ()


# ================================================================ views and odd memory layouts

def test_non_contiguous_inputs():
    A, B, C = _gemm()
    f = compiled("gemm", lambda: C)
    rng = np.random.default_rng(24)
    base_a = rng.standard_normal((14, 10)).astype(np.float32)
    base_b = rng.standard_normal((10, 22)).astype(np.float32)
    views = [
        (base_a[:7, :5], base_b[:5, :3]),                 # sub-blocks
        (base_a.T[:6, :7], base_b[:7, ::2]),              # transposed, stepped
        (base_a[::-1, ::-2], base_b[:5, ::-1]),           # negative strides
        (np.broadcast_to(base_a[0], (9, 10)), base_b),    # zero stride (broadcast row)
        (np.broadcast_to(base_a[:, :1], (14, 10)), np.broadcast_to(base_b[:, 3:4], (10, 5))),
        (np.asfortranarray(base_a), base_b),
    ]
    for a, b in views:
        got = differential(f, [a, b], rtol=1e-4, atol=1e-5)[0]
        check(got, a @ b, rtol=1e-4, atol=1e-5)
        assert got.flags.c_contiguous


@pytest.mark.parametrize("dt", ["int16", "int32", "float32", "float64", "int64"])
def test_misaligned_and_byteswapped_inputs(dt):
    x, y = tex.tensor("x", (N,), dt), tex.tensor("y", (N,), dt)
    f = compiled(("misaligned", dt), lambda: tex.compute("C", (i,), x[i] * 3 - y[i]))
    a = sample(dt, 37, 25, specials=False)
    b = sample(dt, 37, 26, specials=False)
    want = a * 3 - b
    raw = np.frombuffer(b"\0" + a.tobytes(), dtype=dt, offset=1)      # misaligned, read-only
    assert raw.ctypes.data % np.dtype(dt).itemsize != 0
    swapped = b.astype(np.dtype(dt).newbyteorder(">"))
    for args in ([raw, b], [a, swapped], [raw, swapped], [raw[::-1][::-1], swapped[::-1][::-1]]):
        check(f(*args), want)
    # a misaligned element stride (a view into a packed record array)
    rec = np.zeros(37, dtype=[("pad", "u1"), ("v", dt)])
    rec["v"] = a
    assert not rec["v"].flags.aligned
    check(f(rec["v"], b), want)


# ================================================================ random expressions (hypothesis)

def _examples(n):
    """max_examples=n unless a hypothesis profile asks for more (--hypothesis-profile)."""
    default = settings.default.max_examples
    return default if default > n and default != 100 else n


EXACT_UNARY = {"negative": operator.neg, "absolute": tex.abs, "invert": operator.invert,
               "sqrt": tex.sqrt}
EXACT_BINARY = ["add", "subtract", "multiply", "true_divide", "floor_divide", "remainder",
                "power", "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift",
                "right_shift", "less", "less_equal",
                "greater", "equal", "not_equal", "maximum", "minimum"]
ROOT_FUNCTIONS = {"exp": tex.exp, "log": tex.log, "tanh": tex.tanh, "erf": tex.erf,
                  "sigmoid": tex.sigmoid, "gelu": tex.gelu}
CONSTANTS = [0, 1, 2, 3, -1, 0.5, -1.5, 2.0, True]


def _has_minmax(e):
    from tex.expr import Op
    return any(isinstance(n, Op) and n.name in ("maximum", "minimum") for n in walk(e))


def _element_strategy(dt):
    dt = np.dtype(dt)
    if dt.kind == "b":
        return st.booleans()
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return st.one_of(st.sampled_from([0, 1, info.min, info.max, -1 if info.min else 2]),
                         st.integers(int(info.min), int(info.max)))
    width = 32 if dt == np.float32 else 64
    return st.one_of(st.sampled_from([0.0, 1.0, -1.0, np.nan, np.inf, -np.inf, 0.5]),
                     st.floats(-100, 100, width=width))


@st.composite
def random_programs(draw):
    """A random elementwise expression over 1-3 inputs of random dtypes and ranks, possibly
    under a transcendental function and/or a reduction; returns (definition, arrays, note)."""
    n_in = draw(st.integers(1, 3))
    inputs = []
    for n in range(n_in):
        dt = draw(st.sampled_from(DTYPES))
        rank = draw(st.sampled_from([1, 2]))
        inputs.append(tex.tensor(f"x{n}", (M, N) if rank == 2 else (N,), dt))

    def leaf():
        if draw(st.integers(0, 4)) == 0:
            return draw(st.sampled_from(CONSTANTS))
        t = inputs[draw(st.integers(0, n_in - 1))]
        # now and then an axis read backwards (`x[N - 1 - j]`, a reversal)
        ii = M - 1 - i if draw(st.integers(0, 5)) == 0 else i
        jj = N - 1 - j if draw(st.integers(0, 5)) == 0 else j
        return t[ii, jj] if t.ndim == 2 else t[jj]

    def node(depth):
        if depth == 0 or draw(st.integers(0, 3)) == 0:
            return leaf()
        kind = draw(st.sampled_from(["unary", "binary", "binary", "binary", "where", "cast"]))
        a = node(depth - 1)
        try:
            if kind == "unary":
                return EXACT_UNARY[draw(st.sampled_from(sorted(EXACT_UNARY)))](a)
            if kind == "cast":
                src = tex.expr.as_expr(a).dtype
                dst = draw(st.sampled_from(DTYPES))
                if src.kind == "f" and np.dtype(dst).kind in "iu":
                    return a          # out-of-range float -> int is undefined in numpy
                return tex.cast(a, dst)
            b = node(depth - 1)
            if kind == "where":
                c = node(depth - 1)
                return tex.where(tex.cast(c, "bool") if draw(st.booleans()) else c > b, a, b)
            name = draw(st.sampled_from(EXACT_BINARY))
            if name in ("true_divide", "floor_divide", "remainder") and _has_minmax(
                    tex.expr.as_expr(b)):
                return a              # the sign of a zero from max/min is unspecified
            e = tex.expr.op(name, a, b)
            if name == "power" and e.dtype.kind == "f":
                return a              # libm pow and numpy's differ in the last ulp
            return e
        except (TypeError, OverflowError, ValueError):
            return a          # refused as numpy refuses it (e.g. 0 ** -1 on integers)

    expr = tex.expr.as_expr(node(3))
    assume(any(isinstance(n, Access) for n in walk(expr)))
    root = draw(st.sampled_from([None, None] + sorted(ROOT_FUNCTIONS)))
    combiner = draw(st.sampled_from([None, None] + COMBINERS))
    if root is not None and combiner not in ("argmax", "argmin"):
        try:
            expr = ROOT_FUNCTIONS[root](expr)
        except TypeError:
            pass              # sigmoid(bool): numpy has no boolean negative either
    used = free_indices(expr)
    body = expr
    if combiner is not None and j in used:
        dtype = None
        if combiner in ("sum", "prod") and draw(st.booleans()):
            dtype = draw(st.sampled_from(DTYPES))
            if expr.dtype.kind == "f" and np.dtype(dtype).kind in "iu":
                dtype = None          # float -> int (NaN, out of range) is undefined in numpy
        expr = getattr(tex, combiner)(expr, over=j, dtype=dtype)
        out = (i,) if i in used else ()
    else:
        combiner = None
        out = tuple(x for x in (i, j) if x in used)
    defn = tex.compute("R", out, expr)
    m, n = draw(st.sampled_from([0, 1, 2, 3, 5])), draw(st.sampled_from([0, 1, 2, 7, 17]))
    program = tex.Program(defn)
    arrays = []
    for t in program.inputs:
        shape = (m, n) if t.ndim == 2 else (n,)
        a = draw(hnp.arrays(t.dtype, shape, elements=_element_strategy(t.dtype)))
        arrays.append((a, draw(st.sampled_from(LAYOUTS))))   # laid out in the child
    return defn, body, combiner, arrays, n


LAYOUTS = ["c", "c", "reversed", "fortran", "strided", "misaligned", "byteswapped",
           "broadcast"]


def _layout(a, how):
    """The values of `a` (for "broadcast": of its first row) in another memory layout."""
    rev = (slice(None, None, -1),) * a.ndim
    if how == "reversed":
        return a[rev].copy()[rev]
    if how == "fortran":
        return np.asfortranarray(a)
    if how == "strided":
        big = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
        big[..., ::2] = a
        return big[..., ::2]
    if how == "misaligned" and a.dtype.itemsize > 1 and a.size:
        return np.frombuffer(b"\0" + a.tobytes(), a.dtype, offset=1).reshape(a.shape)
    if how == "byteswapped" and a.dtype.itemsize > 1:
        return a.astype(a.dtype.newbyteorder())
    if how == "broadcast" and a.ndim == 2 and a.shape[0]:
        return np.broadcast_to(a[:1], a.shape)
    return a


@settings(max_examples=_examples(250), deadline=None,
          suppress_health_check=list(HealthCheck))
@given(random_programs())
@in_child
def test_random_expressions(case):
    """Runs in a child process (generated code that crashes fails the example); the
    arrays travel contiguous with their layout's name and are laid out here."""
    defn, body, combiner, arrays, n = case
    arrays = [_layout(a, how) for a, how in arrays]
    f = tex.compile(defn)
    with np.errstate(all="ignore"):
        try:
            ref = evaluate(f.program, arrays)[0]
        except ValueError:                  # max over an empty axis: numpy refuses
            with pytest.raises(ValueError, match="zero-size array"):
                f(*arrays)
            return
    got = f(*arrays)
    rtol, atol = None, 0.0
    if got.dtype.kind == "f":
        rtol = RTOL[got.dtype.name]
        if body.dtype.kind == "f":
            rtol = max(rtol, RTOL[body.dtype.name])                  # sum(f32, dtype=f64)
    if combiner in ("sum", "prod") and got.dtype.kind == "f":
        # the body as its own definition, to bound the reassociation error
        # (the body's own indices: pickled, they are not this module's i and j)
        out = tuple(sorted(free_indices(body), key=lambda x: x.name))
        with np.errstate(all="ignore"):
            vals = np.asarray(evaluate(tex.compute("Body", out, body), arrays)[0], np.float64)
        vals = np.where(np.isfinite(vals), vals, 0)
        eps = EPS[got.dtype.name]
        if combiner == "sum":
            rtol, atol = rtol, 2 * n * eps * float(np.abs(vals).sum(initial=0))
        else:
            rtol, atol = 4 * max(n, 1) * eps + rtol, 1e-30
    check(got, ref, rtol, atol, f"{f.program}")


def test_index_arithmetic_with_floats_and_index_conditions_compute_as_numpy_does():
    X = tex.tensor("X", (M, N))
    x = np.random.default_rng(9).random((5, 7)).astype(np.float32)
    rows, cols = np.meshgrid(np.arange(5), np.arange(7), indexing="ij")
    E = tex.compute("E", (i, j), X[i, j] + j * 0.5)           # np.arange(N) * 0.5: float64
    got = tex.compile(E)(x)
    check(got, x + cols * 0.5)
    S = tex.compute("S", (i, j), tex.where(j <= i, X[i, j], -1e9))    # a causal mask
    check(tex.compile(S)(x), np.where(cols <= rows, x, np.float32(-1e9)))
    S2 = tex.compute("S2", (i, j), tex.where((j <= i) & ~(i >= 3), X[i, j], 0.0))
    check(tex.compile(S2)(x), np.where((cols <= rows) & ~(rows >= 3), x, np.float32(0)))
    assert "where(j <= i, X[i, j]" in repr(S)


def test_an_output_listed_twice_is_refused():
    X = tex.tensor("X", (M, N))
    E = tex.compute("E", (i, j), X[i, j] * 2)
    with pytest.raises(ValueError, match="E is listed twice among the outputs"):
        tex.compile((E, E))


def test_minimum_maximum_and_abs_of_sizes_give_extents_and_stay_elementwise_values():
    """Python's min(M, N) cannot decide M < N: tex.minimum of sizes is the extent
    min(M, N) (as tex.maximum and tex.abs, and Python's abs, are theirs), and in an
    expression it is the elementwise value it always was (`.astype` and all)."""
    M, N = tex.sizes("M N")
    i, j = tex.indices("i j")
    X = tex.tensor("X", (M, N), "float32")
    with pytest.raises(TypeError, match=r"tex\.minimum\(M, N\)"):
        min(M, N)
    D = tex.tensor("D", (tex.minimum(M, N),), "float32")
    W = tex.tensor("W", (tex.abs(M - N),), "float32")
    assert repr(D.shape) == "(min(M, N),)" and repr(W.shape) == "(abs(M - N),)"
    assert tex.tensor("W", (abs(M - N),), "float32") is W
    assert repr(tex.tensor("Q", (tex.maximum(M // 2, 1),), "float32").shape) in (
        "(max(1, M // 2),)", "(max(M // 2, 1),)")
    f = tex.compile(tex.compute("Y", (i,), X[i, i] + D[i]))
    g = tex.compile(tex.compute("S", (i,), tex.sum(X[i, j], over=j) + W[0]))
    h = tex.compile(tex.compute("Z", (i, j), X[i, j] * tex.abs(M - N)
                                / tex.maximum(N, 1).astype("float32")))
    rng = np.random.default_rng(0)
    for m, n in [(5, 3), (3, 7), (1, 1), (65, 63)]:
        x = rng.standard_normal((m, n), dtype=np.float32)
        d = rng.standard_normal(min(m, n), dtype=np.float32)
        np.testing.assert_array_equal(f(X=x, D=d), np.diagonal(x) + d)
        w = np.full(abs(m - n), 2.5, np.float32)
        if w.size:
            np.testing.assert_allclose(g(X=x, W=w), x.sum(axis=1) + 2.5, rtol=1e-5)
        want = x * abs(m - n) / np.float32(max(n, 1))
        assert h(x).dtype == want.dtype
        np.testing.assert_allclose(h(x), want, rtol=1e-6)
    with pytest.raises(tex.ShapeError, match=r"tensor D, dimension 0: expected min\(M, N\) = 3"):
        f(X=np.ones((5, 3), np.float32), D=np.ones(4, np.float32))


def test_an_index_extent_may_be_a_minimum_of_sizes():
    """`tex.indices("d", extent=tex.minimum(M, N))` fixes d's range to min(M, N) (it
    was refused: only tensor shapes took tex.minimum)."""
    M, N = tex.sizes("M N")
    d = tex.indices("d", extent=tex.minimum(M, N))
    assert repr(d.extent) == "min(M, N)"
    X = tex.tensor("X", (M, N), "float32")
    f = tex.compile(tex.compute("Dg", (d,), X[d, d] * 2.0))
    for m, n in [(3, 4), (4, 3), (1, 7)]:
        x = np.arange(m * n, dtype=np.float32).reshape(m, n)
        np.testing.assert_array_equal(f(x), np.diagonal(x) * 2)
    with pytest.raises(TypeError, match="index e, extent"):
        tex.indices("e", extent=tex.minimum(M, 2.5))


@pytest.mark.parametrize("case", ["sign", "less", "equal", "at_least", "float_sign"])
def test_comparisons_of_negative_int64_constants_fold_as_signed(case):
    """The IR builder folds comparisons of constants, and tex keeps a negative int64
    constant in its unsigned form: a fold that compared those forms got -3 < 5 wrong."""
    from tex.expr import Const
    N = tex.sizes("N")
    i = tex.indices("i")
    X, F = tex.tensor("X", (N,), "int64"), tex.tensor("F", (N,), "float32")
    x, fx = np.arange(1, 4, dtype=np.int64), np.arange(1, 4, dtype=np.float32)

    def c(v):
        return Const(v, "int64")
    body, args, want = {
        "sign": (X[i] * tex.sign(np.int64(-3)), {"X": x}, -x),
        "less": (tex.where(c(-3) < c(5), X[i], -X[i]), {"X": x}, x),
        "equal": (tex.where(c(-3) == c(-3), X[i], -X[i]), {"X": x}, x),
        "at_least": (tex.where(c(-1) >= c(0), X[i], -X[i]), {"X": x}, -x),
        "float_sign": (F[i] * tex.sign(np.int64(-3)), {"F": fx}, -fx.astype(np.float64)),
    }[case]
    got = tex.compile(tex.compute("Y", (i,), body))(**args)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype
