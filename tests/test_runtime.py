"""The compiled function's calling convention and its refusals of bad input (API.md
sections 4 and 6; issue 2, "Bad input"), definition-time errors, concurrency, and the
generated text (IR, assembly, loop nest)."""
import re
import sys
import threading

import llvmlite.binding as llvm
import numpy as np
import pytest

import tex
from kernels import compiled

M, N, K = tex.sizes("M N K")
i, j, k = tex.indices("i j k")



def gemm(dt="float32"):
    def build():
        A, B = tex.tensor("A", (M, K), dt), tex.tensor("B", (K, N), dt)
        return tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))
    return compiled(("gemm", dt), build)


def axpy():
    """inputs in order of first use: y before x."""
    def build():
        x, y = tex.tensor("x", (N,), "float64"), tex.tensor("y", (N,), "float64")
        return tex.compute("Z", (i,), y[i] * 2 + x[i])
    return compiled("axpy", build)


def transpose():
    X = tex.tensor("X", (M, N), "float64")
    return compiled("transpose", lambda: tex.compute("T", (j, i), X[i, j] + 0.5))


RNG = np.random.default_rng(0)
A32 = RNG.standard_normal((4, 6)).astype(np.float32)
B32 = RNG.standard_normal((6, 5)).astype(np.float32)


# ================================================================ calling conventions

def test_positional_in_order_of_first_use_by_name_and_mixed():
    f = axpy()
    assert f.input_names == ("y", "x")
    x, y = np.arange(5.0), np.arange(5.0) * 10
    want = y * 2 + x
    np.testing.assert_array_equal(f(y, x), want)
    np.testing.assert_array_equal(f(x=x, y=y), want)
    np.testing.assert_array_equal(f(y, x=x), want)
    g = gemm()
    np.testing.assert_allclose(g(A32, B32), A32 @ B32, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g(B=B32, A=A32), A32 @ B32, rtol=1e-5, atol=1e-6)


def test_argument_binding_errors_are_type_errors():
    f = axpy()
    x = np.arange(3.0)
    with pytest.raises(TypeError, match="z"):
        f(x, x, z=x)                       # unknown keyword
    with pytest.raises(TypeError):
        f(x=x, y=x, bogus=1)
    with pytest.raises(TypeError):
        f(x)                               # missing input
    with pytest.raises(TypeError):
        f(x, x, x)                         # too many positional
    with pytest.raises(TypeError):
        f(x, y=x)                          # y given twice


def test_wrong_rank_names_the_tensor():
    g = gemm()
    with pytest.raises(tex.ShapeError, match=r"tensor A\b.*rank 2"):
        g(A32[0], B32)
    with pytest.raises(tex.ShapeError, match=r"tensor B\b.*rank"):
        g(A32, B32[None])
    with pytest.raises(tex.ShapeError, match=r"tensor A\b"):
        g(np.float32(1.0), B32)
    assert issubclass(tex.ShapeError, ValueError)


def test_mismatched_sizes_name_the_tensor_and_dimension():
    g = gemm()
    with pytest.raises(tex.ShapeError, match=r"tensor B, dimension 0.*K"):
        g(A32, B32[:5])
    f = axpy()
    with pytest.raises(tex.ShapeError, match=r"tensor x, dimension 0"):
        f(y=np.ones(4), x=np.ones(5))
    with pytest.raises(tex.ShapeError, match=r"tensor x, dimension 0"):
        f(np.ones(4), np.ones(0))


def test_dtype_without_safe_cast_is_a_type_error_naming_the_tensor():
    g = gemm()
    with pytest.raises(TypeError, match=r"tensor A\b"):
        g(A32.astype(np.float64), B32)
    with pytest.raises(TypeError, match=r"tensor B\b"):
        g(A32, B32.astype(np.int64))
    with pytest.raises(TypeError, match=r"tensor B\b"):
        g(A32, B32.astype(np.complex64))
    with pytest.raises(TypeError, match=r"tensor A\b"):
        g(A32.astype(object), B32)
    gi = gemm("int32")
    with pytest.raises(TypeError, match=r"tensor A\b"):
        gi(np.ones((2, 2), np.int64), np.ones((2, 2), np.int32))
    with pytest.raises(TypeError, match=r"tensor A\b"):
        gi(np.ones((2, 2), np.uint32), np.ones((2, 2), np.int32))


