"""Quick code for a small first call, optimized code after it (backends/llvm/tiers.py):
both tiers against NumPy, the switch, the disk cache, a failed upgrade, threads, fork."""
import os
import subprocess
import sys
import textwrap
import threading
import warnings

import numpy as np
import pytest

import tex
from tex.backends.llvm import jit, tiers
from tex.backends.llvm.diskcache import read_cached

RNG = np.random.default_rng(7)


def _unique():
    """A name no other test's kernel has (a kernel's cache key includes its symbol)."""
    return f"T{RNG.integers(1 << 40)}"


@pytest.fixture
def tiered(monkeypatch):
    """Quick code for any kernel (TEX_TIERED=1), also one whose values it may change."""
    monkeypatch.setenv("TEX_TIERED", "1")


@pytest.fixture
def held(tiered, monkeypatch):
    """Upgrades stay queued (no thread starts them): a call that needs one compiles it."""
    monkeypatch.setattr(tiers, "_submit", lambda upgrade: None)


def matmul(name):
    M, N, K = tex.sizes("M N K")
    i, j, k = tex.indices("i j k")
    A, B = tex.tensor("A", (M, K), "float32"), tex.tensor("B", (K, N), "float32")
    return tex.compute(name, (i, j), tex.sum(A[i, k] * B[k, j], over=k))


def scaled(name):
    M, N = tex.sizes("M N")
    i, j = tex.indices("i j")
    X = tex.tensor("X", (M, N), "float32")
    return tex.compute(name, (i, j), X[i, j] * 3.0 + 1.0)


def test_a_small_first_call_runs_quick_code_and_the_next_calls_optimized_code(held):
    f = tex.compile(matmul(_unique()))
    a, b = RNG.standard_normal((65, 63), np.float32), RNG.standard_normal((63, 7), np.float32)
    quick_before = jit.STATS["compiled_quick"]
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-4, atol=1e-4)
    assert jit.STATS["compiled_quick"] == quick_before + 1
    built = f._sig.built
    assert built.upgrade is not None and built.upgrade.state == "queued"
    assert read_cached(built.key, "kernel") is None      # quick code never reaches the disk
    for _ in range(tiers.QUICK_CALLS - 1):               # quick code, still
        np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-4, atol=1e-4)
    assert f._sig.built is built
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-4, atol=1e-4)  # waits: compiles it
    assert built.upgrade.state == "done" and built.upgrade.error is None
    now = f._sig.built
    assert now.upgrade is None and now.address != built.address
    assert read_cached(built.key, "kernel") is not None
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_a_call_after_the_upgrade_runs_the_optimized_code(tiered):
    f = tex.compile(scaled(_unique()))
    x = RNG.standard_normal((5, 9), np.float32)
    f(x)
    quick = f._sig.built
    quick.upgrade.wait()                 # (done by the upgrade thread, or here)
    assert f._sig.built is quick         # switched at the next call, not before
    np.testing.assert_array_equal(f(x), x * np.float32(3) + np.float32(1))
    assert f._sig.built.upgrade is None and f._sig.built.address != quick.address


def test_a_first_call_too_large_for_quick_code_runs_optimized_code(held):
    """An elementwise kernel's sizes are not known when tex.compile compiles it, nor a
    matmul's specializations: quick code first, and a first call too large for it runs
    the optimized code (compiled for it)."""
    x = RNG.standard_normal((2048, 1025), np.float32)
    f = tex.compile(scaled(_unique()))
    np.testing.assert_array_equal(f(x), x * np.float32(3) + np.float32(1))
    assert f._sig.built.upgrade is None
    a = RNG.standard_normal((512, 512), np.float32)
    g = tex.compile(matmul(_unique()))
    np.testing.assert_allclose(g(a, a), a @ a, rtol=1e-3, atol=1e-3)
    assert g._sig.built.upgrade is None


