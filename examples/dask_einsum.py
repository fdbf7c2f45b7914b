"""tex on dask.distributed: a chunked matmul and an int8 row sum, timed against dask's own.

tex.einsum and compiled tex functions take dask arrays and return dask arrays: the graph
is dask's (blockwise over the chunks, a tree reduction where a contracted or reduced axis
is split), and each chunk task runs a tex kernel, compiled on the worker where it first
runs (or loaded from the worker's kernel cache). Needs `pip install 'tex[dask]'`.

    python examples/dask_einsum.py            # small sizes, a quick run (--rounds 1: quicker)
    python examples/dask_einsum.py --big      # 4096^2 matmul in 1024^2 chunks, 512 MiB int8
"""
import argparse
import os

import numpy as np
import dask.array as da
from dask.distributed import Client, LocalCluster

import tex


def seconds(client, make, rounds):
    """Median seconds to compute `make()` on the workers (kept there, not gathered)."""
    from tex.dask_bench import timed        # releases each result before the next run
    times = [timed(client, make) for _ in range(rounds + 2)]
    return sorted(times[2:])[rounds // 2]   # the first runs compile and warm up


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big", action="store_true", help="issue 15's benchmark sizes")
    parser.add_argument("--rounds", type=int, default=3, help="timed runs (default 3)")
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="a running dask scheduler to use instead of a new LocalCluster")
    args = parser.parse_args()
    if args.scheduler:
        with Client(args.scheduler) as client:
            run(client, args)
    else:
        os.environ["TEX_NUM_THREADS"] = "1"     # one thread per worker, read at import
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            run(client, args)
    print("dask_einsum: all results match numpy")


def run(client, args):
    n, chunk, rows, cols = (4096, 1024, 32768, 16384) if args.big else (512, 200, 1000, 4000)
    rng = da.random.default_rng(0)          # the operands are made on the workers

    # a chunked matmul: the contracted index k is split across chunks, so each task
    # multiplies one pair of blocks and dask's tree reduction sums the partial products
    x = rng.standard_normal((n, n), chunks=chunk, dtype=np.float32)
    y = rng.standard_normal((n, n), chunks=chunk, dtype=np.float32)
    x, y = client.persist([x, y])
    c = tex.einsum("ik,kj->ij", x, y)
    print(f"tex.einsum over dask arrays: {c!r}")
    k = min(n, 300)                         # numpy checks a corner of the product
    want = x[:k].compute() @ y[:, :k].compute()
    np.testing.assert_allclose(c[:k, :k].compute(), want, rtol=1e-3, atol=1e-3)
    t = seconds(client, lambda: tex.einsum("ik,kj->ij", x, y), args.rounds)
    d = seconds(client, lambda: x @ y, args.rounds)
    print(f"matmul {n}x{n} @ {n}x{n} in {chunk}^2 chunks: tex {t * 1e3:.1f} ms, "
          f"dask {d * 1e3:.1f} ms")

    # an int8 -> int32 row sum, compiled once; the columns are split into chunks too,
    # so each task sums its part of a row and the parts are added up
    M, N = tex.sizes("M N")
    i, j = tex.indices("i j")
    X = tex.tensor("X", (M, N), "int8")
    row_sum = tex.compile(tex.compute("S", (i,), tex.sum(X[i, j], over=j, dtype="int32")))
    a = rng.integers(-128, 128, (rows, cols), dtype=np.int8,
                     chunks=(rows // 8, cols // 2 + 7))
    a = client.persist(a)
    s = row_sum(a)
    print(f"compiled tex function over a dask array: {s!r}")
    block = a[:100].compute()
    np.testing.assert_array_equal(s[:100].compute(), block.sum(axis=1, dtype=np.int32))
    t = seconds(client, lambda: row_sum(a), args.rounds)
    d = seconds(client, lambda: a.sum(axis=1, dtype=np.int32), args.rounds)
    print(f"int8 row sums of {rows * cols / 2**20:.0f} MiB: tex {t * 1e3:.1f} ms, "
          f"dask {d * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