def test_safe_casts_and_lists_are_accepted():
    g = gemm()
    a8 = np.arange(24, dtype=np.int8).reshape(4, 6)
    np.testing.assert_allclose(g(a8, B32), a8.astype(np.float32) @ B32, rtol=1e-5)
    np.testing.assert_allclose(g(a8.astype(np.float16), B32), a8.astype(np.float32) @ B32,
                               rtol=1e-5)
    np.testing.assert_allclose(g(A32 > 0, B32), (A32 > 0).astype(np.float32) @ B32,
                               rtol=1e-5, atol=1e-6)
    f = axpy()                             # float64 inputs: lists of Python floats and ints
    np.testing.assert_array_equal(f([1.0, 2.0], [3.0, 4.0]), [5.0, 8.0])
    np.testing.assert_array_equal(f(y=[1, 2], x=(3, 4)), [5.0, 8.0])
    np.testing.assert_array_equal(f([], []), np.zeros(0))
    gi = gemm("int64")
    np.testing.assert_array_equal(gi([[1, 2]], [[3], [4]]), [[11]])
    with pytest.raises(tex.ShapeError, match=r"tensor A\b"):
        gi([1, 2], [[3], [4]])
    with pytest.raises(TypeError, match=r"tensor A\b"):
        gi([[1.5, 2]], [[3], [4]])


def test_mixed_array_types_and_memory_orders():
    f = axpy()
    y = np.arange(6.0)
    for xs in (np.arange(6.0).view(np.ndarray), np.ma.masked_array(np.arange(6.0)).data,
               np.asfortranarray(np.arange(6.0)), np.float64(3.0) + np.zeros(6)):
        np.testing.assert_array_equal(f(y, xs), y * 2 + np.asarray(xs))


def test_scalar_inputs_and_size_expressions():
    def build():
        x, s = tex.tensor("x", (N,), "float64"), tex.tensor("s", (), "float64")
        y = tex.tensor("y", (2 * N + 1,), "int32")
        return tex.compute("Z", (i,), x[i] * s[()] + y[2 * i] - y[2 * i + 2])
    f = compiled("scalar-and-2N", build)
    assert f.input_names == ("x", "s", "y")
    x, y = np.arange(4.0), np.arange(9, dtype=np.int32) ** 2
    want = x * 2.5 + y[0:8:2] - y[2:9:2]
    np.testing.assert_array_equal(f(x, 2.5, y), want)
    np.testing.assert_array_equal(f(x, np.array(2.5), y), want)
    with pytest.raises(tex.ShapeError, match=r"tensor y, dimension 0"):
        f(x, 2.5, y[:8])
    with pytest.raises(tex.ShapeError, match=r"tensor s\b"):
        f(x, [2.5], y)


def test_constant_dimensions_are_checked():
    x, y = tex.tensor("x", (4,), "float64"), tex.tensor("y", (N,), "float64")
    f = compiled("const-dim", lambda: tex.compute("D", (i,), x[i] * y[i]))
    np.testing.assert_array_equal(f(np.arange(4.0), np.arange(6.0)), np.arange(4.0) ** 2)
    np.testing.assert_array_equal(f(np.arange(4.0), np.arange(3.0)), np.arange(3.0) ** 2)
    with pytest.raises(tex.ShapeError, match=r"tensor x, dimension 0.*4.*5"):
        f(np.arange(5.0), np.arange(6.0))


# ================================================================ out=

SENTINEL = -12345.0


def _sentinel(shape, dtype=np.float32):
    return np.full(shape, SENTINEL, dtype)


def test_out_is_written_and_returned():
    g = gemm()
    out = _sentinel((4, 5))
    r = g(A32, B32, out=out)
    assert r is out
    np.testing.assert_allclose(out, A32 @ B32, rtol=1e-5, atol=1e-6)
    out64 = np.zeros((4, 5), np.float64)           # float32 -> float64 is a safe cast
    assert g(A32, B32, out=out64) is out64
    np.testing.assert_allclose(out64, A32 @ B32, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", ["shape", "rank", "dtype", "readonly", "not-an-array",
                                  "bad-input-shape", "bad-input-dtype", "tuple-count"])
def test_refused_out_is_untouched(case):
    g = gemm()
    a, b = A32, B32
    out = _sentinel((4, 5))
    exc, match = {
        "shape": (tex.ShapeError, r"out.*C"),
        "rank": (tex.ShapeError, r"out.*C"),
        "dtype": (TypeError, r"out.*C"),
        "readonly": (ValueError, r"out.*C.*read-only"),
        "not-an-array": (TypeError, r"out"),
        "bad-input-shape": (tex.ShapeError, r"tensor B, dimension 0"),
        "bad-input-dtype": (TypeError, r"tensor A\b"),
        "tuple-count": (ValueError, r"out"),
    }[case]
    target = out
    if case == "shape":
        target = out[:, :4]
    elif case == "rank":
        target = out.reshape(20)
    elif case == "dtype":
        target = np.full((4, 5), -7, np.int32)      # float32 -> int32 is not safe
    elif case == "readonly":
        out.flags.writeable = False
    elif case == "not-an-array":
        target = out.tolist()
    elif case == "bad-input-shape":
        b = B32[:3]
    elif case == "bad-input-dtype":
        a = A32.astype(np.float64)
    elif case == "tuple-count":
        target = (out, out)
    before = np.array(target, copy=True) if case != "not-an-array" else None
    with pytest.raises(exc, match=match):
        g(a, b, out=target)
    np.testing.assert_array_equal(out, SENTINEL)
    if before is not None:
        np.testing.assert_array_equal(target, before)


