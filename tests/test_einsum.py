"""tex.einsum against numpy.einsum: hand-written cases, every refusal, the kernel cache,
tex tensors in (IR out), and hypothesis-generated subscripts over dtypes, broadcasting and
strided views. Floats are compared with an error bound that grows with the contraction
length; integers and bools exactly (wrapping sums agree in any order)."""
import importlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tex
from isolate import in_child
from tex.backends.numpy_ref import evaluate

einsum_module = importlib.import_module("tex.einsum")
RNG = np.random.default_rng(1234)


def random_array(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind == "u":
        return rng.integers(0, 6, shape).astype(dtype)
    if dtype.kind == "i":
        return rng.integers(-4, 5, shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def assert_close(got, expected, subscripts, operands):
    """Same type (numpy scalar or ndarray), dtype and shape; values exact for bool and
    integers, within a rounding bound for floats: eps * (terms + operands) * sum |terms|."""
    assert type(got) is type(expected), (type(got), type(expected))
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if expected.dtype.kind in "biu":
        np.testing.assert_array_equal(got, expected)
        return
    # (complex operands and results: their magnitudes and the modulus of the error)
    as64 = [np.abs(op).astype(np.float64) if np.iscomplexobj(op) else
            np.asarray(op, dtype=np.float64) for op in operands]
    terms = np.einsum(subscripts, *[np.ones_like(a) for a in as64])
    magnitude = np.einsum(subscripts, *[np.abs(a) for a in as64])
    eps = np.finfo(expected.dtype).eps
    bound = 4 * eps * (terms + len(operands)) * magnitude + 4 * np.finfo(expected.dtype).tiny
    wide = np.complex128 if expected.dtype.kind == "c" else np.float64
    error = np.abs(np.asarray(got, wide) - np.asarray(expected, wide))
    assert np.all(error <= bound), f"max error {np.max(error)} above bound"


def check(subscripts, *operands, **kwargs):
    expected = np.einsum(subscripts, *operands, **kwargs)
    got = tex.einsum(subscripts, *operands, **kwargs)
    assert_close(got, expected, subscripts, operands)
    return got


def arrays(*shapes, dtype=np.float64):
    return [random_array(RNG, s, dtype) for s in shapes]


# ---------------------------------------------------------------- hand-written cases

CASES = [
    ("ik,kj->ij", (3, 4), (4, 5)),                  # matmul
    ("ik,kj", (3, 4), (4, 5)),                      # implicit output
    ("bik,bkj->bij", (2, 3, 4), (2, 4, 5)),         # batched
    ("ki,jk->ij", (4, 3), (5, 4)),                  # transposed operands
    ("ij->ji", (3, 4),),
    ("ij", (3, 4),),
    ("ji", (3, 4),),                                # implicit output is sorted: a transpose
    ("ii", (4, 4),),                                # trace
    ("ii->", (4, 4),),
    ("ii->i", (4, 4),),                             # diagonal
    ("iij->ij", (3, 3, 5),),
    ("iji->j", (3, 5, 3),),
    ("i,j->ij", (3,), (4,)),                        # outer product
    ("i,j", (3,), (4,)),
    ("i,i->", (7,), (7,)),                          # dot
    ("i,i->i", (7,), (7,)),
    ("ij->", (3, 4),),
    ("ij->i", (3, 4),),
    ("ij->j", (3, 4),),
    ("...ij,...jk->...ik", (2, 1, 3, 4), (5, 4, 2)),  # ellipsis with broadcasting
    ("...ij,...jk", (2, 3, 4), (2, 4, 5)),
    ("i...->...", (3, 2, 4),),
    ("...i->...", (2, 3),),
    ("...,...", (3, 1), (4,)),
    ("a...b,b...->a...", (2, 3, 4), (4, 3)),
    ("ij,ij->ij", (1, 3), (2, 3)),                  # size-1 broadcasting of a named label
    ("ij,ij->", (2, 1), (2, 3)),
    ("ii,i->i", (1, 1), (3,)),
    ("i,->i", (3,), ()),                            # 0-d operands
    (",->", (), ()),
    ("->", (),),
    ("", (),),
    ("i->", (0,),),                                 # empty sum
    ("ij,jk->ik", (0, 3), (3, 2)),
    ("ij,jk->ik", (2, 0), (0, 2)),
    ("ij,jk,kl->il", (3, 4), (4, 5), (5, 2)),       # 3 and 4 operands: pairwise chains
    ("ij,jk,kl,lm->im", (2, 3), (3, 4), (4, 5), (5, 2)),
    ("ijk,kji,j->", (2, 3, 4), (4, 3, 2), (3,)),
    ("ab,bc,cd,de", (2, 3), (3, 4), (4, 2), (2, 5)),
    ("i,i,i->i", (4,), (4,), (4,)),
    ("ij,ij,j->ij", (1, 3), (2, 3), (3,)),
    ("Ab,bA->A", (2, 3), (3, 2)),                   # uppercase labels
    ("aA", (2, 3),),
    ("i j , j k -> i k", (2, 3), (3, 4)),           # spaces are ignored
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] or "empty" for c in CASES])
def test_case(case):
    subscripts, *shapes = case
    check(subscripts, *arrays(*shapes))


