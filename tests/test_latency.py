"""Compile latency (issue 13): `import tex` loads no heavy dependency, a warm start runs
an einsum compiled by an earlier process without the DSL, scheduling or IR, and a stale
or tampered record is never used. Every scenario runs in fresh child processes sharing
a private kernel cache; the figures themselves are in tools/latency.py, not here."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

# the child: runs einsums (spec, shapes, view) and checks each against numpy.einsum;
# prints what it loaded and the warm start's counters as JSON
CHILD = r"""
import json, sys
import numpy as np
import tex
heavy_after_import = sorted(m for m in ("sympy", "networkx", "llvmlite", "tex.symbolic")
                            if m in sys.modules)
setup, cases = json.loads(sys.argv[1])
exec(setup)
from tex.backends.llvm import warm
rng = np.random.default_rng(0)
ok = []
for spec, shapes, transpose in cases:
    ops = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    if transpose:                       # a non-contiguous view of the first operand
        ops[0] = np.ascontiguousarray(ops[0].T).T
    got = tex.einsum(spec, *ops)
    want = np.einsum(spec, *ops)
    ok.append(bool(np.allclose(got, want, rtol=1e-4, atol=1e-4)) and got.shape == want.shape)
print(json.dumps({"ok": ok, "heavy_after_import": heavy_after_import,
                  "general": "tex.symbolic" in sys.modules, "sympy": "sympy" in sys.modules,
                  "llvm": "llvmlite.binding" in sys.modules,
                  "warm": dict(warm.STATS)}))
