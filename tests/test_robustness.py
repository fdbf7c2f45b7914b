"""The robustness catalogue: bad input, hostile environments and resource limits, each
case run in a child process, so that a crash or a hang fails its test instead of the
test runner.

A case is (name, code, expected, words): the code runs after a prelude that imports
tex and numpy and defines sizes M, N, K, L and indices i, j, k; `expected` is "ok"
(the code finishes, its asserts hold) or the name of the exception the code must let
escape; `words` must all appear in the child's last line of output (the exception's
message, or what the code printed last). The children share one kernel cache.
"""
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

PRELUDE = """
import json, os, sys, time
import numpy as np
import tex
M, N, K, L = tex.sizes("M N K L")
i, j, k = tex.indices("i j k")

def matmul(dtype="float32"):
    A = tex.tensor("A", (M, K), dtype); B = tex.tensor("B", (K, N), dtype)
    return tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))

def rss_mb():
    with open("/proc/self/status") as f:
        return int(next(l for l in f if l.startswith("VmRSS")).split()[1]) / 1024
"""

RUNNER = """
import traceback
try:
    exec(compile(CODE, "<case>", "exec"), globals())
except BaseException as err:
    print(json.dumps({"raised": type(err).__name__, "message": str(err)}))
    sys.exit(3)
print(json.dumps({"raised": None}))
"""