@pytest.mark.parametrize("dtype", ["bool", "int8", "int16", "int32", "int64", "uint8",
                                   "float16", "float32", "float64"])
def test_dtypes(dtype):
    a, b = arrays((5, 7), (7, 3), dtype=dtype)
    check("ik,kj->ij", a, b)
    check("ij->", a)
    check("ii->i", arrays((6, 6), dtype=dtype)[0])


def test_integer_sums_wrap_as_numpy():
    a = np.full(300, 100, np.int8)
    check("i,i->", a, a)
    check("i->", np.full(1000, 200, np.uint8))


def test_bool_is_or_of_ands():
    a = np.array([[True, False], [False, False]])
    got = check("ij,jk->ik", a, a)
    assert got.dtype == np.bool_


def test_mixed_dtypes_and_python_operands():
    check("i,i->i", np.arange(4, dtype=np.int8), np.linspace(0, 1, 4, dtype=np.float32))
    check("i,i", np.arange(4, dtype=np.uint8), np.arange(4, dtype=np.int8))
    check("i,->i", np.ones(3, np.float32), 2)           # a Python int is an int64 array
    check("i,i", [1, 2, 3], [4, 5, 6])
    check("ij->", [[1.5, 2.0], [3.0, 4.0]])


def test_dtype_and_casting():
    a = RNG.integers(-100, 100, (4, 50)).astype(np.int8)
    check("ij->i", a, dtype=np.int32)
    check("ij->i", a, dtype="int64")
    x = RNG.standard_normal((3, 4))
    check("ij->", x, dtype=np.float32, casting="same_kind")
    check("ij->i", x * 10, dtype=np.int32, casting="unsafe")
    check("i,i", np.ones(3, np.float16), np.ones(3, np.float16), dtype=np.float64)
    with pytest.raises(TypeError, match="according to the rule 'safe'"):
        tex.einsum("ij->", x, dtype=np.int32)
    with pytest.raises(TypeError, match="rule 'no'"):
        tex.einsum("i,i", np.ones(3, np.int8), np.ones(3, np.float32), casting="no")
    with pytest.raises(ValueError, match="casting must be one of"):
        tex.einsum("ij->", x, casting="bogus")


def test_strided_and_transposed_views():
    a, b = arrays((6, 8), (8, 5))
    check("ik,kj->ij", a[::2, ::-1], b[::-1, ::2].T.T)
    check("ij,jk", a.T, a)
    check("ii->i", a[:, :6][::-1, ::-1])
    check("i,i", a[0, ::-3], a[1, 1::3])


def test_fortran_ordered_and_transposed_operands_run_in_their_own_layout():
    """An operand whose strides are not row-major runs as the einsum of its row-major
    transpose, labels permuted with it (tex/layout.py): the kernel the call compiles is
    keyed by the permuted subscripts, and the results, order=, out= and error messages
    are those of the call as written, and a map's result has its operands' layout, as
    numpy's order='K' gives it. The side of a product that the register tile broadcasts
    stays as written."""
    from tex.backends.llvm import warm
    a, b = arrays((63, 650), (650, 7))              # above layout.SMALL, as float64
    f, g = np.asfortranarray(a), np.asfortranarray(b)
    cube = RNG.standard_normal((17, 15, 23)).transpose(2, 0, 1)    # b's stride the least
    cases = [("ij->i", f), ("ij->j", f), ("ij", f), ("ij->ji", f), ("ij->", f),
             ("ij,ij->ij", f, a), ("ij,ij->i", f, f), ("ij,jk->ik", f, g), ("ij,jk", a, g),
             ("bij->bi", cube), ("bij,bij->ib", cube, cube.copy()), ("ii->i", f[:7, :7]),
             ("ij,j->i", f[::2, ::-3], a[0, ::3]), ("ij->i", f[:, 1:2])]
    for subscripts, *operands in cases:
        check(subscripts, *operands)
    warm._guards.clear()
    tex.einsum("ij->i", f)
    tex.einsum("ij,jk->ik", f, g)
    tex.einsum("bij->bi", cube)
    assert {"ji->i", "ij,kj->ik", "ijb->bi"} <= set(warm._guards), sorted(warm._guards)
    assert "ij->i" not in warm._guards and "ij,jk->ik" not in warm._guards
    tex.einsum("ij->i", f[:8, :8])                  # below layout.SMALL: runs as it is
    assert "ij->i" in warm._guards
    # a diagonal reads the same elements in either order: its own kernel, no rewrite
    # (a trace of a transposed 1024 x 1024 took 11.5 us through it, 2.3 now)
    warm._guards.clear()
    square = np.asfortranarray(RNG.standard_normal((100, 100)))     # above SMALL
    assert tex.einsum("ii->", square) == pytest.approx(np.trace(square))
    assert set(warm._guards) == {"ii->"}, sorted(warm._guards)
    from tex.layout import checked_operands
    assert checked_operands("ii->", 1) == checked_operands("ii,jj->ij", 2) == frozenset()
    assert checked_operands("ij,jj->i", 2) == {0}
    assert tex.einsum("ij,ij->ij", f, f, order="A").flags.f_contiguous
    assert tex.einsum("ij,ij->ij", f, f, order="C").flags.c_contiguous
    # order='K': a map over operands of one layout writes its result in that layout,
    # as numpy does (the kernel of `ji,ji->ji`, its result transposed back)
    for subscripts, *operands in [("ij,ij->ij", f, f), ("ij", f), ("ij,ij", f, f),
                                  ("bij,bij->bij", cube, cube), ("bij->jbi", cube),
                                  ("ij,ij->ij", f, a), ("ij,ij->ji", f, f)]:
        got, want = check(subscripts, *operands), np.einsum(subscripts, *operands)
        assert got.strides == want.strides, (subscripts, got.strides, want.strides)
    assert "ji,ji->ji" in warm._guards
    out = np.empty((63, 7), order="F")[::-1]
    assert tex.einsum("ij,jk->ik", f, g, out=out) is out
    np.testing.assert_allclose(out, a @ b)
    for bad in [(f, f), (f, a)]:
        with pytest.raises(ValueError) as as_written:
            tex.einsum("ij,jk->ik", *bad)
        with pytest.raises(ValueError) as row_major:
            tex.einsum("ij,jk->ik", *[np.ascontiguousarray(x) for x in bad])
        assert str(as_written.value) == str(row_major.value)


