"""The interactive warm-up (tex/warmup.py): in a REPL or notebook `import tex` loads what
the first compile needs on a thread; a script starts none; the list of modules it loads
is the one a first call needs; a fork during the warm-up neither hangs nor breaks the
child. Each scenario runs in a child process with a private kernel cache."""
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run(args, tmp_path, env=None, stdin=None, timeout=240):
    full_env = dict(os.environ, TEX_CACHE_DIR=str(tmp_path))
    full_env.pop("TEX_WARMUP", None)
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=full_env, input=stdin,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


def test_a_script_starts_no_thread_and_a_repl_does(tmp_path):
    probe = "import tex, tex.warmup, threading; print('started', bool(tex.warmup._thread))\n"
    assert "started False" in run(["-c", probe], tmp_path)
    assert "started True" in run(["-c", probe], tmp_path, env={"TEX_WARMUP": "1"})
    # python's own REPL reading stdin (-i: interactive although stdin is a pipe)
    assert "started True" in run(["-i", "-q"], tmp_path, stdin=probe)
    assert "started False" in run(["-i", "-q"], tmp_path, stdin=probe,
                                  env={"TEX_WARMUP": "0"})


FIRST_CALLS = r"""
import sys, numpy as np, tex, tex.warmup
tex.warmup._thread[0].join()
assert {"tex.symbolic", "llvmlite.binding"} <= set(sys.modules)
before = set(sys.modules)
a = np.ones((65, 63), np.float32)
tex.einsum("ij,ij->ij", a, a); tex.einsum("ij->i", a); tex.einsum("ik,kj->ij", a, a.T)
tex.einsum("ij,jk,kl->il", a, a.T, a)
i, j = tex.indices("i j"); M, N = tex.sizes("M N")
X = tex.tensor("X", (M, N), "float32")
f = tex.compile(tex.compute("Y", (i,), tex.sum(tex.exp(X[i, j]), over=j)))
np.testing.assert_allclose(f(X=a), np.exp(a).sum(1), rtol=1e-5)
late = sorted(m for m in set(sys.modules) - before
              if m.split(".")[0] in ("tex", "sympy", "llvmlite"))
print("late", late)
"""


def test_the_warm_up_loads_what_first_calls_import(tmp_path):
    """After the warm-up, first calls of each kind (elementwise, a reduction, a matmul,
    three operands, a compiled definition) import no module of tex or llvmlite (nor sympy):
    MODULES is complete (a module missing from it shows here by name)."""
    out = run(["-c", FIRST_CALLS], tmp_path, env={"TEX_WARMUP": "1"})
    assert "late []" in out, out


FORK = r"""
import os, signal, time, numpy as np, tex
pid = os.fork()          # at once: the warm-up thread is importing the DSL
if pid == 0:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    ok = np.allclose(tex.einsum("ij,kj->ik", a, a), a @ a.T)
    os._exit(0 if ok else 3)
deadline = time.monotonic() + 60
while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
    time.sleep(0.05)
if done[0] == 0:
    os.kill(pid, signal.SIGKILL)
    print("child hung")
else:
    print("child", os.waitstatus_to_exitcode(done[1]))
"""


def test_a_fork_during_the_warm_up_gives_a_working_child(tmp_path):
    """The fork waits for the warm-up: a child that inherited a held import lock would
    hang on its first import of the DSL (killed after 60 s)."""
    out = run(["-c", FORK], tmp_path, env={"TEX_WARMUP": "1"})
    assert "child 0" in out, out


NO_THREADS = r"""
import os, threading
def refuse(self):
    raise RuntimeError("can't start new thread")
threading.Thread.start = refuse
import numpy as np, tex, tex.warmup
assert not tex.warmup._thread
pid = os.fork()                  # no hook registered for a thread that never ran
if pid == 0:
    os._exit(0)
_, status = os.waitpid(pid, 0)
a = np.ones((3, 4), np.float32)
print("ok", os.waitstatus_to_exitcode(status), float(tex.einsum("ij,ij->", a, a)))
"""


def test_import_tex_works_when_no_thread_can_start(tmp_path):
    out = run(["-c", NO_THREADS], tmp_path, env={"TEX_WARMUP": "1"})
    assert "ok 0 12.0" in out, out


FIRST_COMPILE = r"""
import numpy as np, tex, tex.warmup
from tex.backends.llvm import threads
assert not tex.warmup._thread
a = np.ones((5, 7), np.float32)
assert np.allclose(tex.einsum("ij,ij->ij", a, a), a * a)
print("thread", [t.name for t in tex.warmup._thread], "runtime", bool(threads._runtime))
"""


PREBUILD = r"""
import os, tempfile, warnings, tex
from tex.backends.llvm import jit, threads
first = os.environ["TEX_CACHE_DIR"]
threads.prebuild()
print("written at prebuild", os.path.exists(first) and os.listdir(first))
later = tempfile.mkdtemp(dir=os.path.dirname(first))
os.environ["TEX_CACHE_DIR"] = later
threads.runtime()
print("prebuilt", jit.STATS["prebuilt"], "compiled here", jit.STATS["compiled"],
      "runtime files", len(os.listdir(os.path.join(later, "runtime"))),
      "host record", len(os.listdir(os.path.join(later, "host"))))
"""


def test_the_runtime_compiled_ahead_is_cached_where_the_first_call_says(tmp_path):
    """jit.prebuild (the warm-up thread's work) compiles the runtime and touches no disk
    cache: the first call loads its object and writes it, and the host's record the
    warm-up learned, to the cache folder in effect then (a folder set after the warm-up
    started)."""
    out = run(["-c", PREBUILD], tmp_path / "first", env={"TEX_WARMUP": "0"})
    assert "written at prebuild False" in out, out
    assert "prebuilt 1 compiled here 0 runtime files 1 host record 1" in out, out


def test_a_first_compile_in_a_script_builds_the_runtime_on_a_thread(tmp_path):
    """A script's first einsum without a kernel on disk starts the LLVM warm-up (the
    thread runtime's compile overlaps the import of the scheduler); TEX_WARMUP=0 starts none."""
    assert "thread ['tex-warmup'] runtime True" in run(["-c", FIRST_COMPILE], tmp_path)
    assert "thread [] runtime True" in run(["-c", FIRST_COMPILE], tmp_path,
                                           env={"TEX_WARMUP": "0"})
