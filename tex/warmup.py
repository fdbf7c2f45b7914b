"""Warm-up: what the first compile needs, prepared on a thread while this one does
something else.

`import tex` is kept small (the scheduler and llvmlite load with the first name that uses
them), so the first compile pays for them: imports, LLVM's start and the thread runtime,
before the kernel's own compile. In a notebook or a REPL the next cell comes
seconds later, so `import tex` starts a thread that does that work in between (`start`).
A script calls at once: its import starts nothing, but its first einsum without a
kernel on disk, or its first DSL name (tex.indices, tex.compile, ...), starts a thread
that compiles the thread runtime while this one imports the scheduler and builds the kernel
(`start_llvm`: LLVM releases the GIL). `TEX_WARMUP=1` starts the interactive
warm-up anywhere, `TEX_WARMUP=0` no thread at all.

The thread only imports modules and builds what the process builds once anyway (the
LLVM target machine, the thread runtime's object code: jit.prebuild, which leaves the
disk cache, its warnings and the workers' placement to the first call, on the caller's
thread and with the caller's settings); a failure there is left for the first call to
meet and report. A fork waits for the thread to finish (at most WAIT_AT_FORK seconds):
the child must not inherit an import lock held by a thread it does not have.
"""
import importlib
import os
import sys
import threading

WAIT_AT_FORK = 10.0

# the modules a first einsum or compile imports, in dependency order (tests/test_warmup.py
# checks that a cold call after the warm-up imports none of tex or llvmlite)
MODULES = (
    "tex.symbolic",
    "tex.interop",
    "tex.expr",
    "tex.tensor",
    "tex.program",
    "tex.einsum",
    "tex.library",
    "tex.scheduler.schedule",
    "tex.scheduler.auto",
    "tex.scheduler.blocking",
    "tex.scheduler.rewrite",
    "tex.scheduler.tuning",
    "tex.scheduler.tunedb",
    "tex.backends.llvm.runtime",
    "tex.backends.llvm.codegen",
    "tex.backends.llvm.jit",
    "llvmlite.binding",
)

_thread = []
_starting = threading.Lock()


def interactive():
    """A notebook kernel, IPython, or Python's own REPL (`python`, `python -i`)."""
    return "IPython" in sys.modules or hasattr(sys, "ps1") or bool(sys.flags.interactive)


def _warm(modules=MODULES):
    try:
        for name in modules:
            importlib.import_module(name)
        from tex.backends.llvm import threads
        threads.prebuild()
    except Exception:       # noqa: BLE001 -- the first call meets it again and reports it
        pass


def wait_for_thread():
    """Wait for the warm-up thread (at most WAIT_AT_FORK seconds): before a fork."""
    if _thread and _thread[0] is not threading.current_thread():
        _thread[0].join(WAIT_AT_FORK)



def start():
    """Start the warm-up thread when the session is interactive (or TEX_WARMUP=1)."""
    wanted = os.environ.get("TEX_WARMUP", "")
    if wanted != "1" and not interactive():
        return
    _start(_warm)


def start_llvm():
    """At a first compile in a script (tex.einsum without a kernel on disk, or the first
    DSL name): compile the thread runtime on a thread while this one imports the scheduler
    and builds the kernel's IR. That LLVM compile (about 70 ms when the kernel
    cache is new: the runtime is cached there) releases the GIL, so on a second core it
    costs the first call nothing."""
    _start(lambda: _warm(modules=()))


def _start(work):
    with _starting:
        if _thread or os.environ.get("TEX_WARMUP", "") == "0" or \
                "tex.backends.llvm.threads" in sys.modules and \
                sys.modules["tex.backends.llvm.threads"]._runtime:
            return
        # not a daemon whoever starts it: the interpreter's exit waits for LLVM to finish
        thread = threading.Thread(target=work, name="tex-warmup", daemon=False)
        try:
            thread.start()
        except RuntimeError:        # no thread to be had (a limit, or the interpreter exits)
            return
        _thread.append(thread)
    os.register_at_fork(before=wait_for_thread)
