"""Long float totals in blocks (schedule/blocked_sums.py): a total or a dot product of
millions of float32 terms, over one index or several, is as accurate as blocks and
superblocks allow (before: 1.5e-4 off on a million copies of 0.1 over one index, 1e-5
over two; numpy.einsum 5e-6), at any length (none, less than a block, a block and one,
a superblock and one, strided, transposed), and a row sum keeps its plain loop."""
import re

import numpy as np
import pytest

import tex


def relative_error(subscripts, operands):
    exact = np.einsum(subscripts, *[o.astype(np.float64) for o in operands])
    return abs(float(tex.einsum(subscripts, *operands)) - exact) / abs(exact)


@pytest.mark.parametrize("subscripts", ["i->", "i,i->"])
def test_a_long_float32_sum_adds_blocks_from_zero(subscripts):
    x = np.full(1_000_000, 0.1, np.float32)
    assert relative_error(subscripts, [x] * (subscripts.count(",") + 1)) < 2e-6


@pytest.mark.parametrize("shape", [(300, 5000), (3, 1_000_000), (100_000, 7), (5000, 300),
                                   (2, 3, 200_000)])
def test_a_total_over_several_indices_sums_each_row_from_zero(shape):
    """Each row of `ij->` is one term of the total: 0.1 summed 1.5 million times lands
    within 2e-6 (before: the running total rode through every row, 1e-5 to 3e-5 off;
    numpy.einsum 2.5e-6 to 5e-6)."""
    x = np.full(shape, 0.1, np.float32)
    assert relative_error("ijk"[:len(shape)] + "->", [x]) < 2e-6


@pytest.mark.parametrize("n", [0, 1, 7, 4095, 4096, 4097, 12289, 100_003, 262_145])
def test_every_length_and_layout_sums_right(n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(2 * n + 1).astype(np.float32)
    for view in (x[:n], x[::2][:n]):
        want = view.astype(np.float64).sum()
        np.testing.assert_allclose(float(tex.einsum("i->", view)), want, rtol=1e-5,
                                   atol=1e-4 * max(1, n) ** 0.5)


@pytest.mark.parametrize("rows, cols", [(0, 5), (5, 0), (1, 1), (63, 65), (65, 4095),
                                        (7, 4097), (4097, 3), (2, 262_145)])
def test_every_shape_and_layout_of_a_two_index_total_sums_right(rows, cols):
    rng = np.random.default_rng(rows * 7 + cols)
    x = rng.standard_normal((rows, 2 * cols)).astype(np.float32)
    for view in (x[:, :cols], x[:, ::2], x[:, :cols].T):
        want = view.astype(np.float64).sum()
        tol = 1e-4 * max(1, rows * cols) ** 0.5
        np.testing.assert_allclose(float(tex.einsum("ij->", view)), want, rtol=1e-5, atol=tol)
        np.testing.assert_allclose(float(tex.einsum("ij,ij->", view, view)),
                                   (view.astype(np.float64) ** 2).sum(), rtol=1e-5, atol=tol)


def test_the_blocks_are_in_the_printed_nest_and_rows_keep_their_loop():
    N, M = tex.sizes("N M")
    i, j = tex.indices("i j")
    X = tex.tensor("X", (N,), "float32")
    total = str(tex.schedule(tex.compute("S", (), tex.sum(X[i], over=i))).auto())
    assert re.search(r"for ibb in 0\.\.ceil\(N/262144\):  # reduction\n +S_acc_i_sup = 0\.0\n"
                     r" +for ib in 0\.\.min\(64, ceil\(\(N - 262144\*ibb\)/4096\)\):  # "
                     r"reduction\n +S_acc_i_blk = 0\.0\n +for i in ", total), total
    Y = tex.tensor("Y", (M, N), "float32")
    rows = str(tex.schedule(tex.compute("R", (j,), tex.sum(Y[j, i], over=i))).auto())
    assert "_blk" not in rows and "_acc_i_part" not in rows, rows
    both = str(tex.schedule(tex.compute("T", (), tex.sum(Y[j, i], over=(j, i)))).auto())
    assert "if N > 4096:  # long row" in both and "if N <= 4096:  # short row" in both, both
    assert re.search(r"for jb in 0\.\.min\(64, ceil\(\(M - 4096\*jbb\)/64\)\)", both), both
    ints = tex.tensor("Z", (N,), "int32")
    assert "_blk" not in str(tex.schedule(tex.compute("T", (), tex.sum(ints[i], over=i)))
                             .auto())
    small = tex.tensor("W", (60, 60), "float32")
    assert "_blk" not in str(tex.schedule(tex.compute("U", (), tex.sum(small[j, i],
                                                                        over=(j, i)))).auto())


@pytest.mark.parametrize("subscripts, shape", [("i->", (4_000_000,)), ("ij->", (4000, 1000)),
                                               ("i,i->", (4_000_000,))])
def test_a_total_in_parts_adds_blocks_in_each_part(subscripts, shape):
    """A total of a megabyte or more runs in parts on the threads (auto_nest.auto_split_k);
    each part's sum is a total too, in blocks (4M float32 values in [1, 2): 3e-8 off;
    parts without blocks 1.4e-7, over two indices 1.2e-6)."""
    x = (np.random.default_rng(5).random(shape, dtype=np.float32) + 1)
    assert relative_error(subscripts, [x] * (subscripts.count(",") + 1)) < 1e-7


def test_a_large_total_prints_its_parts_each_in_blocks():
    N = tex.sizes("N")
    i = tex.indices("i")
    X = tex.tensor("X", (N,), "float32")
    nest = str(tex.schedule(tex.compute("S", (), tex.sum(X[i], over=i))).auto())
    assert "if 4*N >= 1048576:" in nest, nest
    assert re.search(r"for io in 0\.\.S_parts:  # parallel\n +for iibb in .*\n +S_part_ii_sup"
                     r" = 0\.0", nest), nest