CASES = [
    # ------------------------------------------------------------ threads and fork
    ("fork after a parallel call", """
        a = np.ones((512, 512), np.float32)
        assert np.allclose(tex.einsum("ik,kj->ij", a, a), a @ a)
        pid = os.fork()
        if pid == 0:
            ok = np.allclose(tex.einsum("ik,kj->ij", a, a), a @ a)
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert status == 0, status
        """, "ok", []),
    ("fork-method pool after a parallel call", """
        import multiprocessing as mp
        a = np.ones((512, 512), np.float32)
        tex.einsum("ik,kj->ij", a, a)
        with mp.get_context("fork").Pool(2) as pool:
            got = pool.starmap(tex.einsum, [("ik,kj->ij", a[:n], a[:, :n]) for n in (64, 300)])
        assert [r.shape for r in got] == [(64, 64), (300, 300)]
        assert all(np.allclose(r, 512.0) for r in got)
        """, "ok", []),
    ("a thread count far beyond the machine", """
        a = np.ones((512, 512), np.float32)
        assert tex.get_num_threads() <= 256
        assert np.allclose(tex.einsum("ik,kj->ij", a, a), a @ a)
        print("threads", tex.get_num_threads())
        """, "ok", ["threads"], {"TEX_NUM_THREADS": "99999"}),
    ("workers of a larger thread count stay parked through smaller teams' regions", """
        from tex.backends.llvm import threads
        x = np.ones((2048, 512), np.float32)
        tex.set_num_threads(16)
        tex.einsum("ij->i", x)                          # makes 15 workers
        tex.set_num_threads(2)
        rt = threads.runtime()
        tex.einsum("ij->i", x); time.sleep(0.05)
        skips, teams = rt.skips.value, rt.teams.value
        for _ in range(20):
            tex.einsum("ij->i", x)
        assert rt.teams.value > teams, "no parallel region"
        # the 14 workers beyond the team of 2 stay parked: no region wakes them
        assert rt.skips.value == skips, (rt.skips.value - skips, rt.teams.value - teams)
        tex.set_num_threads(16)                         # a larger team calls them again
        assert np.allclose(tex.einsum("ij->i", x), 512)
        """, "ok", []),
    ("TEX_NUM_THREADS that is not a number", """
        print("threads", tex.get_num_threads())
        """, "ok", ["threads", "TEX_NUM_THREADS='abc'"], {"TEX_NUM_THREADS": "abc"}),
    ("set_num_threads out of range", """
        for n in (0, 40000, 2**31, 2**32 + 1):
            try:
                tex.set_num_threads(n)
            except ValueError as err:
                assert "1 to 256" in str(err), err
            else:
                raise AssertionError(f"set_num_threads({n}) accepted")
        tex.set_num_threads(2.5)
        """, "TypeError", ["thread count", "integer"]),
    ("no libgomp: tex's own thread pool", """
        a = np.ones((1024, 1024), np.float32)
        tex.set_num_threads(2)
        f = tex.compile(matmul())
        assert np.allclose(f(a, a), a @ a)
        assert "GOMP" not in f.llvm_ir and "omp_" not in f.llvm_ir
        with open("/proc/self/maps") as maps:
            assert "libgomp" not in maps.read()
        """, "ok", []),
    # ------------------------------------------------------------ sizes that overflow
    ("split_k parts that overflow the partial buffer", """
        C = matmul(); s = tex.schedule(C); s[C].split_k(k, parts=tex.param("P"))
        f = tex.compile(s)
        a = np.ones((4, 8), np.float32); b = np.ones((8, 4), np.float32)
        assert np.allclose(f(a, b, P=2**20), a @ b)
        f(a, b, P=2**61)
        """, "MemoryError", ["C_part", "P", "2305843009213693952"]),
    ("a parameter beyond 64 bits", """
        C = matmul(); s = tex.schedule(C); s[C].split_k(k, parts=tex.param("P"))
        tex.compile(s)(np.ones((4, 8), np.float32), np.ones((8, 4), np.float32), P=2**63)
        """, "ValueError", ["parameter P", "2**62"]),
    ("a float parameter", """
        C = matmul(); s = tex.schedule(C); s[C].split_k(k, parts=tex.param("P"))
        tex.compile(s)(np.ones((4, 8), np.float32), np.ones((8, 4), np.float32), P=2.5)
        """, "TypeError", ["parameter P", "integer", "2.5"]),
    ("a missing parameter", """
        C = matmul(); s = tex.schedule(C); s[C].split_k(k, parts=tex.param("P"))
        tex.compile(s)(np.ones((4, 8), np.float32), np.ones((8, 4), np.float32))
        """, "TypeError", ["parameter P"]),
    # (unfused: fused into R's sum, T is never stored and the kernel would add 2**62 terms)
    ("an intermediate of 2**62 elements from broadcast views, unfused", """
        from numpy.lib.stride_tricks import as_strided
        A = tex.tensor("A", (M,), "float64"); B = tex.tensor("B", (N,), "float64")
        T = tex.compute("T", (i, j), A[i] * B[j])
        R = tex.compute("R", (), tex.sum(T[i, j], over=(i, j)))
        v = as_strided(np.ones(1), (2**31,), (0,))
        tex.compile(R, fuse=False)(v, v)
        """, "MemoryError", ["buffer T", "2147483648"]),
    # ------------------------------------------------------------ the disk cache
    ("a forged cache entry is never executed", """
        import glob, hashlib, struct
        from tex.backends.llvm import jit
        X = tex.tensor("X", (M,), "float32")
        Y = tex.compute("Y", (i,), X[i] * 3.25 + 1.0)
        x = np.arange(5, dtype=np.float32)
        assert np.allclose(tex.compile(Y)(x), x * 3.25 + 1)
        (path,) = [p for p in glob.glob(os.path.join(jit.cache_dir(), "??", "*.o"))]
        bogus = b"\\x7fELF\\x02\\x01" + os.urandom(4000)       # an object with garbage code
        with open(path, "wb") as f:                      # the old format: a plain SHA-256
            f.write(jit.MAGIC + struct.pack("<Q", len(bogus)) + hashlib.sha256(bogus).digest()
                    + bogus)
        jit._memory.clear()
        before = dict(jit.STATS)
        assert np.allclose(tex.compile(Y)(x), x * 3.25 + 1)
        assert jit.STATS["corrupt"] == before.get("corrupt", 0) + 1
        print("recompiled", jit.STATS["compiled"] - before.get("compiled", 0))
        """, "ok", ["recompiled 1"], {"TEX_CACHE_DIR": "{tmp}/forged", "TEX_TIERED": "0"}),
    ("a cache folder others may write is not used", """
        import warnings
        from tex.backends.llvm import jit
        os.makedirs(jit.cache_dir(), exist_ok=True); os.chmod(jit.cache_dir(), 0o777)
        X = tex.tensor("X", (M,), "float32")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            y = tex.compile(tex.compute("Y", (i,), X[i] + 2.5))(np.ones(3, np.float32))
        assert np.allclose(y, 3.5)
        assert os.listdir(jit.cache_dir()) == [], os.listdir(jit.cache_dir())
        print(str(caught[0].message))
        """, "ok", ["not using the kernel cache", "writable by others"],
     {"TEX_CACHE_DIR": "{tmp}/shared"}),
    ("the cache folder is created private", """
        import stat
        from tex.backends.llvm import jit
        X = tex.tensor("X", (M,), "float32")
        tex.compile(tex.compute("Y", (i,), X[i] + 4.5))(np.ones(3, np.float32))
        mode = stat.S_IMODE(os.stat(jit.cache_dir()).st_mode)
        key = stat.S_IMODE(os.stat(os.path.join(jit.cache_dir(), ".key")).st_mode)
        assert mode == 0o700 and key == 0o600, (oct(mode), oct(key))
        """, "ok", [], {"TEX_CACHE_DIR": "{tmp}/fresh/tex"}),
    ("the compiler process reports a bad module", """
        from tex.backends.llvm import jit
        jit.IN_PROCESS_COMPILES = 0
        jit.compile_object("define i32 @f() { ret i64 0 }")
        """, "CompileError", ["ret"]),
    # ------------------------------------------------------------ silent wrong answers
    ("max over an empty axis", """
        X = tex.tensor("X", (M, N), "float32")
        f = tex.compile(tex.compute("R", (i,), tex.max(X[i, j], over=j)))
        assert f(np.ones((0, 5), np.float32)).shape == (0,)     # no rows, rows not empty
        f(np.ones((0, 0), np.float32))          # numpy refuses also into an empty result
        """, "ValueError", ["zero-size array", "maximum", "no identity", "R", "j"]),
    ("argmin over an empty axis", """
        X = tex.tensor("X", (M, N), "float32")
        tex.compile(tex.compute("R", (i,), tex.argmin(X[i, j], over=j)))(np.ones((2, 0), np.float32))
        """, "ValueError", ["zero-size array", "argmin"]),
    ("prod over an empty axis is 1", """
        X = tex.tensor("X", (M, N), "float32")
        r = tex.compile(tex.compute("R", (i,), tex.prod(X[i, j], over=j)))(np.ones((2, 0), np.float32))
        assert (r == 1).all() and (np.ones((2, 0), np.float32).prod(axis=1) == 1).all()
        """, "ok", []),
    ("one array for two outputs", """
        X = tex.tensor("X", (M,), "float32")
        P = tex.compute("P", (i,), X[i] + 1.0); Q = tex.compute("Q", (i,), X[i] * 2.0)
        f = tex.compile((P, Q)); x = np.arange(4, dtype=np.float32); o = np.empty(4, np.float32)
        f(x, out=(o, o))
        """, "ValueError", ["out=", "P", "Q", "overlap"]),
    ("float to int casts saturate (tex's documented choice)", """
        X = tex.tensor("X", (M,), "float32")
        f = tex.compile(tex.compute("Y", (i,), tex.cast(X[i], "int32")))
        x = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 2.7, -2.7], np.float32)
        assert f(x).tolist() == [0, 2**31 - 1, -2**31, 2**31 - 1, -2**31, 2, -2], f(x)
        g = tex.compile(tex.compute("U", (i,), tex.cast(X[i], "uint8")))
        assert g(np.array([-5, 300, np.nan, 7.9], np.float32)).tolist() == [0, 255, 0, 7]
        """, "ok", []),
    # ------------------------------------------------------------ resources
    ("the kernel cache is bounded", """
        X = tex.tensor("X", (M,), "float32"); x = np.ones(16, np.float32); marks = {}
        for n in range(400):
            tex.compile(tex.compute("Y", (i,), X[i] * float(n) + 1.0))(x)
            if n in (150, 399):
                marks[n] = rss_mb()
        print(f"rss growth {marks[399] - marks[150]:.1f} MB over 250 kernels")
        assert marks[399] - marks[150] <= 15, marks
        """, "ok", ["rss growth"], {"TEX_KERNEL_CACHE_SIZE": "50"}),
    ("100,000 calls leak nothing", """
        X = tex.tensor("X", (M,), "float32"); x = np.ones(8, np.float32)
        f = tex.compile(tex.compute("Y", (i,), X[i] * 2.0)); o = np.empty(8, np.float32)
        for _ in range(20000):
            f(x); f(x, out=o)
        before = rss_mb()
        for _ in range(50000):
            f(x); f(x, out=o)
        print(f"rss growth {rss_mb() - before:.2f} MB")
        assert rss_mb() - before < 1.0
        """, "ok", ["rss growth"]),
    ("Ctrl-C stops a long kernel within a second", """
        import signal, threading
        # a parent that ignores SIGINT passes SIG_IGN on to this child, and Python then
        # keeps Ctrl-C ignored (so does tex: it chains only to a handler): Python's own
        # handler, as in any interactive session
        inherited = signal.getsignal(signal.SIGINT)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        a = np.ones((4096, 4096), np.float32); out = np.zeros((4096, 4096), np.float32)
        f = tex.compile(matmul()); f(a[:64, :64], a[:64, :64])
        sent = {}
        def fire():
            sent["at"] = time.perf_counter(); os.kill(os.getpid(), signal.SIGINT)
        threading.Timer(0.3, fire).start()
        try:
            f(a, a, out=out)
        except KeyboardInterrupt:
            late = time.perf_counter() - sent["at"]
            assert late <= 1.0, late
            assert np.allclose(f(a[:64, :64], a[:64, :64]), 64.0)   # still usable
            print(f"interrupted {late:.3f} s after the signal")
        else:
            raise AssertionError(f"the kernel finished: no KeyboardInterrupt (SIGINT was {inherited})")
        """, "ok", ["interrupted"]),
    ("a SIGINT handler that does not raise lets the kernel finish right", """
        import signal, threading
        calls = []
        signal.signal(signal.SIGINT, lambda *args: calls.append(1))   # handles, no raise
        a = np.ones((2048, 2048), np.float32); out = np.zeros((2048, 2048), np.float32)
        f = tex.compile(matmul()); f(a, a, out=out); tex.einsum("ik,kj->ij", a, a)
        done = []
        def on_a_thread():                         # calls Python would never interrupt
            done.extend(np.array_equal(tex.einsum("ik,kj->ij", a, a), out)
                        for _ in range(6))
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
        for _ in range(6):                         # the kernels run most of the time
            out[:] = 0
            f(a, a, out=out)
            assert (out == 2048).all(), out[0, :4]
        assert calls, "no SIGINT arrived"
        t = threading.Thread(target=on_a_thread); t.start()
        time.sleep(0.2); os.kill(os.getpid(), signal.SIGINT); t.join()
        assert done == [True] * 6 and len(calls) == 2, (done, calls)
        print("finished")
        """, "ok", ["finished"]),
    ("a 26-operand einsum chain compiles in seconds", """
        import string
        letters = string.ascii_letters[:27]
        subs = ",".join(letters[n] + letters[n + 1] for n in range(26)) + "->" + letters[0] + letters[26]
        ms = [np.eye(2) * 1.01 + 0.01 * n for n in range(26)]
        t = time.perf_counter(); r = tex.einsum(subs, *ms); took = time.perf_counter() - t
        assert np.allclose(r, np.linalg.multi_dot(ms))
        print(f"compiled and ran in {took:.1f} s"); assert took <= 20, took
        """, "ok", ["compiled and ran"]),
    # ------------------------------------------------------------ messages
    ("an index both output and reduced", """
        X = tex.tensor("X", (M,), "float32")
        tex.compute("Y", (i,), tex.sum(X[i], over=i))
        """, "ValueError", ["compute Y", "index i", "output index", "reduced"]),
    ("an access past its dimension names the sizes and their values", """
        X = tex.tensor("X", (M,), "float32"); Z = tex.tensor("Z", (M,), "float32")
        W = tex.tensor("W", (L,), "float32")
        f = tex.compile(tex.compute("Y", (i,), tex.sum(Z[i] * X[i + j] * W[j], over=j)))
        f(np.ones(6, np.float32), np.ones(6, np.float32), np.ones(3, np.float32))
        """, "ShapeError", ["compute Y: tensor X, dimension 0: index i + j reaches",
                           "L + M - 2 = 7", "past the end (M = 6 elements)"]),
    ("an unknown stage", """
        s = tex.schedule(matmul()); s["Q"]
        """, "ScheduleError", ["'Q'", "definitions: C"]),
    ("an unknown keyword names the kernel", """
        tex.compile(matmul())(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32), Z=1)
        """, "TypeError", ["tex_C", "'Z'"]),
    ("bounds_check catches a broken loop nest", """
        from tex.backends.llvm import runtime
        from tex.scheduler.ir import Loop, map_nest
        C = matmul(); s = tex.schedule(C); s[C].split(k, 8)
        def widen(n):     # one iteration too many in the inner loop over k
            return n.replace(extent=n.extent + 1) if isinstance(n, Loop) and n.var.name == "ki" else n
        f = runtime.compile_kernel(s.program, map_nest(s.kernel(), widen), bounds_check=True)
        f(np.ones((3, 65), np.float32), np.ones((65, 5), np.float32))
        """, "IndexError", ["tensor A", "dimension 1", "ki + 8*ko = 65", "ko=8", "ki=1"]),
    ("forks while a thread compiles give children that compile", """
        import threading
        stop = threading.Event()
        def compiling():
            n = 0
            while not stop.is_set():
                n += 1
                labels = "".join(chr(97 + (n + q) % 20) for q in range(3))
                tex.einsum(f"{labels},{labels}->{labels[::-1]}", np.ones((2, 3, 4)),
                           np.ones((2, 3, 4)))
        # (imports first: a fork while another thread imports a module leaves the child
        # that module's import lock held, CPython's hazard, not tex's)
        tex.einsum("abc,abc->cba", np.ones((2, 3, 4)), np.ones((2, 3, 4)))
        t = threading.Thread(target=compiling); t.start()
        for rep in range(5):
            time.sleep(0.1)
            pid = os.fork()
            if pid == 0:
                r = tex.einsum("ij->j", np.ones((3, 5 + rep)))   # a kernel not made yet
                os._exit(0 if (r == 3).all() else 1)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0, (rep, status)
        stop.set(); t.join()
        """, "ok", []),
    ("a FIFO where the key file belongs is refused, not waited on", """
        import warnings
        folder = os.environ["TEX_CACHE_DIR"]
        os.makedirs(folder, mode=0o700)
        os.mkfifo(os.path.join(folder, ".key"), 0o600)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            assert (tex.einsum("i,i->i", np.ones(3), np.ones(3)) == 1).all()
        assert any("key file is not a file" in str(w.message) for w in seen), seen
        """, "ok", [], {"TEX_CACHE_DIR": "{tmp}/fifo"}),
    ("Ctrl-C while the compiler process works leaves no reply for the next compile", """
        from tex.backends.llvm import compile_worker, jit
        jit.IN_PROCESS_COMPILES = 0                     # every module to the process
        read = compile_worker.read_frame
        def interrupted(stream):
            compile_worker.read_frame = read
            raise KeyboardInterrupt
        compile_worker.read_frame = interrupted
        a, b = np.ones((3, 4), np.float32), np.full((3, 4), 2, np.float32)
        try:
            tex.einsum("ij,ij->ij", a, b)
            raise AssertionError("no interrupt")
        except KeyboardInterrupt:
            pass
        assert (tex.einsum("ij,ij->ji", a, b) == (a * b).T * 1).all()   # its own kernel
        assert (tex.einsum("ij,ij->ij", a, b) == a * b).all()
        print("ok")
        """, "ok", ["ok"], {"TEX_CACHE_DIR": "{tmp}/interrupted", "TEX_TIERED": "0"}),
    ("a cache folder where no key file can be made compiles in memory", """
        import warnings
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            assert (tex.einsum("i,i->i", np.ones(3), np.ones(3)) == 1).all()
        assert any("key file cannot be made" in str(w.message) for w in seen), seen
        """, "ok", [], {"TEX_CACHE_DIR": "/proc/self"}),     # (private, but not writable)
    ("a damaged key file is replaced", """
        folder = os.environ["TEX_CACHE_DIR"]
        os.makedirs(folder, mode=0o700)
        with open(os.path.join(folder, ".key"), "wb") as f:
            os.fchmod(f.fileno(), 0o600)
        from tex.backends.llvm import jit
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert (tex.einsum("i,i->i", np.ones(3), np.ones(3)) == 1).all()
        assert os.path.getsize(os.path.join(folder, ".key")) == 32
        """, "ok", [], {"TEX_CACHE_DIR": "{tmp}/damaged"}),
    ("TEX_BOUNDS_CHECK=1 checks and stays quiet on correct kernels", """
        a = np.random.default_rng(0).standard_normal((67, 65)).astype(np.float32)
        b = np.random.default_rng(1).standard_normal((65, 63)).astype(np.float32)
        assert np.allclose(tex.einsum("ik,kj->ij", a, b), a @ b, rtol=1e-4, atol=1e-4)
        R = tex.compute("R", (i,), tex.argmax(matmul()[i, j], over=j))
        f = tex.compile(R)
        assert (f(a, b) == (a @ b).argmax(axis=1)).all()
        # (the code its calls built: f.llvm_ir would generate every nest, 5 MB, 3 s)
        assert f._sig.builds and all("bounds" in b.make_ir() for b in f._sig.builds)
        """, "ok", [], {"TEX_BOUNDS_CHECK": "1"}),
]


