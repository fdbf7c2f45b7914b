"""Explicit vector loops (schedule/vectorize.py, vector_plan.py, backends/llvm/vector.py) against
plain numpy (reductions: np.sum/prod/max/min/argmax with the test's own accumulator,
never the scheduler's identities; elementwise bodies: the NumPy reference): every combiner and dtype with both tails, awkward sizes, non-contiguous rows,
guards, rows of accumulators (matmul in i, k, j order), loop start offsets, the width
rule and the scalar fallbacks. Each compiled function is reused across all sizes and
layouts."""
import numpy as np
import pytest
import tex.symbolic as sp

import tex
from tex.backends import numpy_ref
from tex.backends.llvm import codegen, jit, runtime
from tex.scheduler import target as targets, vectorize
from tex.scheduler.vector_plan import plan_vector_loop
from tex.scheduler.ir import Loop, LoopKind, Update, map_nest, walk

M, N, K = tex.sizes("M N K")
SIZES = [0, 1, 7, 15, 16, 17, 63, 64, 65, 511, 513, 1000]
ROWS = 3
DTYPES = ["float32", "float64", "int8", "int16", "int32", "int64", "bool"]
COMBINERS = ["sum", "prod", "max", "min", "argmax", "argmin"]


def _data(rng, dtype, shape, combiner=None):
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.random(shape) < 0.3
    if dt.kind == "f":
        if combiner == "prod":
            return rng.uniform(0.9, 1.1, shape).astype(dt)
        a = np.round(rng.standard_normal(shape), 1).astype(dt)      # rounded: ties
        if combiner in ("max", "min", "argmax", "argmin") and a.size:
            a.flat[rng.integers(0, a.size, max(1, a.size // 500))] = np.nan
        return a
    if combiner in ("argmax", "argmin"):
        return rng.integers(-3, 4, shape).astype(dt)                # many ties
    info = np.iinfo(dt)
    return rng.integers(max(info.min, -1000), min(info.max, 1000) + 1, shape).astype(dt)


def _layouts(rng, make, n):
    """The same logical (ROWS, n) array as several views: contiguous, every other
    column, rows reversed, transposed storage, columns reversed."""
    a = make((ROWS, n))
    wide = make((ROWS, 2 * n))
    yield "contiguous", a
    yield "columns[::2]", wide[:, ::2]
    yield "rows[::-1]", a[::-1]
    yield "transposed", np.ascontiguousarray(a.T).T
    yield "columns[::-1]", a[:, ::-1]


def _check(got, want, dtype, n=1):
    """Exact for integers and bools; for floats what an n-term sum in `dtype` may differ
    by from numpy's pairwise one: a few eps * sqrt(n) relative, and eps * n absolute for
    results that cancel to near zero (values are about 1 in size)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.dtype, want.dtype)
    if np.dtype(dtype).kind == "f" and want.dtype.kind == "f":
        eps = np.finfo(np.dtype(dtype)).eps
        np.testing.assert_allclose(got, want, rtol=4 * eps * np.sqrt(n + 1),
                                   atol=2 * eps * (n + 1), equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


def _accumulator(combiner, dtype):
    if combiner == "sum" and dtype == "int8":
        return "int32"                                  # widening in registers, exact
    if combiner in ("sum", "prod") and dtype != "bool":
        return dtype
    return None


def _numpy_reduce(combiner, dtype, axis=1):
    """Plain numpy's answer to _row_reduction(combiner, dtype) over `axis` (bool sums and
    products count in int64 as numpy's do; max/min of an empty row raise ValueError)."""
    acc = _accumulator(combiner, dtype)

    def oracle(a):
        if combiner in ("sum", "prod"):
            return getattr(np, combiner)(a, axis=axis, dtype=acc)
        return getattr(np, combiner)(a, axis=axis)
    return oracle


def _row_reduction(combiner, dtype):
    i, j = tex.indices("i j")
    X = tex.tensor("X", (M, N), dtype)
    acc = _accumulator(combiner, dtype)
    if combiner in ("argmax", "argmin"):
        return tex.compute("R", (i,), getattr(tex, combiner)(X[i, j], over=j))
    return tex.compute("R", (i,), getattr(tex, combiner)(X[i, j], over=j, dtype=acc))


def _schedules(defn):
    """Vectorize the innermost loop directly (mask tail, symbolic extent) and after a
    split by 64 (peel tail, extent Min(64, N - 64*jo))."""
    s = tex.schedule(defn)
    s[defn].vectorize(s[defn].loops[-1], tail="mask")
    yield "mask", s
    s = tex.schedule(defn)
    _, ji = s[defn].split(s[defn].loops[-1], 64)
    s[defn].vectorize(ji, tail="peel")
    yield "peel", s


def _differential(f, defn, make, sizes=SIZES, dtype=None, oracle=None):
    """f against `oracle(a)` (plain numpy; default the NumPy reference, for elementwise
    bodies) on every size and layout."""
    for loop in _vector_loops(f.kernel):            # the vector path, not a fallback
        assert not isinstance(plan_vector_loop(loop), str), plan_vector_loop(loop)
    oracle = oracle or (lambda a: numpy_ref.evaluate(defn, [a])[0])
    rng = np.random.default_rng(0)
    for n in sizes:
        for layout, a in _layouts(rng, make, n):
            try:
                want = oracle(a)
            except ValueError:                   # max over an empty row: numpy refuses
                with pytest.raises(ValueError, match="zero-size array"):
                    f(a)
                continue
            got = f(a)
            try:
                _check(got, want, dtype or a.dtype, n)
            except AssertionError as err:
                raise AssertionError(f"n={n}, {layout}: {err}") from None


@pytest.mark.parametrize("combiner", COMBINERS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_row_reductions(combiner, dtype):
    """Bool prod included: numpy counts it in int64, as tex does, through its own path."""
    defn = _row_reduction(combiner, dtype)
    rng = np.random.default_rng(1)
    for _, s in _schedules(defn):
        f = tex.compile(s)
        _differential(f, defn, lambda shape: _data(rng, dtype, shape, combiner),
                      oracle=_numpy_reduce(combiner, dtype))


@pytest.mark.parametrize("combiner", ["max", "min", "argmax", "argmin"])
@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8"])
def test_rows_at_the_integer_extremes(combiner, dtype):
    """Rows made only of the dtype's lowest value (max, argmax) or highest (min, argmin),
    the value a wrong identity gets wrong, and rows with one such value among others."""
    defn = _row_reduction(combiner, dtype)
    info = np.iinfo(dtype)
    extreme = info.min if combiner in ("max", "argmax") else info.max
    other = info.max if extreme == info.min else info.min

    def make(shape):
        a = np.full(shape, extreme, dtype)
        if a.size and shape[0] > 1:
            a[1] = other
            a[-1, ::3] = other
        return a
    for _, s in _schedules(defn):
        _differential(tex.compile(s), defn, make, [1, 7, 16, 17, 65, 1000],
                      oracle=_numpy_reduce(combiner, dtype))


def test_int8_sum_widens_in_registers(monkeypatch):
    monkeypatch.setattr(vectorize, "USE_VNNI", False)
    defn = _row_reduction("sum", "int8")
    s = next(_schedules(defn))[1]
    f = tex.compile(s)
    w = plan_vector_loop(_vector_loops(s.kernel())[0]).width
    assert f"load <{w} x i8>" in f.llvm_ir and f"sext <{w} x i8>" in f.llvm_ir
    a = np.full((2, 1000), 127, np.int8)              # overflows int8, not int32
    assert f(a).tolist() == [127000, 127000]
    if jit.Host.get().has_feature("avx512f"):
        assert "vpmovsxbd" in f.asm and "zmm" in f.asm


def test_host_registers_in_asm():
    host = jit.Host.get()
    if not host.triple.startswith("x86_64"):
        pytest.skip("register names checked on x86-64 only")
    reg = {512: "zmm", 256: "ymm", 128: "xmm"}[targets.target().vector_bits]
    defn = _row_reduction("sum", "float32")
    f = tex.compile(next(_schedules(defn))[1])
    assert f"%{reg}" in f.asm


def _vector_loops(kernel):
    return [n for n in walk(kernel) if isinstance(n, Loop) and n.kind is LoopKind.VECTOR]


def test_width_rule():
    # (W at 512, 256, 128 bits), U: the main loop's accumulators span U registers
    cases = {("sum", "int8"): ((64, 32, 16), 1), ("sum", "float32"): ((16, 8, 4), 4),
             ("sum", "float64"): ((8, 4, 2), 4), ("argmax", "float32"): ((16, 8, 4), 4),
             ("max", "int16"): ((32, 16, 8), 4)}
    for (combiner, dtype), (widths, unroll) in cases.items():
        s = next(_schedules(_row_reduction(combiner, dtype)))[1]
        loop = _vector_loops(s.kernel())[0]
        plans = [plan_vector_loop(loop, bits=bits) for bits in (512, 256, 128)]
        assert tuple(p.width for p in plans) == widths, (combiner, dtype)
        assert {p.unroll for p in plans} == {unroll}, (combiner, dtype)
    # int8 -> int64: 64 lanes of int64 would take 8 registers; the rule caps it at 4
    i, j = tex.indices("i j")
    X = tex.tensor("X", (M, N), "int8")
    S = tex.compute("S", (i,), tex.sum(X[i, j], over=j))
    s = next(_schedules(S))[1]
    assert plan_vector_loop(_vector_loops(s.kernel())[0], bits=512).width == 32
    # a constant extent bounds the width: 8 columns get 8 lanes (mask: 5 get 8)
    s = tex.schedule(S)
    _, ji = s[S].split(j, 8)
    s[S].vectorize(ji)
    assert plan_vector_loop(_vector_loops(s.kernel())[0], bits=512).width == 8


def test_scalar_fallbacks():
    """A float sum without fast_math keeps the sequential order: the loop stays scalar."""
    s = next(_schedules(_row_reduction("sum", "float32")))[1]

    def strict(node):
        return node.replace(fast_math=False) if isinstance(node, Update) else node
    kernel = map_nest(s.kernel(), strict)
    why = plan_vector_loop(_vector_loops(kernel)[0])
    assert isinstance(why, str) and "fast_math" in why
    f = _compile_kernel(s.program, kernel, "tex_vector_strict_sum")
    assert "x float>" not in f.llvm_ir
    a = np.random.default_rng(8).standard_normal((ROWS, 1000)).astype(np.float32) * 1e3
    sequential = np.cumsum(a, axis=1, dtype=np.float32)[:, -1]
    assert f(a).tolist() == sequential.tolist()


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "int16", "int32", "int64"])
def test_elementwise(dtype):
    i, j = tex.indices("i j")
    X = tex.tensor("X", (M, N), dtype)
    x = X[i, j]
    if np.dtype(dtype).kind == "f":
        body = tex.where(x > 0, tex.exp(x) * 2, -x) + tex.abs(x) * j - tex.gelu(x) \
            + tex.maximum(x, 0.5) + (x * 100).astype("int16")
    else:
        body = (x // 3) % 5 + tex.abs(x) * 2 + tex.maximum(x, 0) + x ** 2 \
            + (x > 1).astype(dtype) + x.astype("float32") * 0.5 + j
    E = tex.compute("E", (i, j), body)
    B = tex.compute("B", (i, j), (x > 0) & (x < 3))
    rng = np.random.default_rng(2)
    for defn in (E, B):
        for _, s in _schedules(defn):
            f = tex.compile(s)
            _differential(f, defn, lambda shape: _data(rng, dtype, shape), SIZES[:10], dtype)


def test_bool_rows():
    i, j = tex.indices("i j")
    X = tex.tensor("X", (M, N), "bool")
    x = X[i, j]
    E = tex.compute("E", (i, j), (~x) | (x & (x ^ tex.where(x, x, x))))
    S = tex.compute("S", (i,), tex.sum(X[i, j], over=j))            # bool -> int64
    rng = np.random.default_rng(3)
    for defn in (E, S):
        for _, s in _schedules(defn):
            _differential(tex.compile(s), defn, lambda shape: _data(rng, "bool", shape),
                          oracle=None if defn is E else _numpy_reduce("sum", "bool"))


@pytest.mark.parametrize("dtype,acc", [("float32", None), ("int8", "int32"),
                                       ("float32", "float64")])
def test_matmul_rows_of_accumulators(dtype, acc):
    """C[i, j] += A[i, k] * B[k, j] in i, k, j order with j vectorized: the init, update
    and write-back loops over j are vector loops whose targets move with j."""
    i, j, k = tex.indices("i j k")
    A = tex.tensor("A", (M, K), dtype)
    B = tex.tensor("B", (K, N), dtype)
    C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k, dtype=acc))
    rng = np.random.default_rng(4)
    for tail in ("mask", "peel"):
        s = tex.schedule(C)
        s[C].reorder(i, k, j)
        s[C].vectorize(j, tail=tail)
        f = tex.compile(s)
        assert len(_vector_loops(s.kernel())) >= 2
        for m, kk, n in [(1, 1, 1), (3, 5, 17), (7, 16, 64), (4, 9, 65), (2, 3, 1000), (3, 0, 9)]:
            a, b = _data(rng, dtype, (m, kk)), _data(rng, dtype, (kk, n))
            for bb in (b, np.asfortranarray(b)):
                # products in the operands' dtype (int8 wraps, as numpy's do), summed in acc
                want = (a[:, :, None] * bb[None, :, :]).sum(axis=1, dtype=acc)
                _check(f(a, bb), want, dtype, kk)


@pytest.mark.parametrize("combiner", ["argmax", "max", "sum"])
def test_column_reductions(combiner):
    """ij->j with the reduction outside: accumulator and position rows move with j."""
    i, j = tex.indices("i j")
    Y = tex.tensor("Y", (M, N), "float64")
    R = tex.compute("R", (j,), getattr(tex, combiner)(Y[i, j], over=i))
    s = tex.schedule(R)
    s[R].reorder(i, j)
    s[R].vectorize(j, tail="mask")
    f = tex.compile(s)
    rng = np.random.default_rng(5)
    _differential(f, R, lambda shape: _data(rng, "float64", shape, combiner), SIZES,
                  oracle=_numpy_reduce(combiner, "float64", axis=0))


def test_full_reduction_and_guard_tail():
    """ij-> (one accumulator for the whole nest), and a split with tail='guard' whose
    guard inside the vector loop becomes a lane mask."""
    i, j = tex.indices("i j")
    Y = tex.tensor("Y", (M, N), "float32")
    F = tex.compute("F", (), tex.sum(Y[i, j], over=(i, j)))
    G = tex.compute("G", (i,), tex.argmax(Y[i, j] * 2, over=j))
    H = tex.compute("H", (i, j), Y[i, j] * 3 + j)
    rng = np.random.default_rng(6)
    for defn in (F, G, H):
        s = tex.schedule(defn)
        if defn is F:
            s[F].vectorize(s[F].loops[-1], tail="peel")
        else:
            _, ji = s[defn].split(s[defn].loops[-1], 16, tail="guard")
            s[defn].vectorize(ji, tail="peel")
        f = tex.compile(s)
        if defn is not F:                                   # the guard is a lane mask
            w = plan_vector_loop(_vector_loops(s.kernel())[0]).width
            assert f"<{w} x i1>" in f.llvm_ir
        oracle = {F: lambda a: np.sum(a, dtype=np.float32),
                  G: lambda a: np.argmax(a * np.float32(2), axis=1), H: None}[defn]
        _differential(f, defn, lambda shape: _data(rng, "float32", shape, "max"), SIZES,
                      oracle=oracle)


def _compile_kernel(program, kernel, symbol):
    return runtime.compile_kernel(program, kernel, name=symbol)


@pytest.mark.parametrize("tail", ["mask", "peel"])
def test_loop_start_offset(tail):
    """A vector loop that starts at 5 (for j in 5..N): lanes are counted from the start."""
    i, j = tex.indices("i j")
    X = tex.tensor("X", (M, N), "int16")
    S = tex.compute("S", (i,), tex.argmin(X[i, j], over=j))
    s = tex.schedule(S)
    s[S].vectorize(s[S].loops[-1], tail=tail)
    kernel = s.kernel()

    def shift(node):
        if isinstance(node, Loop) and node.kind is LoopKind.VECTOR:
            return node.replace(start=sp.Integer(5), extent=node.extent - 5)
        return node
    kernel = map_nest(kernel, shift)
    f = _compile_kernel(s.program, kernel, f"tex_vector_offset_{tail}")
    rng = np.random.default_rng(7)
    for n in SIZES:
        a = _data(rng, "int16", (ROWS, n), "argmin")
        if n == 0:                        # numpy refuses an argmin over an empty axis
            with pytest.raises(ValueError, match="zero-size array"):
                f(a)
            continue
        want = np.argmin(a[:, 5:], axis=1) + 5 if n > 5 else np.zeros(ROWS, np.int64)
        assert f(a).tolist() == want.tolist(), n


@pytest.mark.parametrize("bits", [256, 128])
def test_narrower_hosts(bits):
    """The width rule on AVX2 and SSE-sized registers (this CPU with the wider vector
    extensions turned off: code that runs here)."""
    with targets.overriding(targets.host().narrowed(min(bits, targets.host().vector_bits))):
        _narrower_host_cases(bits)


def _narrower_host_cases(bits):
    i, j = tex.indices("i j")
    X = tex.tensor("X", (M, N), "int8")
    Y = tex.tensor("Y", (M, N), "float64")
    cases = [(tex.compute("S", (i,), tex.sum(X[i, j], over=j, dtype="int32")), "int8", "sum"),
             (tex.compute("A", (i,), tex.argmax(Y[i, j], over=j)), "float64", "argmax"),
             (tex.compute("E", (i, j), tex.exp(Y[i, j]) - j), "float64", None)]
    rng = np.random.default_rng(9)
    for defn, dtype, combiner in cases:
        for _, s in _schedules(defn):
            f = tex.compile(s)
            w = plan_vector_loop(_vector_loops(s.kernel())[0], bits=bits).width
            assert f"<{w} x " in f.llvm_ir
            _differential(f, defn, lambda shape: _data(rng, dtype, shape, combiner),
                          oracle=combiner and _numpy_reduce(combiner, dtype))


# ---------------------------------------------------------------- innermost reductions
STRATEGY_SIZES = [0, 1, 7, 63, 64, 65, 513, 1000]


def _strategy(defn, name, tail):
    s = tex.schedule(defn)
    s[defn].reduction_strategy(name, tail=tail)
    return s


def _opt_ir(f):
    return str(jit.optimized_module(f.llvm_ir))


@pytest.mark.parametrize("vnni", [True, False])
def test_int8_strategies_exact(vnni, monkeypatch):
    """int8 -> int32 row sums under each strategy and tail, with and without VNNI, on
    awkward sizes and non-contiguous rows (inner_parallel's lanes step by the row stride:
    a gather), values at the int8 extremes (the sums overflow int8, not int32)."""
    if vnni and not targets.target().vnni_widths:
        pytest.skip("no VNNI on this host: the VNNI path cannot run (vnni=False covers the rest)")
    monkeypatch.setattr(vectorize, "USE_VNNI", vnni)
    defn = _row_reduction("sum", "int8")
    rng = np.random.default_rng(11)

    def make(shape):
        a = rng.integers(-128, 128, shape).astype(np.int8)
        if a.size:
            a.flat[rng.integers(0, a.size, max(1, a.size // 3))] = 127
            a[-1] = -128
        return a
    for name in ("inner_parallel", "inner_reduction", "vector_accumulator"):
        for tail in ("peel", "mask"):
            f = tex.compile(_strategy(defn, name, tail))
            has = "vpdpbusd" in f.llvm_ir
            assert has == (vnni and name != "inner_parallel" and bool(
                targets.target().vnni_widths)), (name, tail)
            _differential(f, defn, make, STRATEGY_SIZES, oracle=_numpy_reduce("sum", "int8"))


def _stack_in_streaming_blocks(ir_text, dtype):
    """Basic blocks of optimized IR that load a whole vector of the input and also touch
    a stack slot (an accumulator that stayed in memory)."""
    import re
    slots = re.findall(r"(%[\w.]+) = alloca", ir_text)
    ty = {"int8": "i8", "float32": "float"}[dtype]
    bad = []
    for block in re.split(r"\n\n", ir_text):
        if re.search(rf"load <\d+ x {ty}>|masked\.load\.v\d+{ty[0]}", block) and \
                any(re.search(rf"(load|store) [^\n]*ptr {re.escape(s)}\b", block) for s in slots):
            bad.append(block)
    return bad


def test_vector_accumulator_in_registers():
    """The vector accumulator (a LOCAL buffer the vector loop covers whole) is one vector
    value: the loops that stream the input keep it in registers, whatever the tail, and
    no stack memory is left at all."""
    for dtype, combiner in [("int8", "sum"), ("float32", "sum"), ("float32", "max")]:
        defn = _row_reduction(combiner, dtype)
        for tail in ("peel", "mask"):
            f = tex.compile(_strategy(defn, "vector_accumulator", tail))
            text = _opt_ir(f)
            assert not _stack_in_streaming_blocks(text, dtype), (dtype, combiner, tail)
            assert "alloca" not in text, (dtype, combiner, tail)


@pytest.mark.parametrize("combiner", ["sum", "max", "argmin"])
def test_float_strategies(combiner):
    defn = _row_reduction(combiner, "float32")
    rng = np.random.default_rng(12)
    for name in ("inner_parallel", "vector_accumulator"):
        for tail in ("peel", "mask"):
            f = tex.compile(_strategy(defn, name, tail))
            _differential(f, defn, lambda shape: _data(rng, "float32", shape, combiner),
                          STRATEGY_SIZES, oracle=_numpy_reduce(combiner, "float32"))


def test_vnni_exact_near_int32_limits():
    """Rows whose int32 sums come near and past 2**31 (numpy's int32 sum wraps; so does
    every lane of the dots and of the accumulator)."""
    if not targets.target().vnni_widths:
        pytest.skip("no VNNI on this host")
    defn = _row_reduction("sum", "int8")
    n = (1 << 24) + (1 << 18) + 37               # 127 * n > 2**31 > 127 * 2**24
    a = np.empty((2, n), np.int8)
    a[0] = 127
    a[1] = -128
    a[1, :1000] = 127
    want = a.sum(axis=1, dtype=np.int32)
    for name in ("inner_reduction", "vector_accumulator"):
        f = tex.compile(_strategy(defn, name, "mask"))
        assert "vpdpbusd" in f.asm
        assert f(a).tolist() == want.tolist(), name
    big = np.full((1, 1 << 24), 127, np.int8)      # 2130706432: just below 2**31
    assert f(big).tolist() == [127 << 24]


def test_sum_partials():
    """Only the sum-only partials of an int32 sum may take VNNI dots into any lane."""
    from tex.scheduler.vector_plan import sum_partials
    from tex.scheduler.ir import Scope, Store
    defn = _row_reduction("sum", "int8")
    def locals_of(kernel):
        return {id(b) for n in walk(kernel) if isinstance(n, (Store, Update))
                for b in [n.buffer] if b.scope is Scope.LOCAL and b.ndim == 1}
    kernel = _strategy(defn, "vector_accumulator", "peel").kernel()
    assert locals_of(kernel) and sum_partials(kernel) == locals_of(kernel)
    for combiner in ("max", "prod"):
        kernel = _strategy(_row_reduction(combiner, "int32"), "vector_accumulator",
                           "peel").kernel()
        assert not sum_partials(kernel)
    # partials whose merge is not a sum are not (nor the accumulator copied into them)
    kernel = _strategy(defn, "vector_accumulator", "peel").kernel()
    local = locals_of(kernel)

    def merge_max(node):
        if isinstance(node, Update) and getattr(node.value, "tensor", None) is not None \
                and id(node.value.tensor) in local:
            return node.replace(combiner="max")
        return node
    assert not sum_partials(map_nest(kernel, merge_max))


@pytest.mark.parametrize("dtype,combiner", [("int8", "sum"), ("float32", "sum"),
                                            ("float64", "argmax"), ("int16", "max"),
                                            ("float32", "max")])
def test_inner_parallel_transposed(dtype, combiner):
    """for j: for ii (vector): acc[ii] += X[ii, j] runs blocks of K columns of W rows
    transposed in registers (argmax keeps its row order and tie rule; sums and max/min
    combine a block's columns as a tree, NaNs included); the last columns gather, a
    column step other than one runs the loop as it was. Rows around W, columns around K."""
    defn = _row_reduction(combiner, dtype)
    rng = np.random.default_rng(13)
    for tail in ("peel", "mask"):
        f = tex.compile(_strategy(defn, "inner_parallel", tail))
        assert "tr.j" in f.llvm_ir
        for m, n in [(1, 1), (7, 17), (63, 65), (64, 64), (65, 513), (130, 15), (5, 0), (0, 9)]:
            wide = _data(rng, dtype, (m, 2 * n), combiner)
            for layout, a in [("contiguous", wide[:, :n]), ("rows[::-1]", wide[::-1, n:]),
                              ("columns[::2]", wide[:, ::2]),
                              ("transposed", np.asfortranarray(wide[:, :n]))]:
                try:
                    want = _numpy_reduce(combiner, dtype)(a)
                except ValueError:               # a max over empty rows: numpy refuses
                    with pytest.raises(ValueError, match="zero-size array"):
                        f(a)
                    continue
                try:
                    _check(f(a), want, dtype, n)
                except AssertionError as err:
                    raise AssertionError(f"{tail} {m}x{n} {layout}: {err}") from None


def test_inner_parallel_sequential_order():
    """Without fast_math a float row sum keeps the sequential order: the transposed
    blocks give each lane its row's elements in order, so the sums are bit-identical."""
    defn = _row_reduction("sum", "float32")
    s = tex.schedule(defn, fast_math=False)
    s[defn].reduction_strategy("inner_parallel", tail="peel")
    f = tex.compile(s)
    assert "tr.j" in f.llvm_ir
    a = np.random.default_rng(14).standard_normal((37, 300)).astype(np.float32) * 1e3
    sequential = np.cumsum(a, axis=1, dtype=np.float32)[:, -1]
    assert f(a).tolist() == sequential.tolist()


def test_tiled_matmul_full_tiles():
    """C[i, jo*16 + ji] += A[i, k] * B[k, jo*16 + ji], ji vectorized inside k: the jo
    loop runs its whole tiles as a copy with 16-lane loops and the last tile as it is;
    the k loop over a vector loop reads B in transposed blocks when B is column-major."""
    i, j, k = tex.indices("i j k")
    A = tex.tensor("A", (M, K), "float64")
    B = tex.tensor("B", (K, N), "float64")
    C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))
    rng = np.random.default_rng(15)
    for tail in ("mask", "peel"):
        s = tex.schedule(C)
        jo, ji = s[C].split(j, 16)
        s[C].reorder(i, jo, k, ji)
        s[C].vectorize(ji, tail=tail)
        f = tex.compile(s)
        for m, kk, n in [(3, 5, 17), (2, 16, 64), (4, 33, 15), (1, 0, 40)]:
            a, b = _data(rng, "float64", (m, kk)), _data(rng, "float64", (kk, n))
            for bb in (b, np.asfortranarray(b)):
                _check(f(a, bb), a @ bb, "float64", kk)


@pytest.mark.parametrize("xt,yt", [("int8", "int8"), ("uint8", "int8"), ("int8", "uint8"),
                                   ("uint8", "uint8")])
def test_vnni_products(xt, yt):
    """sum(int32(x) * int32(y)) over bytes: one dot (u8 x s8), or two for s8 x s8 and
    u8 x u8; exact at the extremes, with masked tails and under the vector accumulator."""
    i, j = tex.indices("i j")
    X = tex.tensor("X", (M, N), xt)
    Y = tex.tensor("Y", (M, N), yt)
    D = tex.compute("D", (i,), tex.sum(X[i, j].astype("int32") * Y[i, j].astype("int32"),
                                       over=j, dtype="int32"))
    rng = np.random.default_rng(16)

    def make(dt, shape):
        info = np.iinfo(dt)
        a = rng.integers(info.min, info.max + 1, shape).astype(dt)
        if a.size:
            a.flat[::3] = info.min
            a.flat[1::3] = info.max
        return a
    vnni = bool(targets.target().vnni_widths)
    for name in ("inner_reduction", "vector_accumulator"):
        for tail in ("peel", "mask"):
            f = tex.compile(_strategy(D, name, tail))
            assert ("vpdpbusd" in f.llvm_ir) == vnni
            for m, n in [(1, 0), (3, 1), (2, 63), (3, 65), (2, 1000)]:
                a, b = make(xt, (m, n)), make(yt, (m, n))
                want = (a.astype(np.int32) * b.astype(np.int32)).sum(axis=1, dtype=np.int32)
                assert f(a, b).tolist() == want.tolist(), (name, tail, m, n)
    if not vnni:
        pytest.skip("no VNNI on this host: only the non-VNNI path ran (and was exact)")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_extremes_horizontal(dtype):
    """The horizontal max/min (integer keys, then a NaN test): NaN of either sign
    propagates, infinities order as floats; a row of zeros of both signs gives a zero of
    either sign (numpy's gives either too, by their order; ops.MINMAX_FLAGS)."""
    for combiner in ("max", "min"):
        defn = _row_reduction(combiner, dtype)
        f = tex.compile(_strategy(defn, "inner_reduction", "mask"))
        a = np.zeros((6, 40), dtype)
        a[0, 5], a[1, 33] = -np.nan, np.nan
        a[2] = -np.inf
        a[2, 7] = np.inf
        a[3] = -0.0
        a[3, 20] = 0.0
        a[4] = -0.0
        a[5] = np.linspace(-3, 2, 40)
        got, want = f(a), getattr(a, combiner)(axis=1)
        np.testing.assert_array_equal(got, want)            # -0 == +0 here
        assert got[3] == 0 and got[4] == 0


# ---------------------------------------------------------------- golden IR of small kernels

def _golden_kernels():
    i, j = tex.indices("i j")
    x, y = tex.tensor("x", (N,), "float32"), tex.tensor("y", (N,), "float32")
    X8 = tex.tensor("X", (M, N), "int8")
    XF = tex.tensor("X", (M, N), "float32")
    return {
        "add": tex.schedule(tex.compute("V", (i,), x[i] + y[i])),
        "int8_rowsum": tex.schedule(tex.compute("S", (i,), tex.sum(X8[i, j], over=j,
                                                                   dtype="int32"))).auto(),
        "argmax_rows": tex.schedule(tex.compute("A", (i,), tex.argmax(XF[i, j], over=j))).auto(),
    }


@pytest.mark.parametrize("name", ["add", "int8_rowsum", "argmax_rows"])
def test_golden_llvm_ir(name, golden):
    """The LLVM IR of three small kernels for a fixed target (Zen 3, AVX2): a change of
    the code generator shows here as a diff to review (pytest --update-golden)."""
    from cpus import ZEN3
    with targets.overriding(ZEN3):
        s = _golden_kernels()[name]
        ir_text = str(codegen.build(s.kernel(), f"tex_{name}"))
    golden(f"ir_{name}_znver3", ir_text)


def test_the_pipeline_is_o1_unless_a_reduction_loop_tests_steps():
    """LLVM's O1 pipeline compiles a kernel (tex emits its vector code itself), O3 one
    whose vector loop tests its access steps inside a reduction loop (its unswitching
    moves the test out). A row sum's loops over whole vectors and the last one take the
    test out themselves (vector.unit_steps_test): they stay at O1."""
    from tex.backends.llvm.compile_worker import pipeline_level
    M, N = tex.sizes("M N")
    i, j = tex.indices("i j")
    X = tex.tensor("X", (M, N), "int8")
    Y = tex.tensor("Y", (M, N), "float32")
    row_sums = tex.compile(tex.compute("S", (i,), tex.sum(X[i, j], over=j, dtype="int32")),
                           sizes="every")
    col_sums = tex.compile(tex.compute("T", (j,), tex.sum(Y[i, j], over=i)), sizes="every")
    scaled = tex.compile(tex.compute("Z", (i, j), Y[i, j] * 2.0), sizes="every")
    assert [pipeline_level(f.llvm_ir) for f in (row_sums, col_sums, scaled)] == [1, 3, 1]
    x = np.random.default_rng(1).integers(-128, 128, (37, 1000), dtype=np.int8)
    for view in (x, x[:, ::2], x.T.copy().T):
        np.testing.assert_array_equal(row_sums(view), view.sum(axis=1, dtype=np.int32))


@pytest.mark.parametrize("tail", ["mask", "guard"])
def test_a_transposed_vector_loop_with_a_masked_or_guarded_tail_compiles(tail):
    """A vector loop over rows inside a loop over a row's elements (a Transposed plan)
    whose split has a mask or guard tail: the plan's chunk method shadowed the lane
    condition's helper of the same name (TypeError at compile; an adversarial test
    found a quarter of random split/reorder/vectorize schedules failing so)."""
    M, N, K = tex.sizes("M N K")
    i, j, k = tex.indices("i j k")
    Y = tex.tensor("Y", (M, N), "float32")
    S = tex.compute("S", (i,), tex.sum(Y[i, j], over=j))
    s = tex.schedule(S)
    io, ii = s[S].split(i, 7, tail=tail)
    s[S].reorder(io, j, ii)
    s[S].vectorize(ii, tail="mask")
    row_sums = tex.compile(s)
    A, B = tex.tensor("A", (M, K), "float32"), tex.tensor("B", (K, N), "float32")
    C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))
    s2 = tex.schedule(C)
    jo, ji = s2[C].split(j, 32, tail)
    s2[C].reorder(i, jo, k, ji)
    s2[C].vectorize(ji)
    product = tex.compile(s2)
    rng = np.random.default_rng(5)
    for m, kk, n in [(1, 1, 1), (7, 5, 33), (65, 63, 70)]:
        y = rng.standard_normal((m, n)).astype(np.float32)
        for view in (y, np.asfortranarray(y)):
            np.testing.assert_allclose(row_sums(view), y.sum(axis=1), rtol=1e-5, atol=1e-4)
        a = rng.standard_normal((m, kk)).astype(np.float32)
        b = rng.standard_normal((kk, n)).astype(np.float32)
        np.testing.assert_allclose(product(np.asfortranarray(a), b), a @ b, rtol=1e-5,
                                   atol=1e-4)


