"""tex over dask arrays on a real dask.distributed cluster (2 worker processes, one
thread each): tex.einsum and compiled programs build dask graphs whose chunk tasks are
tex kernels, compiled where they first run. NumPy on the computed results is the oracle."""
import pickle
import subprocess
import sys

import numpy as np
import pytest

import tex

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
cloudpickle = pytest.importorskip("cloudpickle")

M, N, K = tex.sizes("M N K")
i, j, k = tex.indices("i j k")


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    """One LocalCluster for the module: 2 worker processes that start with an empty
    kernel cache, which this process shares for the module (what it compiles, the
    workers load from disk)."""
    cache = tmp_path_factory.mktemp("dask-kernel-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TEX_CACHE_DIR", str(cache))
        cluster = distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
            env={"TEX_CACHE_DIR": str(cache)})
        c = distributed.Client(cluster)
        c.worker_cache = cache
        yield c
        c.close()
        cluster.close()


def row_sum():
    X = tex.tensor("X", (M, N), "int8")
    return tex.compute("S", (i,), tex.sum(X[i, j], over=j, dtype="int32"))


def rng(seed=0):
    return np.random.default_rng(seed)


def floats(shape, seed=0):
    return rng(seed).standard_normal(shape).astype(np.float32)


def test_import_tex_does_not_import_dask():
    code = ("import sys, numpy as np, tex\n"
            "a = np.ones((3, 4), np.float32)\n"
            "tex.einsum('ij,jk->ik', a, a.T)\n"
            "i, j = tex.indices('i j')\n"
            "A = tex.tensor('A', (tex.sizes('N'), 4))\n"
            "tex.compile(tex.compute('R', (i,), tex.max(A[i, j], over=j)))(a)\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')"
            " or m == 'tex.dask']\n"
            "assert not bad, bad\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr


def worker_stats(client, key):
    from tex.backends.llvm import jit
    return sum(s.get(key, 0) for s in client.run(lambda: dict(jit.STATS)).values())


def test_a_worker_with_an_empty_cache_compiles_on_first_use_then_reuses(client):
    assert not any(client.worker_cache.iterdir())
    assert worker_stats(client, "compiled") == 0
    a, b = floats((65, 130)), floats((130, 63), 1)
    x, y = da.from_array(a, chunks=-1), da.from_array(b, chunks=-1)     # one task
    np.testing.assert_allclose(tex.einsum("ik,kj->ij", x, y).compute(), a @ b,
                               rtol=1e-4, atol=1e-4)
    compiled = worker_stats(client, "compiled")
    assert compiled >= 1 and any(client.worker_cache.iterdir())
    tex.einsum("ik,kj->ij", x, y).compute()                 # the workers kept it
    assert worker_stats(client, "compiled") == compiled
    # a function compiled here (a kernel no other test compiles, so that this process
    # does not have it in memory already) goes to the shared disk cache: the workers load it
    X = tex.tensor("X", (M, N), "int8")
    x32 = tex.cast(X[i, j], "int32")
    f = tex.compile(tex.compute("S7919", (i,), tex.sum(x32 * 7919, over=j, dtype="int32")))
    hits = worker_stats(client, "disk_hits")
    i8 = rng().integers(-128, 128, (65, 130), dtype=np.int8)
    np.testing.assert_array_equal(f(da.from_array(i8, chunks=(33, 65))).compute(),
                                  (i8.astype(np.int32) * 7919).sum(1, dtype=np.int32))
    assert worker_stats(client, "compiled") == compiled
    assert worker_stats(client, "disk_hits") > hits


def test_matmul_with_the_contracted_index_split_across_chunks(client):
    a, b = floats((65, 130)), floats((130, 63), 1)
    x = da.from_array(a, chunks=(7, 65))
    y = da.from_array(b, chunks=(65, 7))
    r = tex.einsum("ik,kj->ij", x, y)
    assert isinstance(r, da.Array) and r.dtype == np.float32
    assert len(x.chunks[1]) > 1
    np.testing.assert_allclose(r.compute(), a @ b, rtol=1e-4, atol=1e-4)


def test_batched_contraction_three_operands_and_numpy_operands(client):
    a, b = floats((3, 7, 65)), floats((3, 65, 63), 1)
    x, y = da.from_array(a, chunks=(2, 7, 7)), da.from_array(b, chunks=(3, 7, 65))
    np.testing.assert_allclose(tex.einsum("bij,bjk->bik", x, y).compute(),
                               np.einsum("bij,bjk->bik", a, b), rtol=1e-4, atol=1e-4)
    # three operands, j split across chunks, a numpy operand joining in
    v, w = floats((65,), 2), floats((7,), 3)
    r = tex.einsum("ij,j,i->i", x[0], da.from_array(v, chunks=7), w)
    np.testing.assert_allclose(r.compute(), np.einsum("ij,j,i->i", a[0], v, w), rtol=1e-4,
                               atol=1e-5)


def test_einsum_dtype_and_integer_semantics(client):
    a = rng().integers(-128, 128, (65, 1000), dtype=np.int8)
    x = da.from_array(a, chunks=(7, 65))
    r = tex.einsum("ij->i", x, dtype=np.int32)
    assert r.dtype == np.int32
    np.testing.assert_array_equal(r.compute(), np.einsum("ij->i", a, dtype=np.int32))
    b = rng(1).integers(0, 2, (7, 65)).astype(bool)
    got = tex.einsum("ij,ij->i", da.from_array(b, chunks=(7, 7)), b).compute()
    np.testing.assert_array_equal(got, np.einsum("ij,ij->i", b, b))
    # contracted labels in one chunk: one task per output block, no tree sum
    for chunks in ((7, 1000), (65, 1000)):
        r = tex.einsum("ij->i", da.from_array(a, chunks=chunks), dtype=np.int32)
        assert len(r.__dask_graph__()) <= 2 * len(r.chunks[0]) + 1, dict(r.__dask_graph__())
        np.testing.assert_array_equal(r.compute(), np.einsum("ij->i", a, dtype=np.int32))
    one = da.from_array(b, chunks=(3, 65))
    np.testing.assert_array_equal(tex.einsum("ij,ij->i", one, one).compute(),
                                  np.einsum("ij,ij->i", b, b))
    with pytest.raises(TypeError, match="cast"):
        tex.einsum("ij->i", x.astype(np.int32), dtype=np.int8)


def test_int8_row_sum_to_int32_over_chunked_rows_and_columns(client):
    a = rng().integers(-128, 128, (65, 1000), dtype=np.int8)
    f = tex.compile(row_sum())
    for b, chunks in [(a, (7, 65)), (a, (65, 1000)), (a[:7, :63], (1, 7))]:
        r = f(da.from_array(b, chunks=chunks))
        assert r.dtype == np.int32 and r.chunks[0] == da.from_array(b, chunks=chunks).chunks[0]
        np.testing.assert_array_equal(r.compute(), b.sum(axis=1, dtype=np.int32))


def test_max_and_argmax_over_chunked_axes_ties_nan_and_empty_chunks(client):
    a = rng(3).integers(-3, 4, (7, 130)).astype(np.float32)      # many ties
    a[2, 70], a[2, 100], a[4, :] = np.nan, np.nan, -np.inf
    X = tex.tensor("Xf", (M, N), "float32")
    fmax = tex.compile(tex.compute("Rmax", (i,), tex.max(X[i, j], over=j)))
    farg = tex.compile(tex.compute("Rarg", (i,), tex.argmax(X[i, j], over=j)))
    fmin = tex.compile(tex.compute("Rmin", (i,), tex.argmin(X[i, j] * 2, over=j)))
    x = da.from_array(a, chunks=(7, 65))
    # an empty chunk in the middle of the reduced axis: the combiner's identity there
    x0 = da.from_array(a, chunks=(7, (65, 0, 65)))
    assert 0 in x0.chunks[1]
    for arr in (x, x0, x.rechunk((3, 7))):
        np.testing.assert_array_equal(fmax(arr).compute(), a.max(axis=1))
        np.testing.assert_array_equal(farg(arr).compute(), a.argmax(axis=1))
        np.testing.assert_array_equal(fmin(arr).compute(), (a * 2).argmin(axis=1))
    with pytest.raises(ValueError, match="empty"):
        fmax(x[:, :0]).compute()
    v = tex.tensor("v", (N,), "float32")                    # a 0-d result: all of a vector
    fvec = tex.compile(tex.compute("Rvec", (), tex.argmax(v[j], over=j)))
    for row in (a[2], a[3]):
        assert fvec(da.from_array(row, chunks=7)).compute() == row.argmax()


def test_argmax_over_several_chunked_indices_gives_numpy_flat_positions(client):
    """argmax/argmin over (j, k), both chunked: each part's flat position over its block
    becomes the flat position over the whole (J, K), ties to the first as numpy's."""
    J, K = tex.sizes("J K")
    k = tex.indices("k")
    k = k[0] if isinstance(k, (tuple, list)) else k
    X3 = tex.tensor("X3", (M, J, K), "float32")
    farg = tex.compile(tex.compute("A2", (i,), tex.argmax(X3[i, j, k], over=(j, k))))
    fmin = tex.compile(tex.compute("B2", (i,), tex.argmin(X3[i, j, k], over=(j, k))))
    a = rng(5).integers(-3, 4, (5, 13, 70)).astype(np.float32)      # many ties
    a[1, 9, 3], a[1, 2, 60] = np.nan, np.nan                        # the first NaN wins
    a[3] = 1.0                                                       # all equal: 0
    flat = a.reshape(5, -1)
    # (chunks of one row and of one j, and k in ten parts: 100 blocks; (1, 1, 7)'s 650
    # blocks took dask ~8 s of scheduling for the same boundaries' arithmetic)
    for chunks in ((5, 13, 70), (2, 7, 65), (5, (6, 0, 7), (1, 69)), (1, (1, 12), 7)):
        x = da.from_array(a, chunks=chunks)
        np.testing.assert_array_equal(farg(x).compute(), flat.argmax(axis=1))
        np.testing.assert_array_equal(fmin(x).compute(), flat.argmin(axis=1))


def test_elementwise_and_broadcast_programs_follow_the_chunks(client):
    A = tex.tensor("A", (M, N), "float32")
    b_ = tex.tensor("b", (N,), "float32")
    E = tex.compute("E", (i, j), tex.exp(A[i, j]) * b_[j] + 1)
    a, b = floats((65, 63)), floats((63,), 1)
    r = tex.compile(E)(da.from_array(a, chunks=(7, 65)), da.from_array(b, chunks=7))
    assert r.chunks == ((7,) * 9 + (2,), (7,) * 9)
    np.testing.assert_allclose(r.compute(), np.exp(a) * b + 1, rtol=1e-5, atol=1e-5)


def test_a_reduction_feeding_another_definition_runs_in_one_chunk_or_is_refused(client):
    A = tex.tensor("A", (M, K), "float32")
    B = tex.tensor("B", (K, N), "float32")
    C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))
    R = tex.compute("R", (i,), tex.max(C[i, j], over=j) + tex.mean(C[i, j], over=j))
    f = tex.compile(R)
    a, b = floats((65, 130)), floats((130, 63), 1)
    c = a @ b
    want = c.max(axis=1) + c.mean(axis=1)
    x = da.from_array(a, chunks=(7, 130))
    got = f(x, da.from_array(b, chunks=(130, 63))).compute()     # k and j whole
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match=r"C reduces over k .*input A's axis 1.*rechunk"):
        f(da.from_array(a, chunks=(7, 65)), b)
    with pytest.raises(ValueError, match=r"N as a value.*into one \(B.rechunk\(\{1: -1\}\)\)"):
        f(x, da.from_array(b, chunks=(130, 7)))