def test_tall_products_of_a_k_major_operand_run_transposed():
    """A product whose broadcast side is read k-major (`ki,kj->ij`, or `ik,kj->ij` with
    A a transposed view), at least TALL rows per column, at most NARROW columns and a
    reduction of at least LONG runs as `ki,kj->ji`, its result copied out C-ordered;
    on each side of each bound the results match numpy, first call and guard path, and
    the guard of the kernel as written refuses the shapes that run transposed."""
    from tex import layout
    from tex.backends.llvm import warm
    rng = np.random.default_rng(3)
    tall, narrow, long = layout.TALL, layout.NARROW, layout.LONG
    shapes = [(tall * 7, long, 7, True), (tall * 7 - 1, long, 7, False),
              (tall * 7, long - 1, 7, False), (tall * (narrow + 1), long, narrow + 1, False),
              (tall * narrow, long + 5, narrow, True), (130, 1100, 1, True)]
    tex.einsum("ki,kj->ij", *arrays((3, 5), (3, 2), dtype=np.float32))
    for m, k, n, transposed in shapes:
        x = rng.standard_normal((k, m)).astype(np.float32)
        w = rng.standard_normal((k, n)).astype(np.float32)
        want = x.T.astype(np.float64) @ w
        for subscripts, operands in [("ki,kj->ij", (x, w)), ("ik,kj->ij", (x.T, w)),
                                     ("kj,ki->ij", (w, x)), ("ki,kj", (x, w))]:
            assert (layout.transposed_product(subscripts, operands) is not None) is \
                transposed, (subscripts, m, k, n)
            for _ in range(2):
                got = tex.einsum(subscripts, *operands)
                assert got.flags.c_contiguous and got.dtype == np.float32
                np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * k ** 0.5)
        if n > 1:
            assert (warm._guards["ki,kj->ij"](x, w) is warm.MISS) is transposed
    with pytest.raises(ValueError, match="subscript 'k' has size"):
        tex.einsum("ki,kj->ij", x, w[:-1])


def test_out():
    a, b = arrays((3, 4), (4, 5))
    out = np.empty((3, 5))
    assert tex.einsum("ik,kj->ij", a, b, out=out) is out
    np.testing.assert_allclose(out, a @ b)
    wide = np.zeros((3, 10))                                   # a non-contiguous out
    tex.einsum("ik,kj->ij", a, b, out=wide[:, ::2])
    np.testing.assert_allclose(wide[:, ::2], a @ b)
    out64 = np.empty((3, 5))                                   # float32 operands, float64 out
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    got = tex.einsum("ik,kj->ij", a32, b32, out=out64)
    assert got is out64
    # computed in float64, as numpy does (the common dtype of the operands and out=)
    np.testing.assert_allclose(out64, a32.astype(np.float64) @ b32.astype(np.float64),
                               rtol=1e-12)
    scalar_out = np.empty(())
    assert tex.einsum("ij->", a, out=scalar_out) is scalar_out
    np.testing.assert_allclose(scalar_out, a.sum())          # the value, not only the object
    with pytest.raises(TypeError, match="operand 1 dtype, according to the rule 'safe'"):
        tex.einsum("ij->i", a, out=np.zeros(3, np.float32))
    with pytest.raises(ValueError):
        tex.einsum("ij->i", a, out=np.zeros(4))
    with pytest.raises(TypeError, match="out must be an array"):
        tex.einsum("ij->i", a, out=[0.0, 0.0, 0.0])


