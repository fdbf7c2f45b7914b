"""Cases that kill known mutants of the scheduler, run in a child process (a wrong guard
or tail reads out of bounds and may crash): `python mutant_cases.py NAME`. Each checks
tex against plain numpy (float64 products, int64 sums) and exits non-zero on a mismatch.
tests/test_mutants.py starts them."""
import sys

import numpy as np

import tex

i, j, k = tex.indices("i j k")


def _matmul(shape_a, shape_b, dtype="float32"):
    A, B = tex.tensor("A", shape_a, dtype), tex.tensor("B", shape_b, dtype)
    return tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))


def _operands(rng, m, kk, n, layout="contiguous", dtype="float32"):
    if layout == "strided":           # every other column / row of a wider array
        a = rng.standard_normal((m, 2 * kk)).astype(dtype)[:, ::2]
        b = rng.standard_normal((2 * kk, n)).astype(dtype)[::2]
    elif layout == "transposed":
        a = rng.standard_normal((kk, m)).astype(dtype).T
        b = rng.standard_normal((n, kk)).astype(dtype).T
    else:
        a = rng.standard_normal((m, kk)).astype(dtype)
        b = rng.standard_normal((kk, n)).astype(dtype)
    return a, b


def check_matmul(got, a, b, label):
    """float32 products summed over k against numpy's float64 product: the error bound of
    a k-term float32 dot product, with a margin."""
    want = a.astype(np.float64) @ b.astype(np.float64)
    got = np.asarray(got)
    kk = a.shape[1]
    bound = 4 * np.finfo(np.float32).eps * (kk + 1) * (np.abs(a) @ np.abs(b)) + 1e-30
    bad = ~(np.abs(got - want) <= bound)          # NaN is bad
    if got.shape != want.shape or got.dtype != np.float32 or bad.any():
        raise AssertionError(f"{label}: shape {got.shape} dtype {got.dtype}, "
                             f"{int(bad.sum())} of {want.size} wrong, e.g. "
                             f"{got[bad][:3] if got.shape == want.shape else ''} vs "
                             f"{want[bad][:3] if got.shape == want.shape else ''}")


# ---------------------------------------------------------------- guard tails

def guard_tiled_schedule():
    """split i by 4, j by 8, k by 4, all with tail="guard", loops (io, jo, ko, ki, ii, ji):
    the (ii, ji) tile accumulates in registers, and its updates keep the guard on k."""
    M, N, K = tex.sizes("M N K")
    C = _matmul((M, K), (K, N))
    s = tex.schedule(C)
    io, ii = s[C].split(s[C].loops[0], 4, tail="guard")
    jo, ji = s[C].split(s[C].loops[2], 8, tail="guard")
    ko, ki = s[C].split(s[C].loops[4], 4, tail="guard")
    s[C].reorder(io, jo, ko, ki, ii, ji)
    assert "C_acc" in str(s), str(s)             # the register tile the mutant touches
    return tex.compile(s)


def guard_tails():
    f = guard_tiled_schedule()
    rng = np.random.default_rng(0)
    for m, kk, n in [(1, 1, 1), (4, 4, 8), (7, 9, 13), (65, 7, 63), (5, 1000, 17),
                     (63, 65, 1)]:
        for layout in ("contiguous", "strided", "transposed"):
            a, b = _operands(rng, m, kk, n, layout)
            check_matmul(f(a, b), a, b, f"guard tails {m}x{kk}x{n} {layout}")


def guard_tails_property():
    """The same schedule on sizes hypothesis draws (few examples: one compiled kernel)."""
    from hypothesis import given, settings, strategies as st
    f = guard_tiled_schedule()

    @settings(max_examples=30, deadline=None, database=None)
    @given(m=st.integers(1, 24), kk=st.integers(1, 24), n=st.integers(1, 40),
           layout=st.sampled_from(["contiguous", "strided", "transposed"]),
           seed=st.integers(0, 2**16))
    def prop(m, kk, n, layout, seed):
        a, b = _operands(np.random.default_rng(seed), m, kk, n, layout)
        check_matmul(f(a, b), a, b, f"guard property {m}x{kk}x{n} {layout}")
    prop()