def test_a_guard_that_does_not_test_its_tile_loop_moves_out_of_it_in_one_pass():
    """vectorize._hoist_guard: `for u (unrolled): for v (vector): if a: if b: S`, a and b
    free of u and v, becomes `if a: if b: for u: for v: S` in one bottom-up pass (the
    rows of a partial register tile are tested once a row, not once a vector), and a
    second pass changes nothing; a guard that tests its loop stays inside it."""
    import tex.symbolic as tsym
    from tex.scheduler.ir import Buffer, Guard, Loop, LoopKind, Scope, Store, map_nest
    from tex.scheduler.vectorize import _hoist_guard
    v, u, a, b = (tsym.Symbol(n, integer=True) for n in "vuab")
    out = Store(Buffer("O", (8, 16), np.dtype("float32"), Scope.OUTPUT), (u, v), 0)

    def tile(inner):
        return Loop(u, 8, (Loop(v, 16, inner, LoopKind.VECTOR),), LoopKind.UNROLLED)

    def shape(n):
        if isinstance(n, Loop):
            return (n.var.name, n.kind.value, tuple(shape(c) for c in n.body))
        if isinstance(n, Guard):
            return (str(n.cond), tuple(shape(c) for c in n.body))
        return "S"
    nest = tile((Guard(a > 0, (Guard(b > 0, (out,)),)),))
    once = map_nest(nest, _hoist_guard)
    assert shape(once) == ("a > 0", (("b > 0", (shape(tile((out,))),)),))
    assert shape(map_nest(once, _hoist_guard)) == shape(once)
    moving = tile((Guard(u + b > 3, (Guard(v < a, (out,)),)),))
    assert shape(map_nest(moving, _hoist_guard)) == \
        ("u", "unrolled", (("b + u > 3", (("v", "vector", (("v < a", ("S",)),)),)),))