def test_out_of_the_result_dtype_takes_the_guard(monkeypatch):
    """The warm path's guard takes `out=` when it is an ndarray of the result's dtype
    (the general path cost 3-4 us more a call); any other `out` (another dtype, a list,
    a 0-d result's) and a refused shape still go the general path, with its casts and
    numpy's messages."""
    from tex.backends.llvm import warm
    a, b = (x.astype(np.float32) for x in arrays((3, 4), (4, 5)))
    want = a.astype(np.float64) @ b.astype(np.float64)
    out = np.empty((3, 5), np.float32)
    tex.einsum("ik,kj->ij", a, b, out=out)                  # compiled, guard in place
    general = warm._full[0]

    def refuse(*args, **kwargs):
        raise AssertionError("took the general path")
    monkeypatch.setattr(warm, "_full", [refuse])
    out[:] = 0
    assert tex.einsum("ik,kj->ij", a, b, out=out) is out
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    strided = np.zeros((3, 10), np.float32)[:, ::2]
    assert tex.einsum("ik,kj->ij", a, b, out=strided) is strided
    np.testing.assert_allclose(strided, want, rtol=1e-5, atol=1e-5)
    for other in (np.empty((3, 5)), np.empty((5, 3), np.float32), [[0.0] * 5] * 3):
        with pytest.raises(AssertionError, match="general path"):
            tex.einsum("ik,kj->ij", a, b, out=other)
    monkeypatch.setattr(warm, "_full", [general])
    out64 = np.empty((3, 5))
    assert tex.einsum("ik,kj->ij", a, b, out=out64) is out64
    np.testing.assert_allclose(out64, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError):
        tex.einsum("ik,kj->ij", a, b, out=np.empty((5, 3), np.float32))


def test_out_overlapping_an_input():
    a = RNG.standard_normal((4, 4))
    expected = np.einsum("ij->ji", a.copy())
    tex.einsum("ij->ji", a, out=a)
    np.testing.assert_array_equal(a, expected)


def test_order():
    a, b = arrays((3, 4), (4, 5))
    assert tex.einsum("ik,kj->ij", a, b, order="F").flags.f_contiguous
    assert tex.einsum("ik,kj->ij", a, b, order="C").flags.c_contiguous
    f = tex.einsum("ik,kj->ij", np.asfortranarray(a), np.asfortranarray(b), order="A")
    assert f.flags.f_contiguous
    with pytest.raises(ValueError, match="order must be one of"):
        tex.einsum("ik,kj->ij", a, b, order="X")


def test_optimize_and_paths():
    a, b, c = arrays((3, 4), (4, 5), (5, 2))
    for optimize in (False, True, "greedy", "optimal", ["einsum_path", (1, 2), (0, 1)]):
        check("ij,jk,kl->il", a, b, c, optimize=optimize)
    with pytest.raises(ValueError, match="1 more operands has to be contracted"):
        tex.einsum("ij,jk,kl->il", a, b, c, optimize=["einsum_path", (1, 2)])
    with pytest.raises(ValueError, match="optimize"):
        tex.einsum("ij,jk,kl->il", a, b, c, optimize="bogus")


def test_interleaved_form():
    a, b = arrays((3, 4), (4, 5))
    expected = np.einsum(a, [0, 1], b, [1, 2], [0, 2])
    np.testing.assert_allclose(tex.einsum(a, [0, 1], b, [1, 2], [0, 2]), expected)
    np.testing.assert_allclose(tex.einsum(a, [Ellipsis, 1], [1, Ellipsis]),
                               np.einsum(a, [..., 1], [1, ...]))


def test_scalar_result_is_a_numpy_scalar():
    x = np.arange(8, dtype=np.float32)
    got = tex.einsum("i,i->", x, x)
    assert type(got) is np.float32 and got == np.float32(140)
    assert type(tex.einsum("->", 3)) is np.int64


# ---------------------------------------------------------------- refusals

ERRORS = [
    ("i,i", [(3,)], "operands provided to einstein sum function than specified"),
    ("i", [(3,), (3,)], "operands provided to einstein sum function than specified"),
    ("i->i->", [(3,)], "invalid subscript '-'"),
    ("i-", [(3,)], "does not contain proper '->'"),
    ("i>", [(3,)], "invalid subscript '>'"),
    ("i$", [(3,)], r"invalid subscript '\$'"),
    ("i1", [(3, 3)], "invalid subscript '1'"),
    ("i->j", [(3,)], "output subscript 'j' which never appeared in an input"),
    ("i->ii", [(3,)], "output subscript 'i' multiple times"),
    ("....i", [(3,)], r"'\.' that is not part of an ellipsis \('\.\.\.'\) in operand 0"),
    ("..i", [(3,)], "not part of an ellipsis"),
    ("...i...", [(3,)], "not part of an ellipsis"),
    ("i->....", [(3,)], r"not part of an ellipsis \('\.\.\.'\) in the output"),
    ("ij", [(3,)], "too many subscripts for operand 0"),
    ("ab...c", [(2, 3)], "too many subscripts for operand 0"),
    ("i", [(2, 3)], "operand has more dimensions than subscripts"),
    ("...i->", [(2, 3)], "output has more dimensions than subscripts"),
    ("ii", [(2, 3)], "collapsing index 'i' don't match \\(2 != 3\\)"),
    ("ii->i", [(1, 3)], "collapsing index 'i'"),
    ("ij,jk", [(2, 3), (4, 5)], "operands could not be broadcast together"),
    ("i,i->", [(3,), (4,)], "operands could not be broadcast together"),
    ("...,...", [(3, 2), (4,)], "operands could not be broadcast together"),
    ("", [], "at least one operand"),
]


