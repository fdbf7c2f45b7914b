"""Split-K on the reference shape C[123x456] = A[123x51234] @ B[51234x456].

The reduction loop k becomes an outer parallel loop over P chunks of ceil(K/P), each
accumulating into its own slice of a private [P, M, N] buffer (initialised with 0, the
identity of the sum), and a serial merge adds the slices. P is a call-time argument:
it need not divide K, and P > K leaves the empty chunks at the identity.

    python examples/split_k.py            # the reference shape
    python examples/split_k.py --small    # a quick run on a small shape
"""
import argparse
import time

import numpy as np

import tex


def median_ms(fn, repeat=5):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * sorted(times)[len(times) // 2]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a 37x5003x29 shape")
    args = parser.parse_args()
    m, k, n = (37, 5003, 29) if args.small else (123, 51234, 456)

    M, N, K = tex.sizes("M N K")
    i, j, kk = tex.indices("i j k")
    A = tex.tensor("A", (M, K), "float32")
    B = tex.tensor("B", (K, N), "float32")
    C = tex.compute("C", (i, j), tex.sum(A[i, kk] * B[kk, j], over=kk))

    s = tex.schedule(C)
    print("before split_k:\n" + str(s) + "\n")
    ko, ki = s[C].split_k(kk, parts=tex.param("P"))
    s[C].reorder(ko, i, ki, j)               # each chunk walks rows of B: unit stride in j
    print("after split_k(k, parts=tex.param('P')) and reorder(ko, i, ki, j):\n" + str(s) + "\n")
    f = tex.compile(s)
    print("buffers:", ", ".join(f"{b.name}{list(b.shape)}" for b in f.buffers), "\n")

    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    want = a @ b
    flop = 2.0 * m * n * k
    print(f"{m}x{k} @ {k}x{n}, {tex.get_num_threads()} threads")
    print(f"{'P':>5}  {'tex ms':>9}  {'GFLOP/s':>8}  max rel. error")
    for parts in (1, 2, 3, 4, 7, 8):
        got = f(a, b, P=parts)
        err = float(np.abs(got - want).max() / np.abs(want).max())
        assert err < 1e-4, (parts, err)
        ms = median_ms(lambda: f(a, b, P=parts))
        print(f"{parts:>5}  {ms:9.2f}  {flop / ms / 1e6:8.1f}  {err:.1e}")
    ms = median_ms(lambda: a @ b)
    print(f"numpy  {ms:9.2f}  {flop / ms / 1e6:8.1f}")
    print("split_k: all results match numpy")


if __name__ == "__main__":
    main()
