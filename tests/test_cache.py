"""The kernel cache: in memory (a second compile does not compile again) and on disk under
TEX_CACHE_DIR (a new process loads the object; a damaged file is detected and rebuilt;
concurrent writers leave a valid file).

Each test uses its own empty cache folder (tmp_path) and a program no other test compiles
(a constant unique to the test), so that jit._memory cannot answer in its place.
"""
import collections
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import tex
from tex.backends.llvm import jit

ROOT = pathlib.Path(__file__).resolve().parents[1]

# One program builder shared by this process and its children (so the IR is identical).
BUILD = textwrap.dedent("""
    import numpy as np
    import tex

    def build(c):
        N = tex.sizes("N")
        i, j = tex.indices("i j")
        x = tex.tensor("x", (N,), "float64")
        w = tex.tensor("w", (N, N), "float32")
        y = tex.compute("y", (i,), tex.sum(w[i, j] * x[j], over=j) * c + 1)
        return y

    def check(f, c):
        rng = np.random.default_rng(0)
        x, w = rng.standard_normal(9), rng.standard_normal((9, 9)).astype(np.float32)
        want = (w.astype(np.float64) @ x) * c + 1
        return bool(np.allclose(f(x=x, w=w), want, rtol=1e-6, atol=1e-6))
""")
_ns = {}
exec(BUILD, _ns)
build, check = _ns["build"], _ns["check"]

CHILD = BUILD + textwrap.dedent("""
    import json, sys
    from tex.backends.llvm import jit
    c = float(sys.argv[1])
    f = tex.compile(build(c))
    ok = check(f, c)
    print(json.dumps({"stats": dict(jit.STATS), "ok": ok}))
""")