def test_call_time_parameters_travel_with_the_task(client):
    A = tex.tensor("A", (M, K), "float32")
    B = tex.tensor("B", (K, N), "float32")
    C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))
    s = tex.schedule(C)
    s[C].split_k(k, parts=tex.param("P"))
    f = tex.compile(s)
    a, b = floats((65, 130)), floats((130, 63), 1)
    r = f(da.from_array(a, chunks=(7, 65)), da.from_array(b, chunks=(65, 63)), P=3)
    np.testing.assert_allclose(r.compute(), a @ b, rtol=1e-4, atol=1e-4)


def test_a_kernel_error_on_a_worker_surfaces_as_the_tex_exception(client):
    A = tex.tensor("A8", (8,), "float32")                   # a fixed size
    f = tex.compile(tex.compute("D", (i,), A[i] * 2))
    with pytest.raises(tex.ShapeError, match="A8"):
        f(da.from_array(np.ones(9, np.float32), chunks=9)).compute()
    with pytest.raises(ValueError, match="fixed size 8"):
        f(da.from_array(np.ones(8, np.float32), chunks=4))


def test_task_functions_pickle_small_with_pickle_and_cloudpickle(client):
    a = rng().integers(-128, 128, (65, 100), dtype=np.int8)
    x = da.from_array(a, chunks=(7, 65))
    f = tex.compile(row_sum())
    y = floats((100, 63))
    graphs = [f(x), tex.einsum("ij,jk->ik", x.astype(np.float32), y)]
    for r in graphs:
        tasks = {type(t.func).__name__: t.func for t in r.__dask_graph__().values()
                 if type(getattr(t, "func", None)).__module__ == "tex.dask"}
        assert tasks, "no tex task function in the graph"
        for fn in tasks.values():
            for dumps, loads in ((pickle.dumps, pickle.loads),
                                 (cloudpickle.dumps, cloudpickle.loads)):
                blob = dumps(fn)
                assert len(blob) < 50_000 and b"llvmlite" not in blob
                assert type(loads(blob)) is type(fn)
    # a task function unpickled elsewhere computes the same block
    blob = cloudpickle.dumps(next(t.func for t in graphs[0].__dask_graph__().values()
                                  if type(getattr(t, "func", None)).__name__ == "ProgramChunk"))
    block = client.submit(lambda b, blk: cloudpickle.loads(b)(blk), blob, a[:7, :65]).result()
    np.testing.assert_array_equal(block.ravel(), a[:7, :65].sum(1, dtype=np.int32))


