"""The notebook experience: valid-range extents, user index names in messages and
printouts, numpy's protocols on expressions, weak Python scalars at call time,
re-declared tensors, calling a definition, and rich display."""
import re

import numpy as np
import pytest

import tex
from tex import html as tex_html
from tex.backends.llvm import codegen
from tex.backends.numpy_ref import evaluate

M, N, T, R = tex.sizes("M N T R")
i, j, k = tex.indices("i j k")


# ---------------------------------------------------------------- valid ranges

@pytest.mark.parametrize("t,r", [(20, 3), (7, 7), (65, 1), (63, 8), (5, 6)])
def test_valid_convolution_extent(t, r):
    xs, ws = tex.tensor("xs", (T,), "float32"), tex.tensor("ws", (R,), "float32")
    ti, ri = tex.indices("t r")
    y = tex.compute("y", (ti,), tex.sum(xs[ti + ri] * ws[ri], over=ri))
    assert y.shape == (T - R + 1,)
    f = tex.compile(y)
    rng = np.random.default_rng(t * r)
    a, w = rng.standard_normal(t).astype(np.float32), rng.standard_normal(r).astype(np.float32)
    want = np.correlate(a, w, "valid") if t >= r else np.zeros(0, np.float32)
    np.testing.assert_allclose(f(a, w), want, rtol=1e-5, atol=1e-5)


def test_valid_extent_through_several_indices_and_dilation():
    B, Ci, O = tex.sizes("B Ci O")
    b, o, c, t, r = tex.indices("b o c t r")
    x = tex.tensor("x", (B, Ci, T), "float64")
    w = tex.tensor("w", (O, Ci, R), "float64")
    y = tex.compute("y", (b, o, t), tex.sum(x[b, c, t + r] * w[o, c, r], over=(c, r)))
    dil = tex.compute("yd", (t,), tex.sum(x[0, 0, t + 2 * r] * w[0, 0, r], over=r))
    assert y.shape == (B, O, T - R + 1) and dil.shape == (T - 2 * R + 2,)
    rng = np.random.default_rng(0)
    xa, wa = rng.standard_normal((2, 3, 17)), rng.standard_normal((4, 3, 5))
    want = np.stack([np.stack([sum(np.correlate(xa[bb, cc], wa[oo, cc], "valid")
                                   for cc in range(3)) for oo in range(4)]) for bb in range(2)])
    np.testing.assert_allclose(tex.compile(y)(xa, wa), want, rtol=1e-12)
    got = tex.compile(dil)(xa, wa)
    np.testing.assert_allclose(got, [sum(xa[0, 0, tt + 2 * rr] * wa[0, 0, rr] for rr in range(5))
                                     for tt in range(17 - 8)], rtol=1e-12)