def run_case(code, env_extra, tmp_path, timeout=240):
    env = dict(os.environ)
    env.update({k: v.replace("{tmp}", str(tmp_path)) for k, v in env_extra.items()})
    script = PRELUDE + f"CODE = {textwrap.dedent(code)!r}\n" + RUNNER
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    lines = proc.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        result = None
    return proc, result, lines


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_catalogue(case, tmp_path):
    name, code, expected, words, *env = case
    proc, result, lines = run_case(code, env[0] if env else {}, tmp_path)
    assert result is not None, (f"{name}: the child died (exit {proc.returncode}):\n"
                                f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    if expected == "ok":
        assert result["raised"] is None, f"{name}: raised {result}\n{proc.stderr[-3000:]}"
        text = " ".join(lines[:-1][-1:]) + " " + proc.stderr
    else:
        assert result["raised"] == expected, f"{name}: {result}\n{proc.stderr[-3000:]}"
        text = result["message"]
    for word in words:
        assert word in text, f"{name}: {word!r} not in {text!r}"


# ---------------------------------------------------------------- bounds-checked fuzzing

from hypothesis import HealthCheck, given, settings  # noqa: E402

import numpy as np  # noqa: E402

import tex  # noqa: E402
from isolate import in_child  # noqa: E402
from test_einsum import assert_close, einsum_cases, view  # noqa: E402


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(einsum_cases())
@in_child
def test_generated_einsums_never_trip_the_bounds_check(case):
    """A share of the einsum fuzzer's cases compiled with every access checked: the
    schedules tex makes never read or write outside a buffer (the schedule fuzzer in
    test_schedule.py checks one case in 16 the same way). In a child process."""
    subscripts, shapes, dtypes, layouts, seed = case
    rng = np.random.default_rng(seed)
    operands = [view(rng, s, d, lay) for s, d, lay in zip(shapes, dtypes, layouts)]
    # (a complex operand's kernels are real einsums of its parts: strided views of it)
    operands = [op.real if np.iscomplexobj(op) else op for op in operands]
    try:
        expected = np.einsum(subscripts, *operands)
    except ValueError:
        return
    program = tex.einsum_program(subscripts, *operands)
    position = {program.tensor(f"op{k}"): k for k in range(len(operands))}
    inputs = [operands[position[t]] for t in program.inputs]
    got = tex.compile(program, bounds_check=True)(*inputs)
    assert_close(got[()] if got.ndim == 0 else got, expected, subscripts, operands)


@in_child
def test_a_size_condition_dividing_by_a_size_of_zero_does_not_stop_the_process():
    """A specialization on `Eq(Mod(N, K), 0)` called with K = 0: the kernel's test of
    the condition divided by zero natively (SIGFPE ended the interpreter); it now
    divides by 1 there, sympy keeps the condition undecided, and the call gives numpy's
    (empty-sum) result. In a child process."""
    import tex.symbolic as sp
    M, N, K = tex.sizes("M N K")
    i, j, k = tex.indices("i j k")
    A, B = tex.tensor("A", (M, K), "float32"), tex.tensor("B", (K, N), "float32")
    C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))
    s = tex.schedule(C)
    s[C].specialize(sp.Eq(sp.Mod(N, K), 0))
    f = tex.compile(s)
    a, b = np.ones((3, 4), np.float32), np.ones((4, 8), np.float32)
    np.testing.assert_array_equal(f(a, b), a @ b)
    a0, b0 = np.ones((3, 0), np.float32), np.ones((0, 8), np.float32)
    np.testing.assert_array_equal(f(a0, b0), np.zeros((3, 8), np.float32))
    np.testing.assert_array_equal(f(a, b), a @ b)