# ---------------------------------------------------------------- fixed shapes

FIXED = [(1000, 1000, 1000), (7, 13, 9), (65, 63, 1), (1, 1000, 7), (63, 65, 1000),
         (17, 1, 33)]


def fixed_shapes():
    """Sizes known at compile time (integer shapes), so every split of a constant extent
    that does not divide it needs its tail: the auto schedule, and explicit splits."""
    rng = np.random.default_rng(1)
    for m, kk, n in FIXED:
        C = _matmul((m, kk), (kk, n))
        a, b = _operands(rng, m, kk, n)
        check_matmul(tex.compile(C)(a, b), a, b, f"fixed auto {m}x{kk}x{n}")
        if m * n * kk > 10**7:
            continue
        for tail in ("peel", "guard")[(m + n) % 2:][:1]:      # one tail a shape, both in all
            s = tex.schedule(C)
            s[C].split(s[C].loops[0], 4, tail=tail)
            s[C].split(s[C].loops[2], 8, tail=tail)
            s[C].split(s[C].loops[4], 3, tail=tail)
            check_matmul(tex.compile(s)(a, b), a, b, f"fixed split {tail} {m}x{kk}x{n}")
    for rows, cols in [(7, 1000), (65, 63), (1, 17)]:
        X = tex.tensor("X", (rows, cols), "int8")
        S = tex.compute("S", (i,), tex.sum(X[i, j], over=j, dtype="int32"))
        x = rng.integers(-128, 128, (rows, cols), dtype=np.int8)
        want = x.astype(np.int64).sum(axis=1).astype(np.int32)
        for s in (tex.schedule(S).auto(), tex.schedule(S)):
            got = tex.compile(s)(x)
            if not np.array_equal(got, want) or got.dtype != np.int32:
                raise AssertionError(f"fixed rowsum {rows}x{cols}: {got[:5]} vs {want[:5]}")
        s = tex.schedule(S)
        s[S].vectorize(s[S].loops[-1], tail="mask")
        got = tex.compile(s)(x)
        if not np.array_equal(got, want):
            raise AssertionError(f"fixed rowsum vectorized {rows}x{cols}")


# ---------------------------------------------------------------- split-K

def split_k():
    """The auto schedule on 2 threads with few rows and a long K splits K into four parts a
    thread (runtime.AUTO_PARTS), whatever this host's core count; and explicit split_k into 3
    parts, which need not divide K."""
    from tex.backends.llvm import runtime
    tex.set_num_threads(2)
    M, N, K = tex.sizes("M N K")
    C = _matmul((M, K), (K, N))
    f = tex.compile(C)
    assert "C_parts" in f.loop_nest, f.loop_nest
    rng = np.random.default_rng(2)
    for m, kk, n in [(6, 4096, 16), (7, 5001, 33), (13, 8193, 40)]:
        rows = -(-m // 48)       # blocks of 48 rows (this host's blocking may differ: the
        # assertion on C_parts above and the mutants of split_k say the parts ran)
        parts = eval(runtime.AUTO_PARTS.format(t=2, rows=rows, length=kk))  # noqa: S307
        assert parts == 8, (m, kk, parts)
        a, b = _operands(rng, m, kk, n)
        check_matmul(f(a, b), a, b, f"auto split-K {m}x{kk}x{n}")
    s = tex.schedule(C)
    s[C].split_k(s[C].loops[2], 3)
    g = tex.compile(s)
    for m, kk, n in [(3, 4097, 5), (1, 2, 7), (2, 1000, 9)]:
        a, b = _operands(rng, m, kk, n)
        check_matmul(g(a, b), a, b, f"split_k(3) {m}x{kk}x{n}")


if __name__ == "__main__":
    for name in sys.argv[1:]:
        globals()[name]()
        print("ok", name)