def test_an_upgrade_whose_compiler_process_another_thread_retired_compiles_anyway(
        held, monkeypatch):
    """Two threads compile upgrades (the upgrade thread, a call that waits): one may
    retire the spent compiler process just after the other was handed it. That one's
    request then meets a closed process: it asks for a new one, and does not warn."""
    handed = []
    real = tiers._compiler

    def retired_once(machine):
        process = real(machine)
        if not handed and process is not None:
            process.close()                 # (what the other thread's replacement does)
        handed.append(process)
        return process
    monkeypatch.setattr(tiers, "_compiler", retired_once)
    f = tex.compile(scaled(_unique()))
    x = RNG.standard_normal((5, 9), np.float32)
    f(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f._sig.built.upgrade.wait()
    assert len(handed) == 2 and handed[0].closed() and not handed[1].closed()
    np.testing.assert_array_equal(f(x), x * np.float32(3) + np.float32(1))
    assert f._sig.built.upgrade is None


def test_a_failed_optimized_compile_warns_and_keeps_the_quick_code(held, monkeypatch):
    f = tex.compile(scaled(_unique()))
    x = RNG.standard_normal((7, 1000), np.float32)
    want = x * np.float32(3) + np.float32(1)
    np.testing.assert_array_equal(f(x), want)

    def refuse(*args, **kwargs):
        raise jit.CompileError("LLVM refused it (injected)")
    monkeypatch.setattr(jit, "compile_module", refuse)
    for _ in range(tiers.QUICK_CALLS - 1):
        f(x)
    with pytest.warns(RuntimeWarning, match="keeps running its quickly compiled code"):
        np.testing.assert_array_equal(f(x), want)
    built = f._sig.built
    assert built.upgrade is None and read_cached(built.key, "kernel") is None
    np.testing.assert_array_equal(f(x), want)


CASES = [
    ("ij,ij->ij", [(7, 65), (7, 65)]),
    ("ij->i", [(63, 1000)]),
    ("ij->j", [(65, 7)]),
    ("ij->ji", [(63, 65)]),
    ("ik,kj->ij", [(1, 7), (7, 1000)]),
    ("ik,kj->ij", [(65, 63), (63, 65)]),
    ("bij,bjk->bik", [(3, 7, 65), (3, 65, 9)]),
    ("ij,jk,kl->il", [(7, 63), (63, 65), (65, 1)]),
    ("i,i->", [(1000,), (1000,)]),
]


@pytest.mark.parametrize("subscripts,shapes", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_quick_code_against_numpy(held, subscripts, shapes, dtype):
    """Quick code (LLVM's fast instruction selection) computes what numpy does, on
    sizes no tile divides and on a non-contiguous view; then the optimized code."""
    arrays = [(RNG.standard_normal(s) * 4).astype(dtype) for s in shapes]
    arrays[0] = np.asfortranarray(arrays[0]) if arrays[0].ndim == 2 else arrays[0]
    big = (RNG.standard_normal((2,) + shapes[-1]) * 4).astype(dtype)
    arrays[-1] = big[1]                            # a view into a larger array
    want = np.einsum(subscripts, *arrays)
    program = tex.einsum_program(subscripts, *arrays, name=_unique())
    quick_before = jit.STATS["compiled_quick"]
    f = tex.compile(program.outputs[0])
    named = {t.name: arrays[int(t.name.rsplit("_op", 1)[1])] for t in program.inputs}
    for _ in range(tiers.QUICK_CALLS + 1):       # quick calls, then the optimized one
        np.testing.assert_allclose(f(**named), want, rtol=1e-4, atol=1e-4)
    assert jit.STATS["compiled_quick"] > quick_before
    assert f._sig.built.upgrade is None


def test_threads_calling_a_new_kernel_while_it_is_upgraded(tiered):
    f = tex.compile(scaled(_unique()))
    x = RNG.standard_normal((33, 65), np.float32)
    want = x * np.float32(3) + np.float32(1)
    errors, barrier = [], threading.Barrier(4)

    def work():
        try:
            barrier.wait()
            for _ in range(25):
                np.testing.assert_array_equal(f(x), want)
        except Exception as err:        # pragma: no cover (a failure to report)
            errors.append(err)
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and not any(t.is_alive() for t in threads)
    assert f._sig.built.upgrade is None


def test_by_default_only_kernels_whose_quick_code_computes_the_same_values(monkeypatch):
    """Without TEX_TIERED, a kernel runs quick code only where the light compile and
    the optimized one compute the same values (no fast-math flags): an elementwise
    kernel, integer code, a float sum without fast_math, a matmul's register tiles
    (explicit FMAs), a fast-math float row sum on tex's vector accumulator (it sums in
    tex's order: ops.vector_flags); not a fast-math float row sum of short rows, which
    LLVM's vectorizer reassociates in its optimized code only. Quick and optimized code
    agree bit for bit there."""
    from tex.scheduler.target import target
    monkeypatch.delenv("TEX_TIERED", raising=False)
    monkeypatch.setattr(tiers, "_submit", lambda upgrade: None)
    M, N = tex.sizes("M N")
    i, j = tex.indices("i j")
    X = tex.tensor("X", (M, N), "float32")
    Xi = tex.tensor("X", (M, N), "int32")
    Xs = tex.tensor("Xs", (M, N), "float32")            # (short rows)
    cases = [
        (tex.compile(scaled(_unique())), X, True),
        (tex.compile(tex.compute(_unique(), (i,), tex.sum(Xi[i, j] * 3, over=j))), Xi, True),
        (tex.compile(tex.compute(_unique(), (i,), tex.sum(X[i, j] * 0.1, over=j)),
                     fast_math=False), X, True),
        (tex.compile(tex.compute(_unique(), (i,), tex.sum(X[i, j] * 0.1, over=j))), X, True),
        (tex.compile(tex.compute(_unique(), (i,), tex.sum(Xs[i, j] * 0.1, over=j))), Xs,
         False),
    ]
    args = {X: lambda: [(RNG.standard_normal((33, 1000)) * 100).astype(np.float32)],
            Xi: lambda: [RNG.integers(-1000, 1000, (33, 1000), dtype=np.int32)],
            Xs: lambda: [(RNG.standard_normal((33, 100)) * 100).astype(np.float32)],
            None: lambda: [RNG.standard_normal(s).astype(np.float32)
                           for s in ((65, 130), (130, 70))]}
    if target().has("fma"):
        cases.append((tex.compile(matmul(_unique())), None, True))
    for f, tensor, tiered in cases:
        x = args[tensor]()
        first = f(*x)
        assert (f._sig.built.upgrade is not None) == tiered, f
        for _ in range(tiers.QUICK_CALLS):
            later = f(*x)
        assert f._sig.built.upgrade is None
        np.testing.assert_array_equal(first, later)


def test_an_unknown_TEX_TIERED_value_warns_and_means_the_default(monkeypatch):
    monkeypatch.setenv("TEX_TIERED", "yes")
    monkeypatch.setattr(tiers, "_warned", set())
    with pytest.warns(RuntimeWarning, match="TEX_TIERED='yes' is not 0 or 1"):
        assert tiers.mode() == "exact"


def _run(script, env=None, timeout=240):
    env = dict(os.environ, TEX_TIERED="1", **(env or {}))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_a_fork_while_an_upgrade_is_under_way_leaves_the_child_working(tmp_path):
    """The child has neither the parent's upgrade thread nor its compiler process: an
    upgrade they had begun is the child's to compile when a call needs it."""
    script = """
        import os, threading, time, numpy as np, tex
        from tex.backends.llvm import tiers
        tiers._submit = lambda upgrade: None
        M = tex.sizes("M"); i = tex.indices("i")
        X = tex.tensor("X", (M,), "float32")
        f = tex.compile(tex.compute("Y", (i,), X[i] * 2.0))
        x = np.arange(100, dtype=np.float32)
        assert (f(x) == 2 * x).all()
        upgrade = f._sig.built.upgrade
        claimed = threading.Event()
        def runner():                       # a thread of the parent that took the compile
            assert upgrade._claim()
            claimed.set()
            time.sleep(60)
        threading.Thread(target=runner, daemon=True).start()
        claimed.wait()
        tiers._quick.clear()                # (and the entry evicted from the quick cache)
        pid = os.fork()
        if pid == 0:
            ok = all((f(x) == 2 * x).all() for _ in range(tiers.QUICK_CALLS + 2))
            os._exit(0 if ok and f._sig.built.upgrade is None else 3)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
    """
    r = _run(script, {"TEX_CACHE_DIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert "child 0" in r.stdout, r.stdout + r.stderr


def test_a_failed_upgrade_with_warnings_as_errors_leaves_no_call_waiting(tmp_path):
    script = """
        import warnings, numpy as np, tex
        from tex.backends.llvm import jit, tiers
        warnings.simplefilter("error")
        def refuse(*args, **kwargs):
            raise jit.CompileError("refused (injected)")
        jit.compile_module = refuse
        M = tex.sizes("M"); i = tex.indices("i")
        X = tex.tensor("X", (M,), "float32")
        f = tex.compile(tex.compute("Y", (i,), X[i] * 2.0))
        x = np.arange(100, dtype=np.float32)
        for _ in range(3 * tiers.QUICK_CALLS):
            assert (f(x) == 2 * x).all()
        print("done", f._sig.built.upgrade is None)
    """
    r = _run(script, {"TEX_CACHE_DIR": str(tmp_path)}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "done True" in r.stdout


def test_math_functions_count_in_the_cost_of_quick_code(held):
    """gelu over 1000 x 1240 elements ran 37-50 ms in quick code (1.5 ms optimized): a
    first call that large runs the optimized code."""
    M, N = tex.sizes("M N")
    i, j = tex.indices("i j")
    X = tex.tensor("X", (M, N), "float32")
    f = tex.compile(tex.compute(_unique(), (i, j), tex.gelu(X[i, j], approximate="tanh")))
    assert f._sig.built.upgrade is not None
    x = RNG.standard_normal((1000, 1240), np.float32)
    f(x)
    assert f._sig.built.upgrade is None
    program = f.program
    plain = tiers.quick_cost(program, {M: 1000, N: 1240}, False)
    assert plain > tiers.QUICK_RUN_NS > tiers.quick_cost(program, {M: 100, N: 124}, False)


def test_a_new_process_loads_the_optimized_code_the_last_one_cached(tmp_path):
    """A process that ran a kernel once leaves its optimized code on disk at exit (the
    upgrade under way is finished); the next process loads it and compiles nothing."""
    script = """
        import numpy as np, tex
        from tex.backends.llvm import jit
        a = np.ones((40, 30), np.float32)
        assert np.allclose(tex.einsum("ik,kj->ij", a, a.T), 30)
        print(dict(jit.STATS))
    """
    first = _run(script, {"TEX_CACHE_DIR": str(tmp_path)})
    assert first.returncode == 0, first.stderr
    assert "compiled_quick" in first.stdout
    second = _run(script, {"TEX_CACHE_DIR": str(tmp_path)})
    assert second.returncode == 0, second.stderr
    assert "compiled" not in second.stdout and "disk_hits" in second.stdout, second.stdout