def test_the_dask_einsum_example_runs_on_this_cluster(client):
    """examples/dask_einsum.py on this module's cluster (whose workers hold the kernels)."""
    from pathlib import Path
    example = Path(__file__).resolve().parent.parent / "examples" / "dask_einsum.py"
    run = subprocess.run([sys.executable, str(example), "--rounds", "1", "--scheduler",
                          client.scheduler.address], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert "tex.einsum over dask arrays: dask.array<" in run.stdout
    assert "int8 row sums of 4 MiB: tex " in run.stdout
    assert "dask_einsum: all results match numpy" in run.stdout


def test_chunks_a_graph_cannot_be_built_on_are_refused_by_name():
    x = np.random.default_rng(5).random((20, 20)).astype(np.float32)
    d = da.from_array(x, chunks=(10, 7))
    with pytest.raises(ValueError, match="label i is repeated in operand 0.*rechunk"):
        tex.einsum("ii->i", d)
    np.testing.assert_allclose(tex.einsum("ii->i", d.rechunk(10)).compute(scheduler="sync"),
                               np.diagonal(x))
    masked = d[d[:, 0] > 0.5]                       # boolean indexing: chunks unknown
    with pytest.raises(ValueError, match="operand 0 has chunks of unknown size"):
        tex.einsum("ij->i", masked)
    i, j = tex.indices("i j")
    X = tex.tensor("X", tex.sizes("M N"))
    f = tex.compile(tex.compute("R", (i,), tex.sum(X[i, j], over=j)))
    with pytest.raises(ValueError, match="input X has chunks of unknown size"):
        f(masked)


# ---------------------------------------------------------------- a review's findings
# (the threaded scheduler: the graph, not the cluster, is what they are about)

def test_float16_parts_are_summed_in_float32():
    # each chunk's sum rounded to float16: 1024 + 1024 + 0.5 - 1024 - 1024 + 0.5 in
    # chunks of 3 gave 0, numpy 50
    x = np.tile(np.array([1024, 1024, 0.5, -1024, -1024, 0.5], np.float16), 50)
    got = tex.einsum("i->", da.from_array(x, chunks=3)).compute(scheduler="threads")
    assert got.dtype == np.float16 and got == np.einsum("i->", x) == 50
    h = np.random.default_rng(0).standard_normal((40, 300)).astype(np.float16)
    got = tex.einsum("ik,kj->ij", da.from_array(h, chunks=(40, 7)),
                     da.from_array(h.T.copy(), chunks=(7, 40))).compute(scheduler="threads")
    exact = h.astype(np.float64) @ h.T.astype(np.float64)
    assert got.dtype == np.float16
    assert np.abs(got - exact).max() <= np.abs(np.einsum("ik,kj->ij", h, h.T) - exact).max()


def test_partial_results_merge_without_stacking_over_several_chunked_axes():
    # dask hands the merge nested lists of blocks (two reduced labels, a tree of
    # split_every=2): each merge adds them in order into one new array
    rng = np.random.default_rng(4)
    a = rng.standard_normal((6, 9, 10))
    b = rng.standard_normal((9, 10, 5))
    x, y = da.from_array(a, chunks=(3, 2, 3)), da.from_array(b, chunks=(2, 3, 5))
    from tex.dask import einsum as dask_einsum
    for split_every in (None, 2):
        got = dask_einsum("ikl,klj->ij", (x, y), split_every=split_every)
        np.testing.assert_allclose(got.compute(scheduler="threads"),
                                   np.einsum("ikl,klj->ij", a, b), rtol=1e-12)
    v = rng.standard_normal(1000)
    dot = tex.einsum("i,i->", da.from_array(v, chunks=50), da.from_array(v, chunks=50))
    got = dot.compute(scheduler="threads")      # a numpy scalar, as np.einsum's
    assert type(got) is np.float64 and np.isclose(got, v @ v, rtol=1e-12)
    one = tex.einsum("i,i->", da.from_array(v, chunks=1000), da.from_array(v, chunks=1000))
    assert type(one.compute(scheduler="threads")) is np.float64
    a[2, 5, 7] = np.nan
    x = da.from_array(a, chunks=(3, 2, 3))
    for combiner, ref in (("max", np.max), ("min", np.min), ("prod", np.prod)):
        X = tex.tensor("X", (M, N, tex.sizes("L")), "float64")
        ll = tex.indices("l")
        f = tex.compile(tex.compute("R", (i,), getattr(tex, combiner)(X[i, j, ll], over=(j, ll))))
        np.testing.assert_allclose(f(x).compute(scheduler="threads"), ref(a, axis=(1, 2)),
                                   rtol=1e-12)


def test_argmax_over_blocks_with_empty_rows():
    X = tex.tensor("X", (M, N), "float64")
    f = tex.compile(tex.compute("R", (i,), tex.argmax(X[i, j], over=j)))
    x = da.from_array(np.arange(24.).reshape(6, 4), chunks=2)
    y = x[x[:, 0] < 8].compute_chunk_sizes()            # chunks ((2, 0, 0), (2, 2))
    np.testing.assert_array_equal(f(y).compute(scheduler="threads"),
                                  y.compute().argmax(axis=1))
    z = da.from_array(np.arange(24.).reshape(4, 6), chunks=((2, 2), (3, 3, 0)))
    np.testing.assert_array_equal(f(z).compute(scheduler="threads"),
                                  z.compute().argmax(axis=1))
    # the same call builds the same graph (its keys named after the tasks, not ids)
    assert f(x).name == f(x).name


def test_dask_operands_of_the_wrong_rank_and_bytes_subscripts():
    with pytest.raises(ValueError, match="too many subscripts for operand 0"):
        tex.einsum("ijk->i", da.ones((2, 2), chunks=1))
    X = tex.tensor("X", (M, N), "float32")
    f = tex.compile(tex.compute("S", (i,), tex.sum(X[i, j], over=j)))
    with pytest.raises(tex.ShapeError, match="tensor X has 2 dimensions, the dask array "
                                             "given for it 1"):
        f(da.ones((6,), chunks=2, dtype=np.float32))
    x = da.from_array(np.arange(12.).reshape(3, 4), chunks=2)
    np.testing.assert_allclose(tex.einsum(b"ij,kj->ik", x, x).compute(scheduler="threads"),
                               np.einsum("ij,kj->ik", x.compute(), x.compute()))