def test_out_refusals_do_not_mistake_a_safe_cast():
    g = gemm()
    out = np.full((4, 5), SENTINEL, np.float16)     # float32 -> float16 is not safe
    with pytest.raises(TypeError, match=r"out.*C"):
        g(A32, B32, out=out)
    np.testing.assert_array_equal(out, np.float16(SENTINEL))


@pytest.mark.parametrize("casting", ["no", "safe", "same_kind", "unsafe"])
@pytest.mark.parametrize("out_dtype", [np.float64, np.float16, np.int32])
def test_out_follows_the_compiles_casting_rule_as_numpys_ufuncs_do(casting, out_dtype):
    f = tex.compile(gemm().program, casting=casting)
    out = np.full((4, 5), -7, out_dtype)
    want = A32 @ B32
    if not np.can_cast(np.float32, out_dtype, casting):
        with pytest.raises(TypeError, match=rf"out= for C.*casting={casting!r}.*"
                                            r"(pass out= an array of float32|compile with)"):
            f(A32, B32, out=out)
        np.testing.assert_array_equal(out, -7)         # untouched
        return
    assert f(A32, B32, out=out) is out
    ref = np.empty((4, 5), out_dtype)
    np.multiply(want, 1, out=ref, casting="unsafe")     # numpy's own conversion
    np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64), rtol=2e-3,
                               atol=1.01 if out_dtype == np.int32 else 1e-3)


def test_out_overlapping_an_input_gives_numpys_answer():
    # elementwise, out is the input itself
    f = axpy()
    y = np.arange(7.0)
    x = np.arange(7.0) * 3
    want = y * 2 + x
    assert f(y, x, out=y) is y
    np.testing.assert_array_equal(y, want)
    # a transpose-like program writing over its own (square) input
    t = transpose()
    X = np.arange(36.0).reshape(6, 6)
    want = X.T + 0.5
    t(X, out=X)
    np.testing.assert_array_equal(X, want)
    # a matmul writing over one of its operands
    g = gemm("float64")
    A = RNG.standard_normal((5, 5))
    B = RNG.standard_normal((5, 5))
    want = A @ B
    g(A, B, out=B)
    np.testing.assert_allclose(B, want, rtol=1e-12, atol=1e-12)
    # partial overlap: out is a shifted view of the input
    s = compiled("shift", lambda: tex.compute("S", (i,), tex.tensor("x", (N,), "float64")[i + 1]
                                              * 2))
    buf = np.arange(10.0)
    want = buf[1:] * 2
    s(buf, out=buf[:-1])
    np.testing.assert_array_equal(buf[:-1], want)
    buf = np.arange(10.0)
    want = buf[1:] * 2
    s(buf[::-1][::-1], out=buf[1:])
    np.testing.assert_array_equal(buf[1:], want)


