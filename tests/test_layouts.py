"""Layout variants of compiled programs (scheduler/layouts.py, backends/llvm/layouts.py):
a function compiled with the default schedule, called with Fortran-ordered or transposed
arrays, runs the same program rewritten for their layout. Each case is checked against
numpy, at sizes no tile divides; the arrays are above tex.layout.SMALL, where the
variants start."""
import pickle
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import tex
from isolate import in_child
from tex.backends.numpy_ref import evaluate
from tex.backends.llvm import jit, runtime
from tex.scheduler.layouts import permuted

M, N, K = tex.sizes("M N K")
i, j, k = tex.indices("i j k")
rng = np.random.default_rng(7)
SHAPES = [(65, 1000), (1000, 63), (7, 4700), (300, 301)]


def _pair(shape, dtype=np.float32):
    return (rng.standard_normal(shape).astype(dtype), rng.standard_normal(shape).astype(dtype))


def _elementwise():
    X, Y = tex.tensor("X", (M, N)), tex.tensor("Y", (M, N))
    return tex.compute("E", (i, j), X[i, j] * Y[i, j] + 1)


def _row_sums():
    X, Y = tex.tensor("X", (M, N)), tex.tensor("Y", (M, N))
    return tex.compute("R", (i,), tex.sum(X[i, j] * Y[i, j], over=j))


@pytest.mark.parametrize("shape", SHAPES)
def test_elementwise_over_fortran_arrays_follows_their_layout(shape):
    f = tex.compile(_elementwise())
    a, b = _pair(shape)
    fa, fb = np.asfortranarray(a), np.asfortranarray(b)
    got = f(X=fa, Y=fb)
    np.testing.assert_allclose(got, a * b + 1, rtol=1e-6)
    assert got.shape == shape and got.flags.f_contiguous      # as numpy's ufuncs give it
    assert len(f._layout_variants) == 1
    # mixed layouts: the output stays as written
    np.testing.assert_allclose(f(X=fa, Y=b), a * b + 1, rtol=1e-6)
    np.testing.assert_allclose(f(X=a, Y=fb), a * b + 1, rtol=1e-6)
    # into a caller's array: written in place, whatever its layout
    for out in (np.empty(shape, np.float32), np.empty(shape, np.float32, order="F")):
        assert f(X=fa, Y=fb, out=out) is out
        np.testing.assert_allclose(out, a * b + 1, rtol=1e-6)


@pytest.mark.parametrize("shape", SHAPES)
def test_reductions_over_fortran_and_transposed_arrays(shape):
    f = tex.compile(_row_sums())
    a, b = _pair(shape)
    want = (a.astype(np.float64) * b).sum(1)
    for x, y in ((np.asfortranarray(a), np.asfortranarray(b)),
                 (np.ascontiguousarray(a.T).T, b),               # a transposed view
                 (np.asfortranarray(a)[::-1][::-1], np.asfortranarray(b)),
                 (np.ascontiguousarray(a[::-1].T).T[::-1], b)):     # Fortran, stepping back
        assert np.array_equal(x, a)
        np.testing.assert_allclose(f(X=x, Y=y), want, rtol=1e-4, atol=1e-3)


def test_negative_strides_and_views_of_a_fortran_array():
    f = tex.compile(_elementwise())
    big = np.asfortranarray(rng.standard_normal((400, 300)).astype(np.float32))
    b = rng.standard_normal((400, 300)).astype(np.float32)
    for x, y in ((big[::-1, ::-1], b), (big[::-1], b[::-1]), (big[10:380:2, :], b[10:380:2])):
        np.testing.assert_allclose(f(X=x, Y=y), x * y + 1, rtol=1e-6)