@pytest.mark.parametrize("subscripts, shapes, match", ERRORS, ids=[e[0] or "empty" for e in ERRORS])
def test_refusals(subscripts, shapes, match):
    operands = arrays(*shapes)
    with pytest.raises(ValueError, match=match):
        np.einsum(subscripts, *operands)          # numpy refuses it too
    with pytest.raises(ValueError, match=match):
        tex.einsum(subscripts, *operands)


def test_operand_count_message_says_which():
    """numpy's message has 'more' and 'fewer' the wrong way round; tex's does not."""
    with pytest.raises(ValueError, match=r"fewer operands .* \(1 operands for 2 terms"):
        tex.einsum("i,i", np.ones(3))
    with pytest.raises(ValueError, match=r"more operands .* \(2 operands for 1 terms"):
        tex.einsum("i", np.ones(3), np.ones(3))
    # a product's subscripts with matrices: the layout checks of the front door run
    # first and must leave the count to this message (they raised IndexError)
    a = np.ones((4, 4), np.float32)
    with pytest.raises(ValueError, match=r"fewer operands .* \(1 operands for 2 terms"):
        tex.einsum("ij,jk->ik", a)
    with pytest.raises(ValueError, match=r"more operands .* \(3 operands for 2 terms"):
        tex.einsum("ij,jk", a, a, a)


def test_size_mismatch_after_a_cached_call():
    """A cached kernel refuses sizes that do not match, with numpy's wording."""
    tex.einsum("ij,jk->ik", *arrays((2, 3), (3, 4)))
    with pytest.raises(ValueError, match="could not be broadcast together"):
        tex.einsum("ij,jk->ik", *arrays((2, 3), (5, 4)))
    tex.einsum("ii->i", *arrays((3, 3)))
    with pytest.raises(ValueError, match="collapsing index 'i'"):
        tex.einsum("ii->i", *arrays((3, 4)))


def test_unsupported_dtype():
    for dt in (np.longdouble, np.clongdouble):
        if np.dtype(dt).itemsize > 8 * (2 if np.dtype(dt).kind == "c" else 1):
            with pytest.raises(TypeError, match="does not support"):
                tex.einsum("i,i", np.ones(3, dt), np.ones(3))


COMPLEX_CASES = [
    ("ik,kj->ij", [(5, 7), (7, 3)], ["complex128", "complex128"]),
    ("ik,kj->ij", [(65, 63), (63, 17)], ["complex64", "complex64"]),
    ("ik,kj", [(5, 7), (7, 3)], ["complex128", "float64"]),        # one real operand
    ("ik,kj", [(5, 7), (7, 3)], ["int32", "complex64"]),           # -> complex128
    ("i,i", [(7,), (7,)], ["complex64", "complex64"]),             # a numpy scalar
    ("ii", [(4, 4)], ["complex128"]),
    ("ij,jk,kl->il", [(4, 5), (5, 6), (6, 3)], ["complex128"] * 3),   # eight real terms
    ("...i,...i->...", [(2, 3, 4), (3, 4)], ["complex128", "complex128"]),
    ("bij,bjk->bik", [(3, 4, 5), (3, 5, 2)], ["complex64", "complex64"]),
    ("i,j->ij", [(0,), (4,)], ["complex128", "complex128"]),       # zero-size
]


@pytest.mark.parametrize("subscripts,shapes,dts", COMPLEX_CASES)
def test_complex_operands_are_einsums_of_their_parts(subscripts, shapes, dts):
    rng = np.random.default_rng(21)
    operands = [random_array(rng, s, d) for s, d in zip(shapes, dts)]
    check(subscripts, *operands)
    views = [op.T.copy().T if op.ndim == 2 else op[::-1].copy()[::-1] for op in operands]
    check(subscripts, *views)                    # (F-ordered, reversed: parts in place)


def test_complex_keywords_behave_as_in_numpy():
    rng = np.random.default_rng(22)
    a, b = (random_array(rng, s, "complex128") for s in ((4, 5), (5, 3)))
    out = np.empty((4, 3), np.complex128)
    assert tex.einsum("ij,jk->ik", a, b, out=out) is out
    np.testing.assert_allclose(out, a @ b, rtol=1e-12)
    with pytest.raises(TypeError, match="from dtype\\('complex128'\\) to "
                                        "dtype\\('complex64'\\)"):
        tex.einsum("ij,jk->ik", a, b, dtype=np.complex64)
    got = tex.einsum("ij,jk->ik", a, b, dtype=np.complex64, casting="same_kind")
    assert got.dtype == np.complex64
    np.testing.assert_allclose(got, a @ b, rtol=1e-5)
    with pytest.warns(np.exceptions.ComplexWarning):        # numpy drops the imaginary parts
        got = tex.einsum("ij,jk->ik", a, b, dtype=np.float64, casting="unsafe")
    np.testing.assert_allclose(got, a.real @ b.real, rtol=1e-12)
    with pytest.raises(TypeError):
        tex.einsum("ij,jk->ik", a, b, out=np.empty((4, 3)))   # complex into float: unsafe
    x = np.arange(3.0)
    assert tex.einsum("i,i", x, x, dtype=complex) == np.einsum("i,i", x, x, dtype=complex)
    o = np.zeros((), np.complex64)
    assert tex.einsum("i,i", x.astype(np.float32), x.astype(np.float32), out=o) is o and o == 5


