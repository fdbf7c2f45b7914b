"""Long float sums in blocks (schedule/blocked_sums.py): a total or a dot product of a
million float32 terms is as accurate as blocks of 4096 allow (before: 1.5e-4 off on a
million copies of 0.1, numpy's pairwise sum 6e-8), at any length (none, less than a
block, a block and one, strided), and a row sum keeps its plain loop."""
import re

import numpy as np
import pytest

import tex


@pytest.mark.parametrize("subscripts", ["i->", "i,i->"])
def test_a_long_float32_sum_adds_blocks_from_zero(subscripts):
    x = np.full(1_000_000, 0.1, np.float32)
    operands = [x] * (subscripts.count(",") + 1)
    exact = np.einsum(subscripts, *[o.astype(np.float64) for o in operands])
    got = float(tex.einsum(subscripts, *operands))
    assert abs(got - exact) / exact < 2e-5, (got, exact)


@pytest.mark.parametrize("n", [0, 1, 7, 4095, 4096, 4097, 12289, 100_003])
def test_every_length_and_layout_sums_right(n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(2 * n + 1).astype(np.float32)
    for view in (x[:n], x[::2][:n]):
        want = view.astype(np.float64).sum()
        np.testing.assert_allclose(float(tex.einsum("i->", view)), want, rtol=1e-5,
                                   atol=1e-4 * max(1, n) ** 0.5)


def test_the_blocks_are_in_the_printed_nest_and_rows_keep_their_loop():
    N, M = tex.sizes("N M")
    i, j = tex.indices("i j")
    X = tex.tensor("X", (N,), "float32")
    total = str(tex.schedule(tex.compute("S", (), tex.sum(X[i], over=i))).auto())
    assert re.search(r"for ib in 0\.\.ceiling\(N/4096\):  # reduction\n +S_acc_blk = 0\.0\n"
                     r" +for i in 0\.\.Min\(4096, N - 4096\*ib\)", total), total
    Y = tex.tensor("Y", (M, N), "float32")
    rows = str(tex.schedule(tex.compute("R", (j,), tex.sum(Y[j, i], over=i))).auto())
    assert "_blk" not in rows, rows
    ints = tex.tensor("Z", (N,), "int32")
    assert "_blk" not in str(tex.schedule(tex.compute("T", (), tex.sum(ints[i], over=i)))
                             .auto())