def test_three_axes_in_any_order():
    P = tex.sizes("P")
    X = tex.tensor("X", (M, N, P))
    S = tex.compute("S", (i, k), tex.sum(X[i, j, k] * 2, over=j))
    f = tex.compile(S)
    base = rng.standard_normal((40, 50, 60)).astype(np.float32)
    for axes in ((2, 0, 1), (1, 2, 0), (2, 1, 0), (0, 2, 1)):
        x = np.ascontiguousarray(base.transpose(axes)).transpose(np.argsort(axes))
        assert np.array_equal(x, base) and not x.flags.c_contiguous
        np.testing.assert_allclose(f(X=x), (base * 2).sum(1), rtol=1e-4, atol=1e-4)
    assert len(f._layout_variants) == 4


def test_matmul_and_a_multi_stage_program_on_fortran_inputs():
    A, B = tex.tensor("A", (M, K)), tex.tensor("B", (K, N))
    C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))
    a = rng.standard_normal((130, 257)).astype(np.float32)
    b = rng.standard_normal((257, 65)).astype(np.float32)
    got = tex.compile(C)(A=np.asfortranarray(a), B=np.asfortranarray(b))
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)

    X = tex.tensor("X", (M, N))
    mu = tex.compute("mu", (i,), tex.sum(X[i, j], over=j) / N)
    D = tex.compute("D", (i, j), X[i, j] - mu[i])
    V = tex.compute("V", (i,), tex.sum(D[i, j] * D[i, j], over=j) / N)
    Z = tex.compute("Z", (i, j), D[i, j] / tex.sqrt(V[i] + 1e-5))
    x = rng.standard_normal((300, 129)).astype(np.float32)
    d = x - x.mean(1, keepdims=True)
    want = d / np.sqrt((d * d).mean(1, keepdims=True) + 1e-5)
    z = tex.compile(Z)(X=np.asfortranarray(x))
    np.testing.assert_allclose(z, want, rtol=1e-4, atol=1e-4)
    assert z.flags.f_contiguous          # D and Z follow X's layout


def test_a_schedule_the_user_wrote_runs_as_written():
    E = _elementwise()
    s = tex.schedule(E)
    s[E].parallel(i)
    f = tex.compile(s)
    a, b = _pair((300, 301))
    got = f(X=np.asfortranarray(a), Y=np.asfortranarray(b))
    np.testing.assert_allclose(got, a * b + 1, rtol=1e-6)
    assert got.flags.c_contiguous and not f._layout_variants


def test_a_variant_is_compiled_once_and_small_arrays_run_as_they_are():
    f = tex.compile(_row_sums())
    a, b = _pair((300, 301))
    fa, fb = np.asfortranarray(a), np.asfortranarray(b)
    f(X=fa, Y=fb)
    before = jit.STATS["compiled"]
    for _ in range(3):
        f(X=fa, Y=fb)
    assert jit.STATS["compiled"] == before and len(f._layout_variants) == 1
    small = np.asfortranarray(a[:20, :20])                     # below tex.layout.SMALL
    np.testing.assert_allclose(f(X=small, Y=small), (small * small).sum(1), rtol=1e-5)
    assert len(f._layout_variants) == 1


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "int8", "uint16", "int64",
                                   "bool"])