"""

CASES = [("ij,ij->ij", [(7, 63), (7, 63)], False),
         ("ik,kj->ij", [(65, 7), (7, 63)], True),
         ("ij,jk,kl->il", [(7, 5), (5, 9), (9, 4)], False),
         # a column-major A of 75 KiB, read as it is (tex/layout.py's broadcast side)
         ("mk,kn->mn", [(300, 64), (64, 65)], True)]
# the same einsums at other sizes (odd, and 1 where it does not change the pattern of
# size-1 dimensions that a kernel is specialised on)
OTHER_SIZES = [("ij,ij->ij", [(65, 1000), (65, 1000)], True),
               ("ik,kj->ij", [(63, 65), (65, 7)], False),
               ("ij,jk,kl->il", [(2, 63), (63, 7), (7, 65)], True)]


def child(cache, cases, setup="", env=None):
    full_env = dict(os.environ, TEX_CACHE_DIR=str(cache))
    full_env.pop("TEX_CPU", None)
    full_env.pop("TEX_CACHES", None)
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps([setup, cases])],
                          cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_tex_leaves_heavy_dependencies_unloaded(tmp_path):
    code = ("import sys, tex\n"
            "assert not {'sympy', 'networkx', 'llvmlite', 'tex.symbolic'} & set(sys.modules)\n"
            "i, j = tex.indices('i j')\n"          # a DSL name loads the DSL
            "assert 'tex.symbolic' in sys.modules and 'sympy' not in sys.modules\n"
            "import tex.einsum, tex.tensor\n"       # submodules do not hide the functions
            "assert callable(tex.einsum) and callable(tex.tensor)\n"
            "assert tex.einsum.__code__.co_filename.endswith('warm.py')\n"
            "assert tex.einsum.__module__ == 'tex'\n"     # help(tex.einsum): in module tex
            "assert 'einsum_program' in dir(tex)\n"
            "print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, env=dict(os.environ, TEX_CACHE_DIR=str(tmp_path)))
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    """A cache filled by one cold process (which must have compiled and recorded)."""
    cache = tmp_path_factory.mktemp("warm-cache")
    first = child(cache, CASES)
    assert all(first["ok"]) and first["general"] and first["llvm"], first
    assert not first["sympy"], "a cold call imported sympy"
    assert first["warm"].get("recorded", 0) == len(CASES), first
    return cache


def test_warm_start_runs_without_the_dsl_or_llvm(filled):
    """The record, the kernels' objects (tex's own loader maps them) and the host's
    CPU (remembered by the cold process) all come from the disk cache."""
    second = child(filled, CASES)
    assert all(second["ok"]), second
    assert second["heavy_after_import"] == []
    assert not second["general"], "a warm start imported the DSL"
    assert not second["llvm"], "a warm start loaded llvmlite's bindings"
    assert second["warm"].get("loaded", 0) == len(CASES), second


def test_other_sizes_build_what_they_need_once_then_start_warm(filled, tmp_path):
    """The first process built only the specializations its sizes run. Sizes that
    need another (a matmul of 63 x 65 x 7: the narrow tile, or dot products) go to the
    general path, which builds theirs and those of the calls the record was built for,
    and records that: from the next process on, every size seen starts warm."""
    cache = tmp_path / "cache"
    shutil.copytree(filled, cache)
    second = child(cache, CASES + OTHER_SIZES)
    assert all(second["ok"]), second
    assert second["general"] and second["warm"].get("recorded", 0) >= 1, second
    third = child(cache, CASES + OTHER_SIZES)
    assert all(third["ok"]), third
    assert not third["general"] and not third["llvm"], third
    # one more kernel: the transposed view of `ij,ij->ij`'s other size runs the kernel of
    # its own layout, `ji,ij->ij` (tex/layout.py)
    assert third["warm"].get("loaded", 0) == len(CASES) + 1, third


def test_warm_kernel_sends_what_it_cannot_do_to_the_general_path(filled):
    """Mismatched shapes get numpy's error, out= and a dtype that is not the recorded
    one still work: all through tex/einsum.py."""
    setup = (
        "import numpy as np, tex\n"
        "a, b = np.ones((7, 5), np.float32), np.ones((6, 9), np.float32)\n"
        "try:\n"
        "    tex.einsum('ik,kj->ij', a, b)\n"
        "    raise SystemExit('no error')\n"
        "except ValueError as err:\n"
        "    assert 'k' in str(err), err\n"
        "out = np.empty((7, 9), np.float32)\n"
        "tex.einsum('ik,kj->ij', a, np.ones((5, 9), np.float32), out=out)\n"
        "assert (out == 5).all()\n"
        "r = tex.einsum('ij,ij->ij', np.ones((3, 4)), np.ones((3, 4)))\n"
        "assert r.dtype == np.float64 and (r == 1).all()\n")
    res = child(filled, [], setup)
    assert res["general"], "the general path should have run"


def test_stale_records_are_never_used(filled):
    """Another target (TEX_CPU) or another tex source (the source hash) is another key:
    the warm start misses, compiles, and is still correct."""
    other_cpu = child(filled, CASES[:1], env={"TEX_CPU": "haswell"})
    assert all(other_cpu["ok"]) and other_cpu["warm"].get("loaded", 0) == 0, other_cpu
    other_source = child(filled, CASES[:1],
                         "from tex.backends.llvm import warm\n"
                         "warm._SOURCE[:] = [warm.source_hash([])]\n")
    assert all(other_source["ok"]) and other_source["warm"].get("loaded", 0) == 0
    assert other_source["general"]


def test_a_tampered_record_is_rejected(filled, tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(filled, cache)          # the copy keeps the folder's private mode
    records = sorted((cache / "calls").glob("*.o"))
    assert len(records) >= len(CASES)     # (and the stale tests' own records)
    for path in records:
        data = bytearray(path.read_bytes())
        data[-5] ^= 0x01                   # inside the JSON payload, past the HMAC
        path.write_bytes(bytes(data))
    second = child(cache, CASES[:2])
    assert all(second["ok"]) and second["warm"].get("loaded", 0) == 0, second


def test_source_hash_follows_every_file(tmp_path):
    from tex.backends.llvm.warm import source_hash
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "sub" / "b.py").write_text("y = 2\n")
    before = source_hash([tmp_path])
    (tmp_path / "sub" / "b.py").write_text("y = 3\n")
    assert source_hash([tmp_path]) != before
    (tmp_path / "sub" / "b.py").write_text("y = 2\n")
    assert source_hash([tmp_path]) == before


def test_source_digest_is_read_again_only_when_a_file_changes(tmp_path, monkeypatch):
    """The source digests of the cache keys come from the disk cache while the files'
    stat signature holds; a change to a file is seen even at the same size and with its
    old mtime put back (cp -p, tar), by its ctime."""
    from tex.backends.llvm import jit, sources
    monkeypatch.setenv("TEX_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(sources, "RACY_S", 0.0)     # the files below were just written
    (tmp_path / "src").mkdir()
    path = tmp_path / "src" / "a.py"
    path.write_text("x = 1\n")
    files = sources.python_files([tmp_path / "src"])
    reads, content = [], sources.content_digest
    monkeypatch.setattr(sources, "content_digest", lambda fs: reads.append(1) or content(fs))
    first = sources.digest(files, jit.read_cached, jit.write_cached)
    assert first == content(files) and len(reads) == 1
    assert sources.digest(files, jit.read_cached, jit.write_cached) == first and len(reads) == 1
    st = path.stat()
    path.write_text("x = 2\n")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns
    second = sources.digest(files, jit.read_cached, jit.write_cached)
    assert second == content(files) != first and len(reads) == 2


def test_a_digest_of_files_just_written_is_not_stored(tmp_path, monkeypatch):
    from tex.backends.llvm import jit, sources
    monkeypatch.setenv("TEX_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "a.py").write_text("x = 1\n")
    files = sources.python_files([tmp_path])
    assert sources.digest(files, jit.read_cached, jit.write_cached) == sources.content_digest(files)
    assert not (tmp_path / "cache" / "sources").exists()


def test_dag_order_is_networkx_order():
    """tex/dag.py replaced networkx: the same lexicographic topological order (which
    fixes the order of definitions, so the kernels and their cache keys), and cycles
    are found."""
    import random
    from tex import dag
    nx = pytest.importorskip("networkx")
    rng = random.Random(0)
    for _ in range(50):
        n = rng.randint(1, 12)
        edges = [(a, b) for a in range(n) for b in range(a + 1, n) if rng.random() < 0.3]
        names = rng.sample(range(100), n)            # insertion order != node order
        g, h = dag.DiGraph(), nx.DiGraph()
        for k in names[:n]:
            g.add_node(k % n)
            h.add_node(k % n)
        for a, b in edges:
            g.add_edge(a, b)
            h.add_edge(a, b)
        key = {v: rng.randint(0, 3) for v in range(n)}.__getitem__
        assert dag.topological_order(g, key) == list(
            nx.lexicographical_topological_sort(h, key=key))
        assert dag.is_acyclic(g)
        if edges:
            a, b = edges[0]
            g.add_edge(b, a)
            assert not dag.is_acyclic(g)


def test_compiling_holds_off_the_garbage_collector_and_restores_it():
    """A compile runs without automatic cyclic collections (tex/gcpause.py: 72 of them
    were ~55 ms of a first matmul): nested, the thresholds come back when the outermost
    pause ends; the user's gc.enable()/disable() is never touched, even in the middle
    of a pause; a child forked during a pause collects as before."""
    import gc
    import threading

    import numpy as np

    import tex
    from tex.gcpause import paused
    thresholds = gc.get_threshold()
    assert thresholds[0] > 0 and gc.isenabled()
    with paused():
        assert gc.get_threshold()[0] == 0 and gc.isenabled()
        with paused():
            pass
        assert gc.get_threshold()[0] == 0      # the inner block does not end the outer's
        gc.disable()                           # the user's, mid-compile (another thread)
    assert gc.get_threshold() == thresholds
    assert not gc.isenabled()                  # the user's choice stays
    gc.enable()
    read, write = os.pipe()
    with paused():
        pid = os.fork()
        if pid == 0:                           # the child: no compile of its own runs
            os.write(write, str(gc.get_threshold()[0]).encode())
            os._exit(0)
    os.waitpid(pid, 0)
    assert int(os.read(read, 64)) == thresholds[0]
    # a real compile: no collection runs while it compiles, only after
    collections = []

    def count(phase, info):
        if phase == "start" and threading.current_thread() is threading.main_thread():
            collections.append(info["generation"])
    M, N, K = tex.sizes("M N K")
    i, j, k = tex.indices("i j k")
    A, B = tex.tensor("A", (M, K), "float64"), tex.tensor("B", (K, N), "float64")
    gemm3 = tex.compute("GC", (i, j), tex.sum(A[i, k] * B[k, j] * 3.0, over=k))
    compile_ = tex.compile                 # imports the backend's module (not a compile)
    gc.callbacks.append(count)
    try:
        gc.collect()
        collections.clear()
        f = compile_(gemm3)
        during = len(collections)
    finally:
        gc.callbacks.remove(count)
    assert gc.get_threshold() == thresholds
    a = np.arange(12.0).reshape(3, 4)
    np.testing.assert_allclose(f(A=a, B=a.T), a @ a.T * 3.0)
    assert during <= 1       # the one the end of the pause lets run (without it: ~100)


def test_chain_steps_share_one_kernel_built_with_every_steps_nests(tmp_path):
    """`ij,jk,kl->il` on float32 (the first step on operands, the second on an
    intermediate, of other sizes): one compile. With the last operand float64, the first
    step casts both its float32 operands and the second casts none: two kernels. Both
    right. In a child: the kernel caches start empty; TEX_TIERED=0, so that each kernel is
    one compile (quick code first made the count depend on when an upgrade ran)."""
    code = (
        "import json, numpy as np, tex\n"
        "from tex.backends.llvm import jit\n"
        "rng = np.random.default_rng(0)\n"
        "ops = [rng.standard_normal(s).astype(np.float32) for s in [(7, 65), (65, 3), (3, 50)]]\n"
        "same = bool(np.allclose(tex.einsum('ij,jk,kl->il', *ops),\n"
        "                        np.einsum('ij,jk,kl->il', *ops), rtol=1e-4, atol=1e-4))\n"
        "one = jit.STATS['compiled']\n"
        "mixed = [ops[0], ops[1], ops[2].astype(np.float64)]\n"
        "mixed_ok = bool(np.allclose(tex.einsum('ij,jk,kl->il', *mixed),\n"
        "                            np.einsum('ij,jk,kl->il', *mixed)))\n"
        "print(json.dumps([same, one, mixed_ok, jit.STATS['compiled'] - one]))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, env=dict(os.environ, TEX_CACHE_DIR=str(tmp_path),
                                              TEX_TIERED="0"), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    same, one, mixed_ok, more = json.loads(proc.stdout.strip().splitlines()[-1])
    assert same and mixed_ok
    assert one == 1
    assert more == 2


def test_a_chain_sharing_an_earlier_chains_kernel_starts_warm_next_time(tmp_path):
    """A chain whose step kernel an earlier chain built (for its own sizes) builds this
    call's nests at the call; its record, written after that call, names that build, so
    the next process runs it warm: no fall back to the general path, nothing compiled."""
    code = (
        "import json, sys, numpy as np, tex\n"
        "from tex.backends.llvm import jit, warm\n"
        "rng = np.random.default_rng(0)\n"
        "f32 = lambda *s: rng.standard_normal(s).astype(np.float32)\n"
        "if sys.argv[1] == 'first':\n"
        "    a = [f32(7, 65), f32(65, 3), f32(3, 50)]\n"
        "    tex.einsum('ij,jk,kl->il', *a)\n"
        "b = [f32(16, 16) for _ in range(4)]\n"
        "ok = bool(np.allclose(tex.einsum('ab,bc,cd,de->ae', *b),\n"
        "                      np.einsum('ab,bc,cd,de->ae', *b), rtol=1e-3, atol=1e-3))\n"
        "print(json.dumps([ok, bool(warm._full), jit.STATS['compiled']]))\n")
    env = dict(os.environ, TEX_CACHE_DIR=str(tmp_path))
    out = []
    for phase in ("first", "next"):
        proc = subprocess.run([sys.executable, "-c", code, phase], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert out[0][0] and out[1][0]
    assert out[1][1:] == [False, 0], out          # warm, nothing compiled
