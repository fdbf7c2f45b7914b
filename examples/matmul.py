"""A 1024 matmul at BLAS speed: the auto schedule, and the same schedule by hand.

`tex.compile(C)` schedules a contraction the way BLIS runs one (schedule/blocking.py),
for the calls whose shapes fill its register tile (a specialization, see `s.auto()`;
the one before it, for a reduction that fits one kc block and an A that fits L2, keeps
all of k inside the register tile and reads A in place):
cache blocks of N, K and M, both operands packed into zero-padded micro-panels, an
MR x NR register tile (MR rows of A broadcast against NR/W vectors of B, one FMA per
accumulator register a step), and the blocks shared among threads. Nothing of it is
hidden in the backend: this example prints the auto schedule, writes the same steps by
hand with the primitives, checks that both print the same loop nest, and times both
against numpy's BLAS.

    python examples/matmul.py            # 1024 x 1024 x 1024
    python examples/matmul.py --small    # a quick run on 130 x 200 x 300
"""
import argparse
import time

import numpy as np

import tex
from tex.scheduler.blocking import default_blocking


def median_ms(fn, repeat=9):
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * sorted(times)[len(times) // 2]


def by_hand(C, A, B, i, j, k):
    """The auto schedule's steps written out (block sizes from this host's caches)."""
    bl = default_blocking("float32", 4)
    s = tex.schedule(C)
    c = s[C]
    ko, ki = c.split_k(k, parts=tex.param("P"))   # auto: P chosen at call time
    jo, ji = c.split(j, bl.nc)                     # B block: nc columns (L3)
    jio, jii = c.split(ji, bl.nr, tail="guard")    # register tile: nr columns
    kio, kii = c.split(ki, bl.kc)                  # reduction block: kc (L2)
    io, ii = c.split(i, bl.mc)                     # A block: mc rows (L2)
    iio, iii = c.split(ii, bl.mr, tail="guard")    # register tile: mr rows
    c.reorder(ko, jo, kio, io, jio, iio, kii, iii, jii)
    c.pack(B, kio, layout="loops")                 # B_pack[jio, kii, jii], once a kio
    c.pack(A, io, layout="loops")                  # A_pack[iio, kii, iii], once an io
    c.unroll(iii)
    c.vectorize(jii, tail="mask")
    c.parallel(jo)
    c.parallel(io)
    return s, bl


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a 130x200x300 shape")
    args = parser.parse_args()
    m, n, k = (130, 200, 300) if args.small else (1024, 1024, 1024)

    M, N, K = tex.sizes("M N K")
    i, j, kk = tex.indices("i j k")
    A = tex.tensor("A", (M, K), "float32")
    B = tex.tensor("B", (K, N), "float32")
    C = tex.compute("C", (i, j), tex.sum(A[i, kk] * B[kk, j], over=kk))

    auto = tex.schedule(C).auto()
    print("the auto schedule (tex.compile's default): for calls with M >= MR and N >= two "
          "vectors,\nall of k in the register tile when K <= kc and A fits L2, else blocked; "
          "narrower tiles,\ndot products and streamed rows for narrower or shorter "
          "products\n" + str(auto))
    print()
    hand, bl = by_hand(C, A, B, i, j, kk)
    print(f"the blocked part by hand, with mr={bl.mr} nr={bl.nr} kc={bl.kc} mc={bl.mc} "
          f"nc={bl.nc}:")
    print("\n".join(f"  {step}" for step in hand.history))
    same = str(auto["C#2"]).replace("C_parts", "P") == str(hand[C])
    print("the same loop nest as the auto schedule's blocked specialization C#2:", same, "\n")
    assert same

    f_auto, f_hand = tex.compile(auto), tex.compile(hand)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    flop = 2.0 * m * n * k
    print(f"{m}x{k} @ {k}x{n} float32, {tex.get_num_threads()} threads")
    print(f"{'':8}  {'ms':>8}  {'GFLOP/s':>8}  max rel. error")
    for name, fn in [("auto", lambda: f_auto(a, b)), ("by hand", lambda: f_hand(a, b, P=1)),
                     ("numpy", lambda: a @ b)]:
        err = float(np.abs(fn() - want).max() / np.abs(want).max())
        assert err < 1e-5, (name, err)
        ms = median_ms(fn)
        print(f"{name:8}  {ms:8.2f}  {flop / ms / 1e6:8.1f}  {err:.1e}")
    print("matmul: all results match numpy")


if __name__ == "__main__":
    main()