def test_an_input_of_another_dtype_is_read_in_place_from_its_second_call(dtype):
    """A float64 definition given an array of a dtype that casts to float64 safely: its
    first call converts a copy, as before; from the second the variant for that dtype
    reads the array as it is and converts each element as it loads it, giving the same
    results (the cast is exact; a sum's order may follow the narrower vector width) --
    maps, reductions, out=, odd shapes."""
    X, Y = tex.tensor("X", (M, N), "float64"), tex.tensor("Y", (M, N), "float64")
    mean = tex.compute("Mu", (i,), tex.mean(X[i, j], over=j))
    f = tex.compile((mean, tex.compute("E", (i, j), X[i, j] * Y[i, j] - mean[i])))
    for shape in [(300, 301), (7, 4700)]:
        x = (rng.standard_normal(shape) * 100).astype(dtype)
        y = rng.standard_normal(shape)
        want = f(X=x.astype(np.float64), Y=y)
        for n in range(3):
            got = f(X=x, Y=y)
            np.testing.assert_allclose(got[0], want[0], rtol=1e-13, atol=1e-10)
            np.testing.assert_allclose(got[1], want[1], rtol=1e-13, atol=1e-10)
            # (the second shape runs the variant the first one made)
            assert (("dtypes", ((0, x.dtype.str),)) in f._layout_variants) is \
                (n > 0 or shape != (300, 301))
        out = (np.empty(shape[0]), np.empty(shape))
        assert f(X=x, Y=y, out=out)[1] is out[1]
        np.testing.assert_allclose(out[1], want[1], rtol=1e-13, atol=1e-10)
    assert sum(key[0] == "dtypes" for key in f._layout_variants if key != "dtypes seen") == 1


def test_what_a_dtype_variant_leaves_converted():
    """No variant below tex.layout.SMALL, for a cast that is not safe (compiled with
    casting='same_kind': rounded by astype as before), for a factor of a contraction
    (packed anyway), or for a list."""
    X = tex.tensor("X", (M, N), "float32")
    f = tex.compile(tex.compute("S", (i,), tex.sum(X[i, j], over=j)), casting="same_kind")
    big, small = rng.standard_normal((300, 301)), rng.standard_normal((20, 20))
    for x in (big, small, big.astype(np.float16)[:20, :20]):
        for _ in range(3):
            np.testing.assert_array_equal(f(x), f(x.astype(np.float32)))
    assert [key for key in f._layout_variants if key != "dtypes seen"] == []
    A, B = tex.tensor("A", (M, K), "float64"), tex.tensor("B", (K, N), "float64")
    mm = tex.compile(tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k)))
    a, b = rng.standard_normal((2, 200, 200)).astype(np.float32)
    for _ in range(3):
        np.testing.assert_allclose(mm(a, b), a.astype(np.float64) @ b, rtol=1e-10)
    assert [key for key in mm._layout_variants if key != "dtypes seen"] == []
    g = tex.compile(tex.compute("T", (i,), tex.sum(tex.tensor("Z", (M, N), "float64")[i, j],
                                                   over=j)))
    rows = [[1, 2, 3]] * 5000
    for _ in range(3):
        np.testing.assert_array_equal(g(rows), np.full(5000, 6.0))


def test_errors_name_the_arrays_as_the_user_gave_them():
    f = tex.compile(_elementwise())
    a, b = _pair((300, 301))
    with pytest.raises(ValueError, match="dimension 1") as err:
        f(X=np.asfortranarray(a), Y=np.asfortranarray(b[:, :300]))
    assert "301" in str(err.value) and "300" in str(err.value)


def test_a_pickled_function_keeps_its_variants():
    f = tex.compile(_elementwise())
    a, b = _pair((300, 301))
    data = pickle.dumps(f)
    runtime._LIVE.pop(f._token)              # rebuilt as in another process
    g = pickle.loads(data)
    assert g is not f and g._layout_flags is not None
    got = g(X=np.asfortranarray(a), Y=np.asfortranarray(b))
    np.testing.assert_allclose(got, a * b + 1, rtol=1e-6)


def test_the_rewrite_permutes_reads_and_the_followers():
    E = _elementwise()
    program = tex.compile(E).program
    rewritten, orders = permuted(program, {0: (1, 0), 1: (1, 0)})
    assert orders == ((1, 0),)
    (e,) = rewritten.outputs
    assert e.indices == (j, i) and tuple(map(str, e.shape)) == ("N", "M")
    assert [tuple(map(str, t.shape)) for t in rewritten.inputs] == [("N", "M")] * 2
    # one input moved, the other as written: no single order to follow
    rewritten, orders = permuted(program, {0: (1, 0)})
    assert orders == (None,) and rewritten.outputs[0].indices == (i, j)
    # with out=, the outputs stay as written
    assert permuted(program, {0: (1, 0), 1: (1, 0)}, outputs_follow=False)[1] == (None,)


