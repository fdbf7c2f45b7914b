"""Innermost reductions: the three strategies of seeds/004 on int8[384x512] -> int32[384].

For each strategy the loop nest is printed, the result checked against numpy and
timed against `a.sum(axis=1, dtype=np.int32)` (medians of interleaved samples):

- inner_parallel: the row loop is split by the vector width W and its inner part moved
  inside the reduction, so each lane accumulates its own row (no horizontal reduction;
  the lanes read W different rows: row-major blocks are transposed in registers);
- inner_reduction: the reduced axis is vectorized and every vector is reduced
  horizontally into the scalar accumulator S_acc;
- vector_accumulator: the reduced axis is split by W*U and privatized, so U vectors of
  partial sums (the array indexed by ji) run through the loop in registers and one
  horizontal reduction (the loop over ji_1) happens at the end.

Then the accuracy of float32 row sums of uniform(0, 1) data (4096x4096): each order's
maximum relative error against a float64 reference, beside numpy's pairwise sum and
the sequential order that `tex.compile(S, fast_math=False)` keeps.

    python examples/innermost_reduction.py            # the 4096x4096 accuracy table
    python examples/innermost_reduction.py --small    # a quick run (256x4096, fewer samples)
"""
import argparse

import numpy as np

import tex
from tex.bench import interleave

STRATEGIES = ["inner_parallel", "inner_reduction", "vector_accumulator"]
ORDER = {
    "inner_parallel": "sequential along each row (a lane per row)",
    "inner_reduction": "per vector a horizontal sum, added in sequence",
    "vector_accumulator": "W*U strided partial sums, combined at the end",
}


def row_sum(dtype, acc=None):
    M, N = tex.sizes("M N")
    i, j = tex.indices("i j")
    X = tex.tensor("X", (M, N), dtype)
    return tex.compute("S", (i,), tex.sum(X[i, j], over=j, dtype=acc))


def with_strategy(S, strategy, tail="peel"):
    s = tex.schedule(S)
    s[S].reduction_strategy(strategy, tail=tail)
    return s


def reference_case(rounds):
    S = row_sum("int8", "int32")
    a = np.random.default_rng(0).integers(-128, 128, (384, 512), dtype=np.int8)
    want = a.sum(axis=1, dtype=np.int32)
    compiled = {}
    for strategy in STRATEGIES:
        s = with_strategy(S, strategy)
        print(f"--- {strategy} (tail='peel'): {ORDER[strategy]}")
        print(s)
        print()
        compiled[strategy] = tex.compile(s)
    compiled["auto (tex.compile(S))"] = tex.compile(S)

    print(f"int8[384x512] -> int32[384] row sums, {tex.get_num_threads()} threads available; "
          "medians of interleaved samples")
    print(f"{'schedule':24}  {'tex us':>8}  {'numpy us':>8}  {'numpy/tex':>9}  {'tex GB/s':>8}")
    for name, f in compiled.items():
        got = f(a)
        assert got.dtype == np.int32 and np.array_equal(got, want), name
        tex_s, numpy_s = interleave(lambda: f(a), lambda: a.sum(axis=1, dtype=np.int32),
                                    rounds)
        print(f"{name:24}  {tex_s * 1e6:8.2f}  {numpy_s * 1e6:8.2f}  {numpy_s / tex_s:8.2f}x  "
              f"{a.nbytes / tex_s / 1e9:8.1f}")
    print()


def accuracy(rows, cols):
    S = row_sum("float32")
    a = np.random.default_rng(1).random((rows, cols), dtype=np.float32)
    exact = a.astype(np.float64).sum(axis=1)          # float64: exact to ~1e-16 here

    def max_rel(got):
        got = np.asarray(got, dtype=np.float64)
        return float(np.max(np.abs(got - exact) / np.abs(exact)))

    results = [(s, ORDER[s], tex.compile(with_strategy(S, s))(a)) for s in STRATEGIES]
    results += [
        ("auto (tex.compile(S))", "the default schedule", tex.compile(S)(a)),
        ("fast_math=False", "sequential (tex.compile(S, fast_math=False))",
         tex.compile(S, fast_math=False)(a)),
        ("numpy a.sum(axis=1)", "numpy's pairwise sum", a.sum(axis=1)),
        ("float64, rounded", "the exact sum rounded to float32 (the floor)",
         exact.astype(np.float32)),
    ]
    print(f"float32 row sums of uniform(0, 1) data, {rows}x{cols}: maximum relative error "
          "against a float64 reference")
    print(f"{'order':24}  {'max rel. error':>14}  {'x numpy':>8}  how")
    numpy_err = max_rel(a.sum(axis=1))
    for name, how, got in results:
        err = max_rel(got)
        # any order is within (n - 1) * 2**-24 of the exact sum (all terms positive)
        assert err <= (cols - 1) * 2.0 ** -24, (name, err)
        print(f"{name:24}  {err:14.2e}  {err / numpy_err:8.1f}  {how}")
    print()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true",
                        help="accuracy on 256x4096 and fewer timing samples")
    args = parser.parse_args()
    reference_case(rounds=5 if args.small else 15)
    accuracy(*((256, 4096) if args.small else (4096, 4096)))
    print("innermost_reduction: all results match numpy")


if __name__ == "__main__":
    main()
