"""Run a test's body in a long-lived child process, so generated code that crashes (a
dropped guard reads past a buffer: SIGSEGV) fails that one example instead of taking
down pytest.

    @settings(...)
    @given(cases())
    @in_child
    def test_random_things(case):
        ...                      # runs in the child; arguments and exceptions pickle

The child is forked from a forkserver that has numpy, hypothesis and tex imported, and
lives across examples and tests (its in-memory kernel caches too), so an example costs
one round trip. An exception in the body is raised again in pytest with the child's
traceback attached; when the child dies, the example fails with ChildCrashed naming the
signal, a new child serves the next example, and hypothesis shrinks the crash like any
other failure. The body must be a module-level function of a test module (the child
imports the module by name); its arguments must survive pickling (numpy arrays lose
their strides: pass a layout's name and build the view in the body).
TEX_TEST_IN_PROCESS=1 runs the bodies in pytest's process instead (for pdb).
"""
import functools
import importlib
import multiprocessing
import os
import pickle
import signal
import traceback

TIMEOUT = float(os.environ.get("TEX_TEST_CHILD_TIMEOUT", 600))   # seconds an example
_ENV_PREFIXES = ("TEX_",)      # the parent's settings of these reach the child per call
_BODIES = {}                   # (module, name) -> the undecorated body (in either process)


class ChildCrashed(Exception):
    """The child process running a test body died (a signal) or hung."""


class ChildError(AssertionError):
    """An exception from the child that could not be pickled, as text."""


def _env():
    return {k: v for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)}


def _serve(conn):
    """The child: run (module, name, args, kwargs, env) requests until the pipe closes."""
    while True:
        try:
            module, name, args, kwargs, env = conn.recv()
        except EOFError:
            return
        for k in [k for k in os.environ if k.startswith(_ENV_PREFIXES) and k not in env]:
            del os.environ[k]
        os.environ.update(env)
        try:
            importlib.import_module(module)
            result = ("ok", _BODIES[module, name](*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - pytest's Failed is a BaseException
            if isinstance(exc, KeyboardInterrupt):
                raise
            text = "".join(traceback.format_exception(exc))
            try:
                blob = pickle.dumps(exc)
                pickle.loads(blob)
            except Exception:         # noqa: BLE001
                blob = None
            result = ("raised", blob, text, f"{type(exc).__name__}: {exc}")
        conn.send(result)


class _Worker:
    """One child process and the parent's end of its pipe."""
    _ctx = None

    def __init__(self):
        if _Worker._ctx is None:
            _Worker._ctx = multiprocessing.get_context("forkserver")
            _Worker._ctx.set_forkserver_preload(
                ["numpy", "sympy", "llvmlite.binding", "hypothesis", "tex"])
        self.conn, child = _Worker._ctx.Pipe()
        self.proc = _Worker._ctx.Process(target=_serve, args=(child,), daemon=True,
                                         name="tex-test-child")
        self.proc.start()
        child.close()

    def call(self, module, name, args, kwargs):
        self.conn.send((module, name, args, kwargs, _env()))
        if self.conn.poll(TIMEOUT):
            try:
                return self.conn.recv()
            except (EOFError, OSError):
                pass
        else:
            self.proc.kill()
        self.proc.join(10)
        code = self.proc.exitcode
        if code is None:
            self.proc.kill()
            return ("crashed", f"hung for more than {TIMEOUT:.0f} s (killed)")
        if code < 0:
            try:
                what = signal.Signals(-code).name
            except ValueError:
                what = f"signal {-code}"
            if what == "SIGKILL":
                what = f"SIGKILL (it ran more than {TIMEOUT:.0f} s, or ran out of memory)"
            return ("crashed", f"died with {what}")
        return ("crashed", f"exited with status {code}")

    def close(self):
        self.conn.close()
        self.proc.join(5)
        if self.proc.exitcode is None:
            self.proc.kill()


_worker = None


def run(module, name, *args, **kwargs):
    """The body registered as (module, name) called with the arguments in the child."""
    global _worker
    if _worker is None:
        _worker = _Worker()
    reply = _worker.call(module, name, args, kwargs)
    if reply[0] == "ok":
        return reply[1]
    if reply[0] == "crashed":
        _worker = None                      # the next example gets a new child
        raise ChildCrashed(f"the child process running {name} {reply[1]}; generated "
                           f"code crashed on this example (the arguments are above)")
    _, blob, text, line = reply
    exc = pickle.loads(blob) if blob is not None else ChildError(line)
    where = f"--- in the child process:\n{text.rstrip()}"
    if not hasattr(exc, "add_note"):             # Python 3.10
        raise exc from ChildError(where)
    exc.add_note(where)
    raise exc


def in_child(body):
    """Decorator: the test's calls run `body` in the child process (see the module
    docstring)."""
    key = (body.__module__, body.__name__)
    _BODIES[key] = body

    @functools.wraps(body)
    def test(*args, **kwargs):
        if os.environ.get("TEX_TEST_IN_PROCESS"):      # to debug a body (pdb), or compare
            return body(*args, **kwargs)
        return run(*key, *args, **kwargs)
    test.body = body
    return test


def _shutdown():
    if _worker is not None:
        _worker.close()


import atexit  # noqa: E402

atexit.register(_shutdown)