@pytest.mark.parametrize("n", [1, 7, 63, 65])
def test_two_slices_with_floor_division(n):
    X = tex.tensor("X", (M, N), "float32")
    H = N // 2
    G = tex.compute("G", (i, j), tex.gelu(X[i, j]) * X[i, j + H])
    assert G.shape == (M, N - N // 2)
    x = np.random.default_rng(n).standard_normal((3, n)).astype(np.float32)
    got = tex.compile(G)(x)
    np.testing.assert_allclose(got, evaluate(G, [x])[0], rtol=1e-6)
    assert got.shape == (3, n - n // 2)


def test_floor_division_in_shapes_end_to_end():
    X = tex.tensor("X", (N,), "float64")
    Y = tex.tensor("Yh", (N // 2,), "float64")
    Z = tex.compute("Z", (i,), X[i + N // 2] * Y[i] + N // 2)
    assert Z.type_str == "float64[min(N // 2, N - N // 2)]"
    f = tex.compile(Z)
    for n in (1, 7, 64, 65):
        x, y = np.arange(float(n)), np.arange(float(n // 2)) + 1
        np.testing.assert_array_equal(f(x, y), x[n // 2: n // 2 * 2] * y + n // 2)
    with pytest.raises(tex.ShapeError, match=r"tensor Yh, dimension 0"):
        f(np.ones(7), np.ones(4))


def test_non_integer_size_arithmetic_is_refused_with_the_fix():
    X = tex.tensor("X", (M, N), "float32")
    with pytest.raises(ValueError, match=r"N // 2, not N/2"):
        X[i, j + N / 2]
    with pytest.raises(ValueError, match=r"\(N \+ 1\) // 2"):
        tex.tensor("Y", ((N + 1) / 2,), "float32")
    with pytest.raises(ValueError, match=r"N // 2"):
        tex.indices("q", extent=N / 2)


def test_an_uninferable_extent_names_the_index():
    x = tex.tensor("x", (T,), "float32")
    t, r = tex.indices("t r")
    with pytest.raises(tex.ShapeError, match=r"index t\b.*tex.indices\('t', extent=") as err:
        tex.compute("y", (t,), tex.sum(x[t + r], over=r))
    assert "_t" not in str(err.value) and "_r" not in str(err.value)


# ---------------------------------------------------------------- user names

def test_messages_and_printouts_use_the_users_index_names():
    X = tex.tensor("X", (M, N), "float32")
    with pytest.raises(ValueError) as err:
        tex.sum(X[i, k], over=j)
    assert "index j" in str(err.value) and "_j" not in str(err.value)
    with pytest.raises(ValueError) as err:
        tex.compute("Z", (i,), X[i, j])
    assert "index j" in str(err.value) and "_" not in str(err.value).split("compute Z")[1]
    C = tex.compute("C", (i, k), tex.sum(X[i, j] * X[k, j], over=j))
    assert repr(C) == "C[i, k] = sum(X[i, j] * X[k, j], over=j)  # float32[M, M]"
    assert str(i) == "i" and repr((i, j)) == "(i, j)"
    assert "_i" not in str(tex.schedule(C)) and "_i" not in repr(C.extents)



def test_newaxis_in_an_access_is_refused_naming_the_tensor_and_dimension():
    X = tex.tensor("X", (M, N), "float32")
    with pytest.raises(TypeError, match=r"tensor X, dimension 0: None \(numpy's newaxis\)"):
        X[None, i]


def test_each_stage_prints_its_loops_by_the_names_its_primitives_take():
    """Two stages over i and j printed the second's loops as i_1 and j_1, names that
    s[R].split refused; the names printed apart are only those of nested loops."""
    X = tex.tensor("X", (M, N), "float32")
    C = tex.compute("C", (i, j), X[i, j] * 2.0)
    R = tex.compute("R", (i,), tex.sum(C[i, j], over=j))
    s = tex.schedule(R)
    printed = str(s)
    assert "_1" not in printed and printed.count("for i in 0..M:") == 2
    s[R].split("i", 4)
    assert "for io in 0..ceil(M/4):" in str(s)


# ---------------------------------------------------------------- numpy protocols

def test_numpy_ufuncs_build_tex_expressions():
    X = tex.tensor("X", (M, N), "float32")
    x = np.random.default_rng(1).standard_normal((7, 65)).astype(np.float32)
    exprs = {
        "e": (np.maximum(np.exp(X[i, j]), 1.0), np.maximum(np.exp(x), 1.0)),
        "s": (np.sqrt(np.abs(X[i, j])) + np.sin(X[i, j]), np.sqrt(np.abs(x)) + np.sin(x)),
        "w": (np.where(X[i, j] > 0, X[i, j], 0.5 * X[i, j]), np.where(x > 0, x, 0.5 * x)),
        "c": (np.clip(X[i, j], -1, 1) * np.float32(2), np.clip(x, -1, 1) * np.float32(2)),
        "r": (np.round(X[i, j] * 4) + np.floor(X[i, j]), np.round(x * 4) + np.floor(x)),
        "m": (np.minimum(X[i, j], 0) - np.negative(X[i, j]), np.minimum(x, 0) + x),
        "d": (np.divide(np.float32(1), 1 + np.exp(-X[i, j])), 1 / (1 + np.exp(-x))),
    }
    for name, (e, want) in exprs.items():
        assert isinstance(e, tex.expr.Expr), name
        got = tex.compile(tex.compute(name, (i, j), e))(x)
        assert got.dtype == want.dtype, name
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)


def test_numpy_functions_tex_lacks_are_refused_naming_the_tex_function():
    X = tex.tensor("X", (M, N), "float32")
    cases = [(lambda: np.sum(X[i, j]), "tex.sum"), (lambda: np.mean(X[i, j]), "tex.mean"),
             (lambda: np.add.reduce(X[i, j]), "tex.sum"), (lambda: np.fmax(X[i, j], 0), "tex.maximum"),
             (lambda: np.exp2(X[i, j]), "tex.exp"), (lambda: np.arctan(X[i, j]), "tex.sqrt"),
             (lambda: np.exp(X[i, j], out=None, dtype=np.float64), "tex.cast"),
             (lambda: np.ones(3) * X[i, j], "tex.tensor"),
             (lambda: max(X[i, j], 0), "tex.maximum"),
             (lambda: tex.max(X[i, j], 0), "tex.maximum"),
             (lambda: tex.min(X[i, j], 1.0), "tex.minimum"),
             (lambda: np.where(X[i, j] > 0), "tex.where")]
    for fn, name in cases:
        with pytest.raises(TypeError, match=name.replace(".", r"\.")):
            fn()


# ---------------------------------------------------------------- call-time inputs

def test_python_scalars_and_lists_are_weak_at_call_time():
    X = tex.tensor("X", (M, N), "float32")
    s0 = tex.tensor("s0", (), "float32")
    f = tex.compile(tex.compute("Z", (i, j), X[i, j] * s0[()]))
    x = np.random.default_rng(2).standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_array_equal(f(x, 0.5), x * np.float32(0.5))
    np.testing.assert_array_equal(f(x.tolist(), 2), x * np.float32(2))
    np.testing.assert_array_equal(f(X=x, s0=np.float32(3)), x * np.float32(3))
    v = tex.tensor("v", (N,), "int8")
    g = tex.compile(tex.compute("g", (i,), v[i] + 1))
    np.testing.assert_array_equal(g([1, 2, True]), np.array([2, 3, 2], np.int8))
    with pytest.raises(OverflowError):
        g([1, 300])
    with pytest.raises(TypeError, match=r"tensor v\b"):
        g([1.5])


def test_a_float64_array_for_float32_says_how_to_convert():
    X = tex.tensor("X", (M, N), "float32")
    C = tex.compute("C", (i, j), X[i, j] * 2)
    x = np.arange(6.0).reshape(2, 3)
    with pytest.raises(TypeError, match=r"tensor X.*a\.astype\(np\.float32\).*casting='same_kind'"):
        tex.compile(C)(x)
    f = tex.compile(C, casting="same_kind")
    np.testing.assert_array_equal(f(x), (x * 2).astype(np.float32))
    Xi = tex.tensor("Xi", (M,), "int32")
    g = tex.compile(tex.compute("Ci", (i,), Xi[i] + 1), casting="same_kind")
    with pytest.raises(TypeError, match="tensor Xi.*casting='unsafe'"):
        g(np.ones(3))
    with pytest.raises(ValueError, match="casting must be one of"):
        tex.compile(C, casting="sometimes")


# ---------------------------------------------------------------- re-run cells

def test_a_tensor_declared_again_is_the_same_tensor():
    A1 = tex.tensor("A", (M,), "float32")
    D1 = tex.compute("D1", (i,), A1[i] * 2.0)
    A2 = tex.tensor("A", (M,), "float32")             # the cell that declares A, re-run
    assert A2 is A1
    D2 = tex.compute("D2", (i,), A2[i] + D1[i])
    np.testing.assert_array_equal(tex.compile(D2)(np.ones(5, np.float32)), 3.0)
    A3 = tex.tensor("A", (M, N), "float32")           # same name, another shape
    D3 = tex.compute("D3", (i,), A3[i, 0] + D1[i])
    with pytest.raises(ValueError, match=r"named 'A'.*float32\[M, N\].*same name, shape and "
                                         r"dtype"):
        tex.compile(D3)
    assert tex.tensor("A", (M,), "float64") is not A1
    C1 = tex.compute("C", (i,), A1[i] * 2.0)
    R1 = tex.compute("R1", (i,), C1[i] + 1.0)
    C2 = tex.compute("C", (i,), A1[i] * 2.0)           # the cell that defines C, re-run
    R2 = tex.compute("R2", (i,), C2[i] + 1.0)
    with pytest.raises(ValueError, match=r"two definitions are named 'C' in one program: "
                                         r"each tex.compute makes a new one"):
        tex.compile((R1, R2))


# ---------------------------------------------------------------- calling a definition

def test_a_definition_is_callable_and_shows_its_signature():
    A = tex.tensor("A", (M, T), "float32")
    B = tex.tensor("B", (T, N), "float32")
    bias = tex.tensor("bias", (N,), "float32")
    C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k) + bias[j])
    rng = np.random.default_rng(4)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((3, 4), (4, 5), (5,)))
    np.testing.assert_allclose(C(a, b, c), a @ b + c, rtol=1e-5)
    np.testing.assert_allclose(C(bias=c, B=b, A=a), a @ b + c, rtol=1e-5)
    assert C.compiled is C.compiled
    assert "(A: float32[M, T], B: float32[T, N], bias: float32[N]) -> C: float32[M, N]" \
        in repr(C.compiled)
    assert "C(A, B, bias)" in C._repr_html_()


def test_a_compiled_functions_signature_has_every_input():
    """Jupyter's Shift-Tab and help() show inspect.signature: it took the call path of
    the function's one-off class for a method and dropped the first input."""
    import inspect
    A = tex.tensor("A", (M, T), "float32")
    B = tex.tensor("B", (M, T), "float32")
    f = tex.compile(tex.compute("C", (i, k), A[i, k] * B[i, k] * tex.param("P")))
    assert str(inspect.signature(f)) == "(A, B, *, P=None, out=None)"
    assert "program" in str(inspect.signature(type(f)))     # the class: its own


# ---------------------------------------------------------------- rich display

def _gemm_rowmax():
    A = tex.tensor("A", (M, T), "float32")
    B = tex.tensor("B", (T, N), "float32")
    C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))
    return A, C, tex.compute("Rm", (i,), tex.max(C[i, j], over=j))


def test_display_of_every_object_holds_what_it_is():
    A, C, Rm = _gemm_rowmax()
    assert repr(A) == "tex.tensor('A', (M, T), 'float32')"
    assert "float32[M, T]" in A._repr_html_()
    html = C._repr_html_()
    assert "C[i, j] = sum(A[i, k] * B[k, j], over=k)" in html and "reduced" in html
    s = tex.schedule(Rm)
    io, ii = s[C].split(i, 4)
    s.fuse(Rm)
    html = s._repr_html_()
    assert "for " in html and "Split(" in html and "Fuse(" in html
    assert "computed inside" in html and "<td>Rm (epilogue)</td>" in html  # Rm in C's kernel
    assert str(s) in html.replace("&gt;", ">").replace("&lt;", "<").replace("&#x27;", "'")
    stage = s[Rm]
    assert repr(stage).startswith("<stage Rm of a schedule of Rm: loops")
    assert "for " in stage._repr_html_()
    f = tex.compile(s)
    html = f._repr_html_()
    for part in ("tex_Rm(A: float32[M, T], B: float32[T, N]) -&gt; Rm: float32[M]",
                 "<details><summary>LLVM IR", "<details><summary>assembly", "for ",
                 "Rm (max over j) in its epilogue"):
        assert part in html, part
    assert "define" in html
    assert "<tex compiled tex_Rm(A: float32[M, T]" in repr(f)


def test_a_long_schedule_displays_collapsed():
    """The display of an auto-scheduled symbolic matmul showed its 13 nests (~860 lines)
    and 118 steps inline; past OPEN_LINES and OPEN_STEPS they are collapsed."""
    A = tex.tensor("A", (M, T), "float32")
    B = tex.tensor("B", (T, N), "float32")
    C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))
    short = tex.schedule(C)._repr_html_()
    assert "<details>" not in short and "C[i, j]" in short
    long = tex.schedule(C).auto()._repr_html_()
    assert long.count("<details>") == 2
    assert re.search(r"<details><summary>loop nest \(\d+ lines; print\(s\) shows it\)", long)
    assert "<details><summary>history (" in long


def test_ir_and_assembly_are_made_for_display_only(monkeypatch):
    _, _, Rm = _gemm_rowmax()
    built = []
    real = codegen.build
    monkeypatch.setattr(codegen, "build", lambda *a, **kw: built.append(1) or real(*a, **kw))
    tex.compile(Rm)
    f = tex.compile(Rm)                  # from the kernel cache: no IR made
    before = len(built)
    assert f._asm is None
    monkeypatch.setattr(tex_html, "ASM_IR_LINES", 10)
    html = f._repr_html_()
    assert len(built) == before + 1 and f._asm is None
    assert "assembly: not generated for display" in html
    monkeypatch.setattr(tex_html, "MAX_LINES", 5)
    assert "more lines" in f._repr_html_()


# ---------------------------------------------------------------- a numpy user's first tries

def test_first_tries_of_a_numpy_user_get_an_answer_that_names_the_fix():
    """Each of these crashed deep inside codegen, dropped data, or answered with Python's
    own signature error (a notebook audit's findings)."""
    A = tex.tensor("A", (M, N), "float32")
    msgs = {
        "index j appears twice in over=": lambda: tex.sum(A[i, j], over=(j, j)),
        r"tex.sum builds an expression over tensors.*np.sum": lambda: tex.sum(np.ones(3)),
        r"max: over= names the index": lambda: tex.max(A[i, j]),
        r"tensor A is used without indices: write A\[i, j\]": lambda: tex.sum(A, over=j),
        r"operand 1 is a numpy array, while operand 0 is the tex tensor A": lambda:
            tex.einsum("ij,ij->i", A, np.ones((2, 3), np.float32)),
        r"tex.indices: 'p' appears twice": lambda: tex.indices("p p"),
        r"tex.sizes: '1N' is not a name": lambda: tex.sizes("1N"),
        r"tensor name 'out' is taken": lambda: tex.tensor("out", (M,), "float32"),
        r"dimension 0: the string 'i' is not an index": lambda: A["i", j],
        r"write np.exp\(A\[i, j\]\)": lambda: np.exp(A),
        r"size M cannot be bound.*A1 has shape \(M \+ 1\).*write M as M1 - 1": lambda:
            tex.compute("Y", (i,), tex.tensor("A1", (M + 1,), "float32")[i])(np.ones(3)),
        r"size M cannot be bound.*A2 has M // 2: give that dimension a size of its own": lambda:
            tex.compute("Y", (i,), tex.tensor("A2", (M // 2,), "float32")[i])(np.ones(3)),
        r"parameter name 'out' is taken": lambda: tex.param("out"),
    }
    for msg, attempt in msgs.items():
        with pytest.raises((TypeError, ValueError), match=msg):
            attempt()


def test_numpy_integers_outputs_and_objects_at_the_call():
    A = tex.tensor("A", (M, N), "float32")
    S = tex.compute("S", (i,), tex.sum(A[i, j], over=j))
    X = tex.compute("X", (i,), tex.max(A[i, j], over=j))
    s = tex.schedule(S)
    s[S].split(s[S].loops[0], np.int64(4))         # a factor from an array's shape
    assert "factor=4," in repr(s.history)
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    f = tex.compile((S, X))
    o1, o2 = np.empty(3, np.float32), np.empty(3, np.float64)
    got = f(a, out=[o1, None])                      # a list, None to allocate (as ufuncs)
    assert got[0] is o1 and np.array_equal(got[1], a.max(1))
    got = f(a, out=(None, o2))
    assert got[1] is o2 and np.array_equal(o2, a.max(1)) and np.array_equal(got[0], a.sum(1))
    with pytest.raises(ValueError, match="out= needs a tuple of 2 arrays, got 1"):
        f(a, out=o1)
    g = tex.compile(S)
    assert g(a, out=(o1,)) is o1                      # one output: the array, as numpy
    with pytest.raises(TypeError, match="tensor A: expected an array of float32, got object"):
        g(object())
    from fractions import Fraction          # what numpy converts is converted, as before
    half = tex.compile(tex.compute("H", (i,), tex.tensor("V", (M,), "float64")[i] *
                                   tex.tensor("s0", (), "float64")[()]), casting="unsafe")
    np.testing.assert_array_equal(half(np.ones(2), Fraction(1, 2)), [0.5, 0.5])


def test_float32_constants_print_as_written():
    X = tex.tensor("X", (M, N), "float32")
    E = tex.compute("E", (i, j), tex.clip(X[i, j], 0, 1) + 0.1 + 1e-5)
    assert "0.1" in str(E) and "1e-05" in str(E) and "0.100000001" not in str(E)
    assert "0.10000000149" not in str(tex.schedule(E))


def test_a_definition_prints_as_written():
    """Nested reductions are lifted into stages of their own (mu_sum0), which the
    definition's printout showed in their place; dtype= was dropped from it."""
    X = tex.tensor("X", (M, N), "float32")
    mu = tex.compute("mu", (i,), tex.sum(X[i, j], over=j) / N)
    assert repr(mu) == "mu[i] = sum(X[i, j], over=j) / N  # float32[M]"
    assert mu.notation == "mu[i] = mu_sum0[i] / N"          # its stage's, as schedules show
    wide = tex.compute("w", (i,), tex.sum(X[i, j], over=j, dtype="float64"))
    assert repr(wide) == "w[i] = sum(X[i, j], over=j, dtype=float64)  # float64[M]"
    assert "maximum(" not in repr(tex.compute("v", (i,), tex.var(X[i, j], over=j)))
    import pickle
    from tex.tensor import Definition
    data = pickle.dumps(mu)
    del Definition._live[mu.uid]            # as in another process: a new object
    assert repr(pickle.loads(data)) == repr(mu)


def test_a_nest_says_what_its_call_time_part_counts_are():
    """`C_column_parts` and `C_parts` appear in loop extents with no definition a user
    wrote: the printed nest says what they are."""
    A = tex.tensor("A", (M, N), "float32")
    B = tex.tensor("B", (N, T), "float32")
    C = tex.compute("C", (i, k), tex.sum(A[i, j] * B[j, k], over=j))
    R = tex.compute("R", (i,), tex.max(C[i, k], over=k))
    text = tex.compile(R).loop_nest
    assert "# C_column_parts: the parts the threads share the column blocks in, chosen at " \
           "each call" in text, text