# ---------------------------------------------------------------- the kernel cache

@pytest.fixture
def count_compiles(monkeypatch):
    calls = []
    real = einsum_module.compile_program

    def counting(program, sizes=None):
        calls.append(program)
        return real(program, sizes)
    monkeypatch.setattr(einsum_module, "compile_program", counting)
    return calls


def test_kernels_are_cached(count_compiles):
    x = np.ones(5, np.float64)
    tex.einsum("q,q->", x, x)
    tex.einsum("q,q->", x[:3], x[:3])                  # other sizes: same kernel
    tex.einsum("q,q->", x.astype(np.float32), x.astype(np.float32))   # new dtype
    tex.einsum("q,q->", x, x, optimize=True)           # optimize does not matter for 2
    assert len(count_compiles) == 2


def test_which_dims_are_one_is_part_of_the_key(count_compiles):
    """'qr,qr->qr' with a size-1 dimension broadcasts it: another kernel (declared 1, read
    at 0); calls alternate between the kernels correctly, and none is compiled twice."""
    for shapes in [((1, 3), (2, 3)), ((2, 3), (2, 3)), ((1, 3), (2, 3)), ((1, 3), (1, 3)),
                   ((2, 1), (2, 3)), ((2, 3), (1, 3))]:
        check("qr,qr->qr", *arrays(*shapes))
    programs = [repr(p) for p in count_compiles]
    assert len(programs) >= 4 and len(set(programs)) == len(programs)


def test_the_guards_test_of_ones_is_the_keys_pattern():
    """The fast path's generated test of an operand's 1s (warm._ones_test) holds exactly
    when the operand's pattern of 1s, as the kernel key records it, is the kernel's."""
    import itertools
    from tex.backends.llvm.warm import _ones_test
    shapes = [s for r in range(4) for s in itertools.product((1, 2, 7), repeat=r)]
    for pattern in [(True,), (True, False), (False, True), (True, True), (False, True, False)]:
        test = compile(_ones_test("x0", pattern), "<test>", "eval")
        for shape in shapes:
            x0 = np.empty(shape)
            assert eval(test, {"x0": x0}) == (tuple(d == 1 for d in shape) == pattern), \
                (pattern, shape)


def test_a_label_of_ones_has_extent_one(count_compiles):
    """A label whose every dimension is 1 (a row vector's rows) is the constant 1 in the
    kernel, which then gets the row vector's schedule; other patterns of 1s, called in
    between through the same subscripts' fast path, get their own kernels."""
    guards = []
    for shapes in [((1, 70), (70, 33)), ((5, 70), (70, 33)), ((1, 70), (70, 33)),
                   ((1, 9), (9, 1)), ((4, 9), (9, 1))]:
        check("uv,vw->uw", *arrays(*shapes))      # subscripts no other test compiles
        guards.append(einsum_module._guards["uv,vw->uw"])
    # the symbolic kernel's fast path refused the row vector: its own kernel ran again
    assert guards[2] is guards[0] and guards[1] is not guards[0]
    first = count_compiles[0]
    assert first.definitions[0].extents[first.definitions[0].indices[0]] == 1
    assert "n_u" in repr(count_compiles[1])


# ---------------------------------------------------------------- tex tensors: IR

def test_tex_tensors_build_ir():
    M, K, N = tex.sizes("M K N")
    A, B = tex.tensor("A", (M, K), "float32"), tex.tensor("B", (K, N), "float32")
    v = tex.tensor("v", (N,), "float32")
    E = tex.einsum("ik,kj->ij", A, B)
    assert isinstance(E, tex.Definition) and E.shape == (M, N) and E.dtype == np.float32
    F = tex.einsum("ij,j->i", E, v)                    # einsums compose: unique names
    assert F.name != E.name
    a, b, x = arrays((3, 4), (4, 5), (5,), dtype=np.float32)
    f = tex.compile(F)
    # float32 sums of 20 products: an element near 0 needs the absolute tolerance
    np.testing.assert_allclose(f(a, b, x), a @ b @ x, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="could not be broadcast together"):
        tex.einsum("ik,kj->ij", A, tex.tensor("C", (N, N), "float32"))
    with pytest.raises(TypeError, match="out="):
        tex.einsum("ik,kj->ij", A, B, out=np.empty((3, 5)))


def test_einsum_program_from_specs():
    program = tex.einsum_program("ik,kj->ij", ((3, 4), "float32"), np.ones((4, 5), np.float32))
    assert isinstance(program, tex.Program)
    assert [t.dtype for t in program.inputs] == [np.float32, np.float32]
    assert len(program.sizes) == 3                     # one size symbol per label


REFERENCE_CASES = [
    ("ik,kj->ij", [(5, 7), (7, 3)], "float32"),
    ("ii->i", [(4, 4)], "int16"),
    ("ij,ij,j->ij", [(1, 3), (2, 3), (3,)], "float64"),
    ("...ij,...jk", [(2, 3, 4), (1, 4, 5)], "float64"),
    ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)], "int32"),
    ("i,i->", [(9,), (9,)], "bool"),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], "float16"),
]