def run_child(cache, c, wait=True):
    env = dict(os.environ, TEX_CACHE_DIR=str(cache))
    proc = subprocess.Popen([sys.executable, "-c", CHILD, repr(c)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return finish_child(proc) if wait else proc


def finish_child(proc):
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, f"child exited {proc.returncode}\n{out}\n{err}"
    result = json.loads(out.strip().splitlines()[-1])
    result["stats"] = {k: result["stats"].get(k, 0)
                       for k in ("compiled", "disk_hits", "memory_hits", "corrupt")}
    return result


def cache_files(cache):
    """The kernel entries (not the folder's key, the thread runtime's object, the
    host's facts, nor the source digests: whether the caller's thread or the warm-up
    thread records the code generator's digest first depends on timing)."""
    return sorted(p for p in pathlib.Path(cache).rglob("*")
                  if p.is_file() and p.parent.name not in ("runtime", "host", "sources")
                  and p.name != ".key")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TEX_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_second_compile_of_an_equal_program_does_not_compile(cache):
    c = 1.25
    f1 = tex.compile(build(c))
    compiled, hits = jit.STATS["compiled"], jit.STATS["memory_hits"]
    f2 = tex.compile(build(c))             # new objects, the same program
    assert jit.STATS["compiled"] == compiled
    assert jit.STATS["memory_hits"] == hits + 1
    assert check(f1, c) and check(f2, c)
    # a different program does compile
    tex.compile(build(c + 1))
    assert jit.STATS["compiled"] == compiled + 1


def test_a_new_process_loads_from_disk(cache):
    c = 2.5
    compiled = jit.STATS["compiled"]
    f = tex.compile(build(c))
    assert jit.STATS["compiled"] == compiled + 1
    assert check(f, c)
    files = cache_files(cache)
    assert len(files) == 1 and files[0].suffix == ".o"
    child = run_child(cache, c)
    assert child["ok"]
    assert child["stats"]["compiled"] == 0, child
    assert child["stats"]["disk_hits"] >= 1, child
    assert cache_files(cache) == files


def _damage(path, how):
    blob = path.read_bytes()
    if how == "flip-payload":
        pos = len(blob) - len(blob) // 3
        blob = blob[:pos] + bytes([blob[pos] ^ 0xFF]) + blob[pos + 1:]
    elif how == "flip-header":
        blob = bytes([blob[0] ^ 0x01]) + blob[1:]
    elif how == "flip-digest":
        pos = len(jit.MAGIC) + 8 + 5
        blob = blob[:pos] + bytes([blob[pos] ^ 0x10]) + blob[pos + 1:]
    elif how == "truncate":
        blob = blob[:len(blob) // 2]
    elif how == "truncate-header":
        blob = blob[:5]
    elif how == "empty":
        blob = b""
    elif how == "garbage":
        blob = os.urandom(len(blob))
    elif how == "append":
        blob = blob + b"\0" * 16
    path.write_bytes(blob)


@pytest.mark.parametrize("how", ["flip-payload", "flip-header", "flip-digest", "truncate",
                                 "truncate-header", "empty", "garbage", "append"])
def test_a_damaged_file_is_detected_and_recompiled(cache, monkeypatch, how):
    c = 3.0 + 0.125 * ["flip-payload", "flip-header", "flip-digest", "truncate",
                       "truncate-header", "empty", "garbage", "append"].index(how)
    f = tex.compile(build(c))
    (path,) = cache_files(cache)
    good = path.read_bytes()
    _damage(path, how)
    monkeypatch.setattr(jit, "_memory", collections.OrderedDict())          # force a disk read
    before = dict(jit.STATS)
    g = tex.compile(build(c))
    assert jit.STATS["corrupt"] == before.get("corrupt", 0) + 1
    assert jit.STATS["compiled"] == before.get("compiled", 0) + 1
    assert jit.STATS["disk_hits"] == before.get("disk_hits", 0)
    assert check(g, c) and check(f, c)
    assert path.read_bytes() == good, "the damaged entry was not rewritten"


def test_a_damaged_file_gives_correct_results_in_a_new_process(cache):
    c = 4.75
    tex.compile(build(c))
    (path,) = cache_files(cache)
    _damage(path, "flip-payload")
    child = run_child(cache, c)                       # detects, recompiles, rewrites
    assert child["ok"]
    assert child["stats"]["corrupt"] == 1 and child["stats"]["compiled"] == 1, child
    _damage(path, "truncate")
    child = run_child(cache, c)
    assert child["ok"] and child["stats"]["corrupt"] == 1, child
    child = run_child(cache, c)                       # and the rewritten file is good
    assert child["ok"], child
    assert child["stats"]["compiled"] == 0 and child["stats"]["disk_hits"] >= 1, child
    assert child["stats"]["corrupt"] == 0, child


def test_two_processes_compiling_into_one_empty_cache(cache, monkeypatch):
    c = 5.5
    procs = [run_child(cache, c, wait=False) for _ in range(2)]
    results = [finish_child(p) for p in procs]
    assert all(r["ok"] for r in results), results
    assert all(r["stats"]["corrupt"] == 0 for r in results), results
    files = cache_files(cache)
    assert len(files) == 1 and files[0].suffix == ".o", files   # no temporary files left
    monkeypatch.setattr(jit, "_memory", collections.OrderedDict())
    before = dict(jit.STATS)
    f = tex.compile(build(c))
    assert jit.STATS["disk_hits"] == before.get("disk_hits", 0) + 1
    assert jit.STATS["corrupt"] == before.get("corrupt", 0)
    assert jit.STATS["compiled"] == before.get("compiled", 0)
    assert check(f, c)


def test_cache_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TEX_CACHE_DIR", str(tmp_path / "a"))
    assert jit.cache_dir() == str(tmp_path / "a")
    monkeypatch.delenv("TEX_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert jit.cache_dir() == str(tmp_path / "xdg" / "tex")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert jit.cache_dir() == str(tmp_path / "home" / ".cache" / "tex")


def test_an_unwritable_cache_only_loses_the_entry(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("TEX_CACHE_DIR", str(blocker))       # a file where the folder should be
    c = 6.25
    f = tex.compile(build(c))
    assert check(f, c)


def test_dropping_kernels_keeps_the_compiler_alive(cache):
    """An MCJIT engine owns (and frees) the target machine it is created with; freeing
    kernels must not free the machine that later compiles use. Run in a child process,
    since the failure is a crash."""
    code = BUILD + textwrap.dedent("""
        import gc
        from tex.backends.llvm import jit
        for n in range(4):
            f = tex.compile(build(8.0 + n))
            assert check(f, 8.0 + n)
            del f
            jit._memory.clear()
            gc.collect()
        f = tex.compile(build(20.0))
        assert check(f, 20.0) and f.asm
        print("ok")
    """)
    env = dict(os.environ, TEX_CACHE_DIR=str(cache))
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_lifted_definitions_are_named_deterministically():
    a, b = build(1.0), build(1.0)
    assert [d.name for d in tex.Program(a).definitions] == \
        [d.name for d in tex.Program(b).definitions]
