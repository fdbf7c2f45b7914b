"""Kernel temporaries kept between calls (backends/llvm/pool.py): a second call reuses
the first call's blocks, results stay right when calls of other sizes and concurrent
calls share the slots, the kept bytes stay within the bound, and a forked child's calls
work (its lock re-initialised)."""
import os
import subprocess
import sys
import threading

import numpy as np

import tex
from tex.backends.llvm import pool, threads


def softmax_rows():
    """P = softmax over j of X (i, j): its row maxima, sums and X - max are intermediates,
    S (an elementwise copy of X it reads twice) one of the size of X."""
    M, N = tex.sizes("M N")
    i, j = tex.indices("i j")
    X = tex.tensor("X", (M, N), "float32")
    S = tex.compute("S", (i, j), X[i, j] * 2.0)
    P = tex.compute("P", (i, j), tex.softmax(S[i, j], over=j))
    return tex.compile(P)


def reference(x):
    s = x.astype(np.float64) * 2.0
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_a_second_call_reuses_the_first_calls_blocks_and_sizes_may_change():
    f = softmax_rows()
    rt = threads.runtime()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 512)).astype(np.float32)
    np.testing.assert_allclose(f(X=x), reference(x), rtol=1e-5, atol=1e-7)
    kept = rt.pool_bytes.value
    assert kept >= 512 * 512 * 4, kept             # S, 1 MiB, kept for the next call
    np.testing.assert_allclose(f(X=x), reference(x), rtol=1e-5, atol=1e-7)
    assert rt.pool_bytes.value == kept             # taken and given back: nothing new
    for shape in [(513, 500), (7, 65), (300, 1000), (512, 512)]:   # other sizes between
        y = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(f(X=y), reference(y), rtol=1e-5, atol=1e-7)
        assert 0 <= rt.pool_bytes.value <= pool.POOL_BYTES


def test_many_sizes_stay_within_the_bound():
    f = softmax_rows()
    rt = threads.runtime()
    rng = np.random.default_rng(1)
    for n in range(12):                     # more sizes than slots, some over the bound
        rows = 100 + 97 * n
        y = rng.standard_normal((rows, 4000 if n % 4 == 0 else 300)).astype(np.float32)
        np.testing.assert_allclose(f(X=y), reference(y), rtol=1e-5, atol=1e-7)
        assert 0 <= rt.pool_bytes.value <= pool.POOL_BYTES


def test_concurrent_calls_never_share_a_block():
    f = softmax_rows()
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal((256 + 16 * (t % 2), 400)).astype(np.float32)
              for t in range(4)]
    wrong = []

    def run(x):
        want = reference(x)
        for _ in range(25):
            if not np.allclose(f(X=x), want, rtol=1e-5, atol=1e-7):
                wrong.append(x.shape)
    team = [threading.Thread(target=run, args=(x,)) for x in inputs]
    for t in team:
        t.start()
    for t in team:
        t.join()
    assert not wrong


FORK = r"""
import os, numpy as np, sys
sys.path.insert(0, sys.argv[1])
from test_pool import softmax_rows, reference
f = softmax_rows()
x = np.random.default_rng(3).standard_normal((300, 300)).astype(np.float32)
f(X=x)
pid = os.fork()
if pid == 0:
    ok = np.allclose(f(X=x), reference(x), rtol=1e-5, atol=1e-7)
    ok = ok and np.allclose(f(X=x[:200]), reference(x[:200]), rtol=1e-5, atol=1e-7)
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status), np.allclose(f(X=x), reference(x), rtol=1e-5))
"""


def test_a_forked_child_takes_and_gives_blocks(tmp_path):
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, "-c", FORK, here], capture_output=True, text=True,
                         timeout=240, env=dict(os.environ, TEX_CACHE_DIR=str(tmp_path)))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "child 0 True" in out.stdout, out.stdout + out.stderr[-2000:]


def test_small_temporaries_on_the_stack_and_from_malloc_stay_right():
    """A batch of tiny products packs B once a product inside a nested parallel loop's
    function: a panel of up to 16 KiB is taken on that function's stack (K <= 36 here),
    a larger one from the runtime (malloc's bins, aligned by pool.py, under 64 KiB).
    Both sides of each bound, odd batches, a strided view, 1 and 3 threads."""
    NB, M, K, N = tex.sizes("NB M K N")
    b, i, j, k = tex.indices("b i j k")
    A = tex.tensor("A", (NB, M, K), "float32")
    B = tex.tensor("B", (NB, K, N), "float32")
    f = tex.compile(tex.compute("C", (b, i, k), tex.sum(A[b, i, j] * B[b, j, k], over=j)))
    rng = np.random.default_rng(1)
    before = tex.get_num_threads()
    try:
        for threads_ in (1, 3):
            tex.set_num_threads(threads_)
            for nb, m, kk, n in [(7, 3, 36, 3), (7, 3, 37, 5), (65, 8, 146, 8),
                                 (65, 8, 147, 7), (1000, 3, 3, 3)]:
                a = rng.standard_normal((nb, m, kk)).astype(np.float32)
                bb = rng.standard_normal((nb, n, kk)).astype(np.float32).transpose(0, 2, 1)
                np.testing.assert_allclose(f(A=a, B=bb), a @ bb, rtol=1e-4, atol=1e-4)
    finally:
        tex.set_num_threads(before)