# ---------------------------------------------------------------- random programs

LAYOUTS = ("c", "fortran", "transposed_view", "fortran_backwards")


def _laid_out(a, how):
    if how == "fortran":
        return np.asfortranarray(a)
    if how == "transposed_view":                    # axes swapped, then back: F strides
        return np.ascontiguousarray(a.T).T
    if how == "fortran_backwards":
        return np.asfortranarray(a[::-1])[::-1]
    return a


@st.composite
def _programs(draw):
    """Two or three (M, N) float32 inputs, each read as X[i, j] or X[j, i] from an
    (i, j) or (j, i) domain, an elementwise body, then nothing, a sum over j or a max
    over i; and the layout of each array."""
    m, n = draw(st.sampled_from([7, 65, 130, 300])), draw(st.sampled_from([63, 257, 1000]))
    count = draw(st.integers(2, 3))
    swapped = [draw(st.booleans()) for _ in range(count)]
    ops = [draw(st.sampled_from(["add", "multiply", "maximum"])) for _ in range(count - 1)]
    reduce = draw(st.sampled_from(["none", "sum_j", "max_i"]))
    out_swapped = draw(st.booleans())
    layouts = [draw(st.sampled_from(LAYOUTS)) for _ in range(count)]
    return m, n, swapped, ops, reduce, out_swapped, layouts, draw(st.integers(0, 2**31))


def _program(swapped, ops, reduce, out_swapped, dtype):
    """_programs' program over tensors of `dtype`."""
    ins = [tex.tensor(f"X{p}", (N, M) if s else (M, N), dtype) for p, s in enumerate(swapped)]
    reads = [t[j, i] if s else t[i, j] for t, s in zip(ins, swapped)]
    body = reads[0]
    for op, r in zip(ops, reads[1:]):
        body = tex.maximum(body, r) if op == "maximum" else body + r if op == "add" else body * r
    if reduce == "sum_j":
        return tex.compute("O", (i,), tex.sum(body, over=j))
    if reduce == "max_i":
        return tex.compute("O", (j,), tex.max(body, over=i))
    return tex.compute("O", (j, i) if out_swapped else (i, j), body)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(_programs())
@in_child
def test_random_programs_in_any_layout(case):
    m, n, swapped, ops, reduce, out_swapped, layouts, seed = case
    out = _program(swapped, ops, reduce, out_swapped, "float32")
    gen = np.random.default_rng(seed)
    values = [gen.standard_normal((n, m) if s else (m, n)).astype(np.float32) for s in swapped]
    arrays = [_laid_out(v, how) for v, how in zip(values, layouts)]
    want = evaluate(out, values)[0]
    got = tex.compile(out)(*arrays)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-4)


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(_programs(), st.lists(st.sampled_from(["float32", "float16", "int32", "int16", "uint8",
                                               "bool", "float64"]), min_size=3, max_size=3))
@in_child
def test_random_programs_read_inputs_of_other_dtypes_in_place(case, dtypes):
    """The programs above over float64 tensors, given arrays of dtypes that cast to it
    safely, in any layout: the first call (copies), the second and third (the variant
    for their dtypes, its reads cast, in their layout's variant) give the float64
    arrays' result in that layout, bit for bit but for a sum's order (the vector width
    follows the narrowest dtype read)."""
    m, n, swapped, ops, reduce, out_swapped, layouts, seed = case
    out = _program(swapped, ops, reduce, out_swapped, "float64")
    gen = np.random.default_rng(seed)
    values = [(gen.standard_normal((n, m) if s else (m, n)) * 50).astype(dt)
              for s, dt in zip(swapped, dtypes)]
    f = tex.compile(out)
    want = f(*[_laid_out(v.astype(np.float64), how) for v, how in zip(values, layouts)])
    arrays = [_laid_out(v, how) for v, how in zip(values, layouts)]
    for _ in range(3):
        if reduce == "sum_j":
            np.testing.assert_allclose(f(*arrays), want, rtol=1e-13, atol=1e-10)
        else:
            np.testing.assert_array_equal(f(*arrays), want)