@pytest.mark.parametrize("subscripts, shapes, dtype", REFERENCE_CASES,
                         ids=[c[0] for c in REFERENCE_CASES])
def test_reference_and_compiled_agree(subscripts, shapes, dtype):
    """One program, two evaluators: the numpy reference and the compiled kernel."""
    operands = arrays(*shapes, dtype=dtype)
    program = tex.einsum_program(subscripts, *operands)
    order = [program.inputs.index(program.tensor(f"op{k}")) for k in range(len(operands))]
    inputs = [None] * len(operands)
    for k, pos in enumerate(order):
        inputs[pos] = operands[k]
    reference = evaluate(program, inputs)[0]
    compiled = tex.compile(program)(*inputs)
    if reference.dtype.kind in "biu":
        np.testing.assert_array_equal(compiled, reference)
    else:
        rtol = {"float64": 1e-12, "float32": 1e-5, "float16": 2e-3}[reference.dtype.name]
        np.testing.assert_allclose(compiled, reference, rtol=rtol, atol=rtol)
    assert_close(np.asarray(compiled), np.asarray(np.einsum(subscripts, *operands)),
                 subscripts, operands)


# ---------------------------------------------------------------- generated cases

LABELS = "abcdeAB"
SIZES = [0, 1, 1, 2, 2, 3, 3, 4, 5, 6, 7, 8, 9, 63, 65, 257]
DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64",
          "complex64", "complex128"]
MAX_POINTS = 6000          # bound on the product of all label sizes (numpy's loop nest)
MAX_ELEMENTS = 4096        # bound on one operand's size


def view(rng, shape, dtype, layout):
    """An array of `shape` with the given memory layout (values from rng)."""
    if layout == "transposed" and len(shape) > 1:
        return random_array(rng, shape[::-1], dtype).T
    if layout == "strided" and shape:
        return random_array(rng, (2 * shape[0],) + shape[1:], dtype)[::2]
    if layout == "reversed" and shape:
        return random_array(rng, shape, dtype)[::-1]
    return random_array(rng, shape, dtype)


@st.composite
def einsum_cases(draw):
    labels = draw(st.permutations(LABELS))[:draw(st.integers(1, 5))]
    size = {lb: draw(st.sampled_from(SIZES)) for lb in labels}
    while np.prod([max(s, 1) for s in size.values()]) > MAX_POINTS:
        size[max(size, key=size.get)] = 3
    width = draw(st.integers(0, 2))
    ellipsis_shape = tuple(draw(st.integers(1, 4)) for _ in range(width))
    terms, shapes = [], []
    for _ in range(draw(st.integers(1, 4))):
        term = draw(st.lists(st.sampled_from(labels), max_size=4))   # repeats: diagonals
        ones = {lb for lb in term if draw(st.integers(0, 4)) == 0}   # broadcast this label
        shape = [1 if lb in ones else size[lb] for lb in term]
        while np.prod(shape) > MAX_ELEMENTS:
            term, shape = term[:-1], shape[:-1]
        if draw(st.booleans()):
            at = draw(st.integers(0, len(term)))
            w = draw(st.integers(0, width))
            dims = [1 if draw(st.integers(0, 3)) == 0 else d for d in ellipsis_shape[width - w:]]
            term = term[:at] + ["..."] + term[at:]
            shape = shape[:at] + dims + shape[at:]
        terms.append("".join(term))
        shapes.append(tuple(shape))
    subscripts = ",".join(terms)
    if draw(st.booleans()):                      # explicit output
        used = sorted({c for t in terms for c in t if c != "."})
        out = draw(st.permutations(used))[:draw(st.integers(0, len(used)))]
        has_ellipsis = any("..." in t for t in terms)
        if has_ellipsis and (width > 0 or draw(st.booleans())):
            out.insert(draw(st.integers(0, len(out))), "...")
        subscripts += "->" + "".join(out)
    if draw(st.integers(0, 3)) == 0:
        dtypes = [draw(st.sampled_from(DTYPES)) for _ in shapes]
    else:
        dtypes = [draw(st.sampled_from(DTYPES))] * len(shapes)
    layouts = [draw(st.sampled_from(["contiguous", "transposed", "strided", "reversed"]))
               for _ in shapes]
    return subscripts, shapes, dtypes, layouts, draw(st.integers(0, 2**32 - 1))


def examples(n):
    """max_examples=n unless a hypothesis profile asks for more (--hypothesis-profile)."""
    default = settings.default.max_examples
    return default if default > n and default != 100 else n