def test_out_in_any_view_of_the_inputs_memory_gives_numpys_answer():
    """out= and the inputs as random views of one buffer (offsets, steps of either sign,
    transposes, broadcast and empty views): the kernel's entry finds every overlap of an
    output's bytes with an input's (STATUS_OVERLAP) and the call retries on copies, so
    the result is numpy's on copies of the inputs, and no byte outside out= changes."""
    g, t = gemm("float64"), transpose()
    rng = np.random.default_rng(41)

    def view(buf, shape):
        """A random view of `buf` with `shape`, no two of its elements at one address
        (None when none fits): axes in a random order, each step a multiple (1 or 2) of
        the span of the axes inside it, either sign."""
        steps, span = [0] * len(shape), int(rng.integers(1, 4))
        for axis in rng.permutation(len(shape)):
            steps[axis] = span * int(rng.choice([-1, 1]))
            span *= max(shape[axis], 1) * int(rng.integers(1, 3))
        need = sum((n - 1) * abs(st) for n, st in zip(shape, steps)) + 1
        if need > buf.size:
            return None
        start = int(rng.integers(0, buf.size - need + 1))
        offset = start + sum((n - 1) * abs(st) for n, st in zip(shape, steps) if st < 0)
        return np.lib.stride_tricks.as_strided(
            buf[offset:], shape, [st * buf.itemsize for st in steps])
    checked = 0
    for _ in range(300):
        m, kk, n = (int(x) for x in rng.integers(0, 6, 3))
        buf = rng.standard_normal(64)
        a, b, out = view(buf, (m, kk)), view(buf, (kk, n)), view(buf, (m, n))
        if rng.random() < 0.2 and b is not None and n > 0 and kk > 0:
            b = np.broadcast_to(b[:1], (kk, n))              # a zero step
        if a is None or b is None or out is None:
            continue
        out = np.lib.stride_tricks.as_strided(out, writeable=True)
        want, before = a @ b, buf.copy()
        assert g(a, b, out=out) is out
        np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)
        mask = np.ones(buf.size, bool)
        if out.size:
            base = out.__array_interface__["data"][0] - buf.__array_interface__["data"][0]
            for idx in np.ndindex(out.shape):
                mask[(base + np.dot(idx, out.strides)) // buf.itemsize] = False
        np.testing.assert_array_equal(buf[mask], before[mask])
        x, o = view(buf, (m, m)), view(buf, (m, m))
        if x is not None and o is not None:
            o = np.lib.stride_tricks.as_strided(o, writeable=True)
            want = x.T + 0.5
            t(x, out=o)
            np.testing.assert_array_equal(o, want)
        checked += 1
    assert checked > 100


def test_non_contiguous_and_odd_outs():
    g = gemm()
    want = A32 @ B32
    big = _sentinel((8, 15))
    view = big[::2, ::3]
    g(A32, B32, out=view)
    np.testing.assert_allclose(view, want, rtol=1e-5, atol=1e-6)
    mask = np.ones(big.shape, bool)
    mask[::2, ::3] = False
    assert (big[mask] == SENTINEL).all(), "wrote outside the view"
    tr = _sentinel((5, 4)).T                      # Fortran-ordered out
    g(A32, B32, out=tr)
    np.testing.assert_allclose(tr, want, rtol=1e-5, atol=1e-6)
    rev = _sentinel((4, 5))[::-1, ::-1]
    g(A32, B32, out=rev)
    np.testing.assert_allclose(rev, want, rtol=1e-5, atol=1e-6)
    mis = np.frombuffer(bytearray(4 * 20 + 1), np.float32, offset=1).reshape(4, 5)
    assert mis.flags.writeable and not mis.flags.aligned
    g(A32, B32, out=mis)
    np.testing.assert_allclose(mis, want, rtol=1e-5, atol=1e-6)
    swapped = np.zeros((4, 5), ">f4")
    g(A32, B32, out=swapped)
    np.testing.assert_allclose(swapped, want, rtol=1e-5, atol=1e-6)


def test_several_outputs_and_out_tuple():
    X = tex.tensor("X", (M, N), "float64")

    def build():
        s = tex.compute("s", (i,), tex.sum(X[i, j], over=j))
        am = tex.compute("am", (i,), tex.argmax(X[i, j], over=j))
        return (s, am)
    f = compiled("two-outputs", build)
    x = RNG.standard_normal((3, 8))
    s, am = f(x)
    np.testing.assert_allclose(s, x.sum(1), rtol=1e-12)
    np.testing.assert_array_equal(am, x.argmax(1))
    o1, o2 = np.zeros(3), np.zeros(3, np.int64)
    r = f(x, out=(o1, o2))
    assert r[0] is o1 and r[1] is o2
    np.testing.assert_allclose(o1, x.sum(1), rtol=1e-12)
    np.testing.assert_array_equal(o2, x.argmax(1))
    bad2 = np.full(3, 7, np.int8)                    # int64 -> int8 is not safe
    o1[:] = SENTINEL
    with pytest.raises(TypeError, match="am"):
        f(x, out=(o1, bad2))
    assert (o1 == SENTINEL).all() and (bad2 == 7).all()


# ================================================================ threads

def test_threads_compiling_one_new_kernel_at_once_compile_and_link_it_once(monkeypatch):
    """A first call links its kernel after compiling it, outside the compile lock (the
    thread runtime loads in between): threads that ask for the same kernel meanwhile
    take that compile and its image, never compile it again or link a copy. (Optimized
    code at once: quick code first is test_tiers.py's.)"""
    from tex.backends.llvm import jit
    monkeypatch.setenv("TEX_TIERED", "0")
    N = tex.sizes("N")
    i = tex.indices("i")
    X = tex.tensor("X", (N,), "float32")
    factor = float(np.random.default_rng().integers(1 << 20)) + 0.5     # a kernel no test has
    barrier, results = threading.Barrier(4), [None] * 4

    def work(k):
        barrier.wait()
        f = tex.compile(tex.compute("Y", (i,), X[i] * factor + 1.0))
        results[k] = (f, f(np.arange(1000, dtype=np.float32)))
    compiled_before = jit.STATS["compiled"]
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert jit.STATS["compiled"] == compiled_before + 1
    want = np.arange(1000, dtype=np.float32) * np.float32(factor) + 1
    for f, r in results:
        np.testing.assert_array_equal(r, want)
    assert len({id(f._sig.built.image) for f, _ in results}) == 1


def test_concurrent_calls_from_python_threads():
    g = gemm("float64")
    f = axpy()
    n_threads, rounds = 8, 30
    errors = []
    barrier = threading.Barrier(n_threads)

    def work(seed):
        try:
            rng = np.random.default_rng(seed)
            barrier.wait()
            for r in range(rounds):
                m, kk, n = rng.integers(1, 40, 3)
                a, b = rng.standard_normal((m, kk)), rng.standard_normal((kk, n))
                np.testing.assert_allclose(g(a, b), a @ b, rtol=1e-10, atol=1e-12)
                x, y = rng.standard_normal(int(m) * 50), rng.standard_normal(int(m) * 50)
                out = np.empty_like(x)
                f(y, x, out=out)
                np.testing.assert_array_equal(out, y * 2 + x)
        except Exception as err:          # noqa: BLE001 - reported by the main thread
            errors.append(err)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors[0]


PLACEMENT_SCRIPT = r"""
import os, sys, time, numpy as np, tex
from tex.backends.llvm import threads
cpus = sorted(os.sched_getaffinity(0))
before = set(os.listdir("/proc/self/task"))
tex.set_num_threads(2)
a = np.random.default_rng(0).standard_normal((300, 300))
np.testing.assert_allclose(tex.einsum("ik,kj->ij", a, a), a @ a, rtol=1e-9)
workers = [int(t) for t in set(os.listdir("/proc/self/task")) - before]
# the caller on the first CPU, its worker held there too until it joins a region: joining,
# it moves to the next CPU and is free again (on a busy machine it may miss a few
# regions). Only pinned does it surely wake there: set free at once, a sleeping worker
# woke wherever the OS put it, and under a loaded test run sometimes never on the
# caller's CPU within the deadline.
os.sched_setaffinity(0, {cpus[0]})
deadline = time.monotonic() + 30
while threads.runtime().hops.value == 0 and time.monotonic() < deadline:
    for tid in workers:
        os.sched_setaffinity(tid, {cpus[0]})
    np.testing.assert_allclose(tex.einsum("ik,kj->ij", a, a), a @ a, rtol=1e-9)
    if sys.argv[1] == "0":
        break
if threads.runtime().hops.value == 0:      # the test's pin, which no move undid
    for tid in workers:
        os.sched_setaffinity(tid, cpus)
os.sched_setaffinity(0, cpus)
print(threads.runtime().hops.value)
print(all(sorted(os.sched_getaffinity(tid)) == cpus for tid in workers))
"""


@pytest.mark.parametrize("pin", ["1", "0"])
def test_a_worker_on_its_callers_cpu_moves_to_another(pin, tmp_path):
    """A worker that joins a region on its caller's CPU moves to a CPU of its own, so a
    core busy with another runtime's spinning thread cannot hold two of tex's threads;
    nothing stays pinned (a pinned worker could not leave that core when the caller's
    goes idle). TEX_PIN_THREADS=0 leaves placement to the OS. Runs in a child (it
    changes the process's affinity); needs 2 CPUs."""
    import os
    import subprocess
    import sys
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU")
    env = dict(os.environ, TEX_PIN_THREADS=pin, TEX_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", PLACEMENT_SCRIPT, pin], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    hops, free = out.stdout.split()
    assert (int(hops) > 0) == (pin == "1")
    assert free == "True"


def _child_stdout(script, tmp_path):
    """Run `script` in a fresh Python process with its own kernel cache; its stdout
    (a failure there fails the test)."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, TEX_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_builtin_entry_refuses_a_wrong_call_with_an_exception(tmp_path):
    """The kernel's builtin entry (fastcall.py), called as no call path calls it: a wrong
    argument count is a TypeError, an integer out of int64's range an OverflowError, a
    non-integer a TypeError, and the right call still runs. In a child: a mistake here
    would crash the interpreter."""
    script = (
        "import os\n"
        "os.environ['TEX_TIERED'] = '0'       # (else the call path's gate runs first)\n"
        "import numpy as np, tex\n"
        "N = tex.sizes('N'); i = tex.indices('i')\n"
        "x = tex.tensor('x', (N,), 'float32')\n"
        "f = tex.compile(tex.compute('y', (i,), x[i] * 2))\n"
        "a = np.arange(5, dtype=np.float32)\n"
        "assert (f(a) == 2 * a).all()\n"
        "entry = f._sig.scope['_cfunc']\n"
        "out = np.empty(5, np.float32)\n"
        "for args, error in [((a, out), TypeError), ((a, out, 1, 2), TypeError),\n"
        "                    ((a, out, 2**70), OverflowError), ((a, out, 'one'), TypeError)]:\n"
        "    try:\n"
        "        entry(*args)\n"
        "    except error:\n"
        "        pass\n"
        "    else:\n"
        "        raise SystemExit(f'{args[2:]}: no {error.__name__}')\n"
        "assert entry(a, out, 1) == 0 and (out == 2 * a).all()\n"
        "print(type(entry).__name__)\n")
    assert _child_stdout(script, tmp_path).strip() == "builtin_function_or_method"


def test_another_librarys_prototype_of_the_python_api_changes_nothing():
    """tex makes its builtins through a prototype of its own: another library setting
    ctypes.pythonapi.PyCFunction_NewEx's restype and argtypes (a shared object) broke
    every later compile."""
    import ctypes
    from tex.backends.llvm import fastcall  # noqa: F401 -- its prototype made first
    shared = ctypes.pythonapi.PyCFunction_NewEx
    saved = shared.restype, shared.argtypes
    shared.restype, shared.argtypes = ctypes.c_void_p, [ctypes.c_void_p] * 3
    try:
        x = tex.tensor("x", (N,), "float32")
        f = tex.compile(tex.compute("y", (i,), x[i] * 4.5))
        np.testing.assert_array_equal(f(np.ones(3, np.float32)), np.full(3, 4.5, np.float32))
    finally:
        shared.restype, shared.argtypes = saved


def test_one_allowed_cpu_and_two_threads_run_correctly_without_moves(tmp_path):
    """A process confined to one CPU before tex loads, asked for 2 threads: the team is
    larger than the CPUs, so no worker is moved (nowhere to go), and results stay
    right. In a child: it confines the process."""
    script = (
        "import os, numpy as np\n"
        "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
        "import tex\n"
        "from tex.backends.llvm import threads\n"
        "tex.set_num_threads(2)\n"
        "a = np.random.default_rng(0).standard_normal((300, 300))\n"
        "for _ in range(5):\n"
        "    np.testing.assert_allclose(tex.einsum('ik,kj->ij', a, a), a @ a, rtol=1e-9)\n"
        "print(threads.runtime().hops.value)\n")
    assert _child_stdout(script, tmp_path).split() == ["0"]


TEAM_PAYS_SCRIPT = r"""
import ctypes, time, numpy as np, tex
from tex.backends.llvm import threads
tex.set_num_threads(2)
rt = threads.runtime()
pays = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64)(rt.addresses["tex_rt_team_pays"])
asks = [pays(2), pays(2), pays(2)]  # no region has ended yet: no
rng = np.random.default_rng(0)
# 512 x 512: 2^18 iterations (under PARALLEL_MIN_WORK) over 3 MiB of arrays
a, b = (rng.standard_normal((512, 512)).astype(np.float32) for _ in range(2))
small = rng.standard_normal((64, 64)).astype(np.float32)   # 2^18 FMAs over 48 KiB
want, want_small = a * b, small @ small
np.testing.assert_array_equal(tex.einsum("ij,ij->ij", a, b), want)
np.testing.assert_allclose(tex.einsum("ik,kj->ij", small, small), want_small, rtol=1e-4, atol=1e-4)
teams = rt.teams.value
for _ in range(5):                  # calls far apart: each on the caller alone
    time.sleep(0.02)
    np.testing.assert_array_equal(tex.einsum("ij,ij->ij", a, b), want)
apart = rt.teams.value - teams
outs = [np.empty_like(a) for _ in range(4)]
deadline = time.monotonic() + 60    # (a loaded machine may hold this thread between calls)
tries = 0
while rt.teams.value == teams + apart and time.monotonic() < deadline:
    tries += 1
    for out in outs:                # in a loop: the third call takes a team
        tex.einsum("ij,ij->ij", a, b, out=out)
    for out in outs:
        np.testing.assert_array_equal(out, want)
looped = rt.teams.value - teams - apart
tex.einsum("ij,ij->ij", a, b, out=outs[0])
beyond = pays(rt.allowed.value + 1)     # moments after a region, but more threads than CPUs
if not looped:
    import sys
    print(f"no team in {tries} tries of 4 calls; {rt.allowed.value} CPUs, "
          f"{rt.crowdings.value} crowdings", file=sys.stderr)
teams = rt.teams.value
outs = [tex.einsum("ik,kj->ij", small, small) for _ in range(200)]   # a small contraction
for out in outs:                                                    # stays on one thread
    np.testing.assert_allclose(out, want_small, rtol=1e-4, atol=1e-4)
small_teams = rt.teams.value - teams
time.sleep(0.05)
teams = rt.teams.value
for _ in range(3):                  # two calls after a pause: alone
    time.sleep(0.02)
    outs = [tex.einsum("ij,ij->ij", a, b) for _ in range(2)]
pairs = rt.teams.value - teams
print(*asks, beyond, apart, looped > 0, small_teams, pairs)
"""


def test_a_middling_region_gets_a_team_only_when_called_in_a_loop(tmp_path):
    """Under PARALLEL_MIN_WORK iterations, a region over at least MIDDLING_MIN_BYTES of
    arrays opens to a team only while the workers are awake or the last two such
    questions came moments after a region ended (tex_rt_team_pays), and never to more
    threads than the process's CPUs: a 512 x 512 product called in a loop takes the
    team from its third call on; called now and then, or twice after a pause, it runs
    on its caller (waking a sleeping worker costs more than half its work); a 64^3
    product (48 KiB) stays on one thread even in a loop. In a child: a fresh runtime,
    where no region has ended before the first questions."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, TEX_CACHE_DIR=str(tmp_path))
    run = subprocess.run([sys.executable, "-c", TEAM_PAYS_SCRIPT], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["0", "0", "0", "0", "0", "True", "0", "0"], run.stderr


def test_threads_that_lose_their_cpu_find_it_crowded(tmp_path):
    """Two threads confined to one CPU: the one that spins loses the CPU to the one
    with the work for a time slice, notices the jump of the clock, and marks the CPUs
    crowded (tex_rt_robbed: counted; tex_rt_is_crowded says so to a call path), and the
    results stay right throughout, crowded or not. In a child (it confines the
    process)."""
    script = (
        "import os, time, numpy as np\n"
        "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
        "import tex\n"
        "from tex.backends.llvm import threads\n"
        "tex.set_num_threads(2)\n"
        "a = np.random.default_rng(0).standard_normal((256, 512)).astype(np.float32)\n"
        "b = np.random.default_rng(1).standard_normal((512, 64)).astype(np.float32)\n"
        "want = a @ b\n"
        "deadline = time.monotonic() + 60\n"
        "while threads.runtime().crowdings.value == 0 and time.monotonic() < deadline:\n"
        "    np.testing.assert_allclose(tex.einsum('ik,kj->ij', a, b), want, rtol=1e-4,\n"
        "                               atol=1e-3)\n"
        "flags = []\n"
        "for _ in range(20):\n"
        "    np.testing.assert_allclose(tex.einsum('ik,kj->ij', a, b), want, rtol=1e-4,\n"
        "                               atol=1e-3)\n"
        "    flags.append(threads.runtime().is_crowded())\n"
        "print(any(flags), threads.runtime().crowdings.value)\n")
    seen, crowdings = _child_stdout(script, tmp_path).split()[-2:]
    assert int(crowdings) > 0
    assert seen == "True"          # what a call path reads (calls.thread_parts)


RESCUE_SCRIPT = r"""
import os, subprocess, sys, time
cpus = sorted(os.sched_getaffinity(0))[:2]
os.sched_setaffinity(0, set(cpus))           # before tex reads the CPU list
import numpy as np, tex
from tex.backends.llvm import threads
# a busy process on the second CPU, where the worker goes: the worker loses its CPU to it
hog = subprocess.Popen([sys.executable, "-c",
                        f"import os\nos.sched_setaffinity(0, {{{cpus[1]}}})\nwhile True: pass"])
try:
    tex.set_num_threads(2)
    rt = threads.runtime()
    a = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)
    want = a @ a
    deadline = time.monotonic() + 60
    while rt.rescues.value == 0 and time.monotonic() < deadline:
        np.testing.assert_allclose(tex.einsum("ik,kj->ij", a, a), want, rtol=1e-4, atol=1e-3)
    # the rescued worker frees itself once its share is done (just after the caller
    # returns): checked before any other call, whose regions would move it anyway
    time.sleep(0.1)
    free = all(sorted(os.sched_getaffinity(int(t))) == cpus for t in os.listdir("/proc/self/task"))
finally:
    hog.kill()
for _ in range(20):
    np.testing.assert_allclose(tex.einsum("ik,kj->ij", a, a), want, rtol=1e-4, atol=1e-3)
print(rt.rescues.value)
print(free)
"""


def test_a_caller_waiting_for_a_worker_behind_a_busy_thread_moves_it(tmp_path):
    """A busy process on the worker's CPU: the caller that waits for the worker at the
    end of a region (the CPUs crowded) moves it to the caller's own CPU, and the worker,
    done, may run anywhere again (no thread of the process stays pinned). Results stay
    right. In a child (it confines the process); needs 2 CPUs."""
    import os
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU")
    rescues, free = _child_stdout(RESCUE_SCRIPT, tmp_path).split()
    assert int(rescues) > 0
    assert free == "True"


def test_the_kernel_call_releases_the_gil():
    """Another Python thread runs while a kernel runs: with a switch interval of 10 s, a
    thread that held the GIL through the kernel would keep it until its call returned
    (the fast entry releases it around the kernel, as ctypes' CFUNCTYPE did)."""
    import time
    g = gemm()
    a = np.ones((768, 768), np.float32)
    g(a, a)
    started, times = threading.Event(), {}

    def work():
        started.set()
        g(a, a), g(a, a), g(a, a)
        times["kernel_end"] = time.perf_counter()
    old = sys.getswitchinterval()
    sys.setswitchinterval(10.0)
    try:
        thread = threading.Thread(target=work)
        thread.start()
        started.wait()
        times["other_thread_ran"] = time.perf_counter()
        thread.join()
    finally:
        sys.setswitchinterval(old)
    assert times["other_thread_ran"] < times["kernel_end"]
    assert type(g._sig.scope["_cfunc"]).__name__ == "builtin_function_or_method"


# ================================================================ definition-time errors

def test_free_index_missing_from_the_output():
    A = tex.tensor("A", (M, N), "float32")
    with pytest.raises(ValueError, match="j"):
        tex.compute("C", (i,), A[i, j])
    with pytest.raises(ValueError):
        tex.compute("C", (i,), A[i, j] + tex.sum(A[i, j], over=j))


def test_over_index_not_used_by_the_body():
    A = tex.tensor("A", (M, N), "float32")
    with pytest.raises(ValueError, match="k"):
        tex.sum(A[i, j], over=k)
    with pytest.raises(ValueError, match="k"):
        tex.max(A[i, j], over=(j, k))
    with pytest.raises(TypeError):
        tex.sum(A[i, j], over=N)


def test_rank_mismatch_in_indexing():
    A = tex.tensor("A", (M, N), "float32")
    with pytest.raises(tex.ShapeError, match="A"):
        A[i]
    with pytest.raises(tex.ShapeError, match="A"):
        A[i, j, k]


@pytest.mark.parametrize("index", ["i*j", "i*i", "i//2", "N*i", "i%3"])
def test_non_affine_index(index):
    A = tex.tensor("A", (N,), "float32")
    expr = {"i*j": i * j, "i*i": i * i, "i//2": i // 2, "N*i": N * i, "i%3": i % 3}[index]
    with pytest.raises(ValueError, match="affine"):
        A[expr]


def test_other_malformed_definitions():
    A = tex.tensor("A", (M, N), "float32")
    with pytest.raises(tex.ShapeError, match="negative"):
        tex.compute("C", (i, j), A[i, j - 1])
    with pytest.raises(ValueError):
        tex.compute("C", (i, i), A[i, i])              # an output index twice
    with pytest.raises(TypeError):
        A[0:2, j]
    with pytest.raises(tex.ShapeError, match="extent"):
        tex.compute("C", (i, j, k), A[i, j])           # k: extent cannot be inferred
    with pytest.raises(TypeError):
        tex.tensor("X", (N,), "complex64")
    with pytest.raises(TypeError):
        tex.tensor("X", (N,), "not-a-dtype")
    with pytest.raises(TypeError):
        tex.compute("C", (i,), A[i, 0] + "x")
    with pytest.raises(TypeError):
        bool(A[i, 0] > 0)
    B = tex.tensor("A", (N,), "float32")               # a second tensor named A
    C = tex.compute("C", (i,), A[0, i] + B[i])
    with pytest.raises(ValueError, match="A"):
        tex.compile(C)


# ================================================================ generated text

def test_generated_text_is_available():
    g = gemm()
    for text in (g.llvm_ir, g.asm, g.loop_nest):
        assert isinstance(text, str) and text.strip()
    assert "define" in g.llvm_ir
    assert "for" in g.loop_nest and "C" in g.loop_nest
    assert "tex_C" in g.asm
    assert repr(g)


def test_asm_uses_the_host_vector_registers():
    features = set(llvm.get_host_cpu_features().flatten().split(","))
    if not re.match(r"(x86_64|i\d86)", llvm.get_process_triple()):
        pytest.skip("register names checked for x86 only")
    f = compiled("vector-add", lambda: tex.compute(
        "V", (i,), tex.tensor("x", (N,), "float32")[i] + tex.tensor("y", (N,), "float32")[i]))
    asm = f.asm
    regs = {name: bool(re.search(rf"%{name}\d", asm)) for name in ("xmm", "ymm", "zmm")}
    assert any(regs.values()), "no vector registers in the assembly"
    if "+avx512f" not in features:
        assert not regs["zmm"], "AVX-512 registers on a host without AVX-512"
    if "+avx" not in features:
        assert not regs["ymm"], "AVX registers on a host without AVX"
    if "+avx2" in features:
        assert regs["ymm"] or regs["zmm"], "an AVX2 host should get 256-bit (or wider) code"


def test_buffers_lists_intermediates():
    X = tex.tensor("X", (M, N), "float64")

    def build():
        mx = tex.compute("mx", (i,), tex.max(X[i, j], over=j))
        return tex.compute("Y", (i, j), X[i, j] - mx[i])
    f = compiled("buffers", build)
    names = [b.name for b in f.buffers]
    assert "mx" in names and "Y" not in names
    x = RNG.standard_normal((3, 4))
    np.testing.assert_array_equal(f(x), x - x.max(1, keepdims=True))