def test_a_variant_that_fails_to_compile_leaves_the_call_as_it_was(monkeypatch):
    from tex.backends.llvm import layouts

    def broken(*args, **kwargs):
        raise RuntimeError("injected")
    monkeypatch.setattr(layouts, "permuted", broken)
    f = tex.compile(_elementwise())
    a, b = _pair((300, 301))
    with pytest.warns(RuntimeWarning, match="no variant for the layout.*injected"):
        got = f(X=np.asfortranarray(a), Y=b)
    np.testing.assert_allclose(got, a * b + 1, rtol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                 # once: no second warning
        got = f(X=np.asfortranarray(a), Y=b)
    np.testing.assert_allclose(got, a * b + 1, rtol=1e-6)


def test_a_dtype_variant_that_fails_to_compile_leaves_the_call_converting(monkeypatch):
    from tex.backends.llvm import layouts

    def broken(*args, **kwargs):
        raise RuntimeError("injected")
    monkeypatch.setattr(layouts, "retyped", broken)
    f = tex.compile(_elementwise())
    a, b = _pair((300, 301), np.float16)
    want = f(X=a.astype(np.float32), Y=b.astype(np.float32))
    np.testing.assert_array_equal(f(X=a, Y=b), want)        # the first call converts
    with pytest.warns(RuntimeWarning, match="no variant for the dtypes.*injected"):
        got = f(X=a, Y=b)
    np.testing.assert_array_equal(got, want)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                 # once: no second warning
        np.testing.assert_array_equal(f(X=a, Y=b), want)


def test_the_factors_of_a_contraction_stay_as_written():
    """Their packed copies read any layout; a matrix times a vector is no such product:
    its Fortran-ordered matrix gets the variant."""
    A, B = tex.tensor("A", (M, K)), tex.tensor("B", (K, N))
    f = tex.compile(tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k)))
    a = rng.standard_normal((130, 257)).astype(np.float32)
    b = rng.standard_normal((257, 65)).astype(np.float32)
    for x, y in ((np.asfortranarray(a), b), (a, np.asfortranarray(b)),
                 (np.asfortranarray(a), np.asfortranarray(b))):
        np.testing.assert_allclose(f(A=x, B=y), a @ b, rtol=1e-4, atol=1e-4)
    assert not f._layout_variants
    v = tex.tensor("v", (K,))
    g = tex.compile(tex.compute("y", (i,), tex.sum(A[i, k] * v[k], over=k)))
    np.testing.assert_allclose(g(A=np.asfortranarray(a), v=b[:, 0]), a @ b[:, 0], rtol=1e-4,
                               atol=1e-4)
    assert [key for key, _ in g._layout_variants] == [((0, (1, 0)),)]


def test_a_tuned_schedule_runs_as_tuned_in_any_layout(monkeypatch):
    from tex.scheduler import tunedb
    X = tex.tensor("X", (M, N))
    E = tex.compute("E", (i, j), X[i, j] * 2)

    def tuned(folder, program, fast_math, fuse, threads=None):
        s = tex.schedule(program)
        s[program.outputs[0]].split(program.outputs[0].indices[0], 7)
        return s
    monkeypatch.setattr(tunedb, "tuned_schedule", tuned)
    f = tex.compile(E)
    x = rng.standard_normal((300, 301)).astype(np.float32)
    np.testing.assert_array_equal(f(np.asfortranarray(x)), x * 2)
    assert f._layout_flags is None and not f._layout_variants