@settings(max_examples=examples(200), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(einsum_cases())
@in_child
def test_generated(case):
    """Runs in a child process: generated code that crashes fails the example."""
    subscripts, shapes, dtypes, layouts, seed = case
    rng = np.random.default_rng(seed)
    operands = [view(rng, s, d, lay) for s, d, lay in zip(shapes, dtypes, layouts)]
    try:
        expected = np.einsum(subscripts, *operands)
    except ValueError:                           # e.g. a broadcast ellipsis that numpy refuses
        with pytest.raises(ValueError):
            tex.einsum(subscripts, *operands)
        return
    got = tex.einsum(subscripts, *operands)
    assert_close(got, expected, subscripts, operands)
    if len(operands) >= 3:                       # the pairwise order did not change the result
        assert_close(tex.einsum(subscripts, *operands, optimize="optimal"), expected,
                     subscripts, operands)


def test_out_of_a_wider_dtype_is_the_computations_dtype_as_in_numpy():
    """numpy computes in the common dtype of the operands and out=: bools summed into
    an int64 out= count, int8 products into int64 do not wrap, float32 into float64 is
    computed in float64 (tex computed in the operands' dtype, then cast: 1 for 3)."""
    o = np.zeros((), np.int64)
    assert tex.einsum("i->", np.ones(3, bool), out=o) == 3 and o == 3
    o = np.zeros(2, np.int64)
    tex.einsum("ij->i", np.full((2, 100), 100, np.int8), out=o)
    assert o.tolist() == [10000, 10000]          # (in int8: 16)
    rng = np.random.default_rng(2)
    a = rng.standard_normal(1000).astype(np.float32)
    o = np.zeros((), np.float64)
    tex.einsum("i,i->", a, a, out=o)
    want = np.zeros((), np.float64)
    np.einsum("i,i->", a, a, out=want)
    assert abs(float(o) - float(want)) <= 1e-9 * abs(float(want))
    for din, dout in [("bool", "int8"), ("uint8", "int16"), ("int32", "float64"),
                      ("float16", "float32"), ("int8", "float32")]:
        x = rng.integers(0, 3, (4, 6)).astype(din)
        got, want = np.zeros(4, dout), np.zeros(4, dout)
        np.einsum("ij->i", x, out=want)
        tex.einsum("ij->i", x, out=got)
        np.testing.assert_array_equal(got, want)


def test_bytes_subscripts_and_order_none_as_numpy_takes_them():
    x = np.arange(4.0)
    assert tex.einsum(b"i->", x) == np.einsum(b"i->", x) == 6.0
    np.testing.assert_array_equal(tex.einsum("i,i->i", x, x, order=None), x * x)


def test_a_one_operand_relabeling_is_a_view_as_numpy_gives_it():
    a = np.arange(9.0).reshape(3, 3)
    tex.einsum("ii->i", a)[:] = 0                     # numpy's idiom: zero the diagonal
    assert (np.diag(a) == 0).all()
    b = np.arange(6.0).reshape(2, 3)
    tex.einsum("ij->ji", b)[0, 1] = -1
    assert b[1, 0] == -1
    c = np.arange(24.0).reshape(2, 3, 4)
    for spec in ("ji", "ijk->kji", "i...->...i", "...ij->...ji"):
        got = tex.einsum(spec, c if "k" in spec or "." in spec else b)
        want = np.einsum(spec, c if "k" in spec or "." in spec else b)
        assert np.shares_memory(got, want) and got.shape == want.shape, spec
    d = np.arange(16.0).reshape(4, 4)
    assert tex.einsum("ii", d) == np.trace(d)          # a sum: computed, as in numpy
    # dtype= asks for a computed result (numpy ignores it on this path and gives float64)
    e = tex.einsum("ij->ji", d, dtype=np.float32, casting="same_kind")
    assert e.dtype == np.float32 and not np.shares_memory(e, d)


def test_a_retry_copies_a_broadcast_operand_as_the_elements_it_has():
    """A misaligned operand, or out= over an input, makes the kernel run again on copies:
    a broadcast view is copied as its base (numpy needs no copy at all)."""
    import tracemalloc
    raw = np.frombuffer(b"\0" + np.ones(2, np.float64).tobytes(), np.float64, offset=1)
    wide = np.broadcast_to(np.float64(2.0), (2, 4_000_000))      # 64 MB if copied whole
    tracemalloc.start()
    try:
        got = tex.einsum("i,ij->i", raw, wide)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_allclose(got, [8e6, 8e6])
    assert peak < 8 << 20, peak
    x = np.ones(3_000_000)
    tracemalloc.start()
    try:
        tex.einsum("ij->j", np.broadcast_to(x, (8, x.size)), out=x)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (x == 8).all() and peak < 48 << 20, peak             # (x's copy: 24 MB)


def test_a_non_native_result_dtype_is_named_as_such():
    with pytest.raises(TypeError, match="'>f4' is float32 in the other byte order"):
        tex.einsum("ij->i", np.ones((3, 3), np.float32), dtype=">f4")


def test_dtype_with_an_out_that_cannot_cast_back_is_refused_as_numpy_refuses_it():
    a = np.arange(12, dtype=np.int8).reshape(3, 4)
    for out_dtype in (np.int64, np.float64):
        with pytest.raises(TypeError, match="could not be cast from"):
            np.einsum("ij->i", a, dtype=np.int32, out=np.zeros(3, out_dtype))
        with pytest.raises(TypeError, match="could not be cast from"):
            tex.einsum("ij->i", a, dtype=np.int32, out=np.zeros(3, out_dtype))
        out = np.zeros(3, out_dtype)
        tex.einsum("ij->i", a, dtype=np.int32, out=out, casting="unsafe")
        np.testing.assert_array_equal(out, np.einsum("ij->i", a, dtype=np.int32))
