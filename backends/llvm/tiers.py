"""Two tiers of machine code: a small first call runs quickly compiled code while the
optimized code is compiled beside it.

LLVM's optimization and code generation are most of a new kernel's first call (a
256^2 matmul: ~200 of ~400 ms). A light compile of the same IR (a few passes, LLVM's
fast instruction selection and register allocation: `Machine.light_object`) takes a
quarter of that time, and its code runs 2-20x slower: nothing for a first call of a
256^2 matmul (1 ms instead of 0.2), too much for a 2048^2 one. So a kernel whose first
call is small (`quick_cost`: its work, estimated from the sizes, would run in a few
milliseconds even so) is compiled lightly first; its optimized compile is queued at
once (`Upgrade`) and runs on a thread in a compiler process of its own, so it neither
holds llvmlite's lock (which serializes every LLVM call of this process) nor delays
the caller's next compile. The kernel's calls switch to the optimized code as soon as
it is linked; before that, its first QUICK_CALLS small calls run the quick code and
any other waits for it (and compiles it itself when no thread has started it), so a
loop of calls, a benchmark after its warm-up, runs optimized code after a few calls.

By default only kernels whose quick code computes exactly the optimized code's values
are tiered (`same_values`: no fast-math flags in the IR; elementwise and integer
kernels, fast_math=False, register-tiled contractions, whose updates are explicit FMAs:
vector.py's `_fuses`; sums in code tex vectorized, which carry no flags:
ops.vector_flags): a fast-math sum that LLVM's vectorizer reassociates sums in
another order in its optimized code, so its first calls would differ in the last bits
from the next ones, and a long float32 sum would be less accurate. `TEX_TIERED=1` tiers those too; `TEX_TIERED=0` compiles every kernel
optimized at once, as before this module.

Only optimized code reaches the disk cache, under the kernel's usual key: a new
process never loads quick code. An exiting process finishes its upgrades (and caches
them) for up to EXIT_WAIT seconds and drops the rest.
"""
import atexit
import collections
import os
import re
import threading
import time
import warnings
import weakref

from . import elf, jit
from .diskcache import STATS, pack_objects, unpack_objects, write_cached
from ... import forksafe
from ...expr import Op, walk
from ...scheduler.target import overriding, target as current_target

# a first call runs quick code when its estimated time there is at most QUICK_RUN_NS:
# an iteration of a kernel whose loops tex vectorized costs ~0.1-0.5 ns in quick code
# (256^2 .. 1024^2 matmuls, column sums, batched products; Emerald Rapids), one of the
# scalar loops that LLVM's vectorizer would have served ~5-8 ns (row sums, elementwise),
# and each exp, log, tanh, erf, sin, cos or power of it ~20-40 ns more (gelu over 1000 x
# 1240: 37-50 ms in quick code, 1.5 ms optimized)
QUICK_RUN_NS = 10e6
NS_PER_ITERATION = {True: 0.5, False: 8.0}
NS_PER_MATH_CALL = 40.0
MATH_CALLS = frozenset({"exp", "log", "tanh", "erf", "expm1", "log1p", "sin", "cos",
                        "power"})
MAX_QUEUED = 32         # upgrades waiting for the thread; older ones run when called
# calls of a kernel that may run its quick code before one waits for the optimized code:
# an einsum's contraction path may call one kernel for two steps (a first `ij,jk,kl->il`
# that waited at its second step took 590-645 ms instead of 460-490); more would leave
# quick code in a benchmark's timed calls after its one warm-up call
QUICK_CALLS = 2
EXIT_WAIT = 2.0         # seconds an exiting process gives its upgrades (_finish_at_exit)


def mode():
    """TEX_TIERED: "0" never; "1" for any kernel whose first call is small enough; unset
    (the default) only for kernels whose quick code computes the optimized code's bits
    (`same_values`). Another value gets a warning (once) and the default."""
    value = os.environ.get("TEX_TIERED", "")
    if value not in ("", "0", "1") and value not in _warned:
        _warned.add(value)
        warnings.warn(f"TEX_TIERED={value!r} is not 0 or 1; quick code first only where it "
                      "computes the optimized code's values (the default)", RuntimeWarning,
                      stacklevel=3)
    return "never" if value == "0" else "always" if value == "1" else "exact"


_warned = set()


def enabled():
    return mode() != "never"


# LLVM's fast-math flags: with any of them, the optimized pipeline may change values
# (reassociated sums, vectorized reductions, products fused into FMAs, signs of zeros)
# where the light compile keeps the order written
_FAST_FLAGS = re.compile(r" (?:fast|reassoc|contract|nsz|arcp|afn|nnan|ninf) ")


def same_values(ir_text):
    """Whether the quick code of this module computes exactly what its optimized code
    does: no fast-math flags (elementwise kernels, integer code, fast_math=False,
    register tiles)."""
    return _FAST_FLAGS.search(ir_text) is None


def small_enough(cost):
    """Whether a call whose quick code takes about `cost` ns (None: not known) is
    small enough for it."""
    return cost is not None and cost <= QUICK_RUN_NS


def first_calls_small(call, vectorized):
    """Whether quick code may serve a build's first calls: `call` = (program, their
    sizes: [{Size: value}] or one dict), or None when they are not known yet (the call
    path's gate decides at the call)."""
    if call is None:
        return True
    program, sizes = call
    return all(small_enough(quick_cost(program, values, vectorized))
               for values in ([sizes] if isinstance(sizes, dict) else sizes))


def quick_cost(program, values, vectorized):
    """About how long (ns) quick code takes for `program` at these sizes ({Size:
    value}): each definition's iterations (the product of its index extents) at
    NS_PER_ITERATION, and NS_PER_MATH_CALL for each math function it calls. None when
    a size is missing."""
    total = 0.0
    try:
        for d in program.definitions:
            n = 1
            for extent in d.extents.values():
                n *= int(extent.xreplace(values))
            calls = sum(isinstance(e, Op) and e.name in MATH_CALLS for e in walk(d.expr))
            total += n * (NS_PER_ITERATION[bool(vectorized)] + NS_PER_MATH_CALL * calls)
    except (TypeError, ValueError, AttributeError):
        return None
    return total


_state = forksafe.lock()            # an upgrade's state changes
_quick = {}     # kernel key -> (address, image, Upgrade): quick code not yet replaced


class Upgrade:
    """The optimized compile of a kernel that runs quick code: queued for the upgrade
    thread, or run by the first caller that needs it (`wait`)."""

    def __init__(self, key, symbol, ir_text, machine):
        self.key, self.symbol, self.ir_text, self.machine = key, symbol, ir_text, machine
        self.target = current_target()      # (an override is this thread's alone)
        self.done = threading.Event()
        self.result = None      # (address, image) of the optimized code
        self.error = None       # why it could not be compiled (the quick code stays)
        self.state = "queued"   # -> "running" -> "done"
        self.runner = None      # (process id, thread) compiling it
        _every.add(self)

    def _claim(self):
        """Take the compile: queued, or left by a runner that is gone (a thread that
        died, the parent's thread after a fork, this thread after a Ctrl-C)."""
        with _state:
            if self.state == "done" or self.state == "running" and self._runner_busy():
                return False
            self.state = "running"
            self.runner = (os.getpid(), threading.current_thread())
            return True

    def _runner_busy(self):
        pid, thread = self.runner
        return pid == os.getpid() and thread.is_alive() and \
            thread is not threading.current_thread()

    def wait(self):
        """(address, image) of the optimized code, compiled on this thread when no
        other compiles it; raises what the compile raised."""
        while not self.done.is_set():
            if self._claim():
                self._run()
            else:
                self.done.wait(timeout=0.25)    # (its runner may yet be gone)
        if self.error is not None:
            raise self.error
        return self.result

    def _run(self):
        try:
            result, error = self._compile(), None
        except Exception as err:      # LLVM refused the module, its process died
            result, error = None, err
            with jit._lock:           # (a function made later tries again)
                if _quick.get(self.key, (None, None, None))[2] is self:
                    del _quick[self.key]
        except BaseException:         # Ctrl-C while a caller compiled it: later, again
            with _state:
                self.state = "queued"
            raise
        with _state:
            self.result, self.error, self.state, self.ir_text = result, error, "done", None
        self.done.set()
        if error is not None and not _exiting:     # (not the compiler ended at exit)
            try:
                warnings.warn(f"tex: the optimized compile of {self.symbol} failed, so "
                              f"it keeps running its quickly compiled code: {error}",
                              RuntimeWarning, stacklevel=3)
            except Exception:       # warnings as errors: the quick code stays all the same
                pass

    def _compiled(self):
        """The module's objects from the upgrades' compiler process; again from a new
        one when another thread retired this one (spent: `_compiler`) between handing
        it out and the request (a closed process; seen once in the test suite)."""
        near = _compiler(self.machine)
        try:
            return jit.compile_module(self.ir_text, near=near)
        except jit.CompileError:
            if near is None or not near.closed() or _exiting:   # (the exit closed it)
                raise
        return jit.compile_module(self.ir_text, near=_compiler(self.machine))

    def _compile(self):
        """The optimized object, in the disk cache and linked: (address, image); what
        memory or the disk has, when a call too large for quick code compiled it."""
        hit = jit.load_key(self.key, self.symbol, None)
        if hit is not None:
            with jit._lock:
                _quick.pop(self.key, None)
            return hit
        with overriding(self.target):
            # a large module's halves at once: one in the upgrades' compiler process,
            # one in the caller's (jit.compile_module)
            obj = pack_objects(self._compiled())
        with jit._lock:
            write_cached(self.key, obj, "kernel")
            hit = jit._memory.get(self.key)
            if hit is None:
                image = elf.Image(unpack_objects(obj))
                hit = (image, image.address(self.symbol))
                jit.remember(self.key, hit)
            _quick.pop(self.key, None)
            STATS["upgraded"] += 1
        return hit[1], hit[0]


_every = weakref.WeakSet()      # every Upgrade of this process (fork: _after_fork_in_child)


def load(key, symbol, make_ir, large=False, before_link=None):
    """(address, image, upgrade) of the kernel `key`: its optimized code when memory or
    the disk has it, or when its quick code could compute other values (`mode`,
    `same_values`; upgrade None), else quick code, compiled here, and the Upgrade that
    replaces it (queued for the upgrade thread). (Two threads asking at once for a new
    kernel may both compile its quick code; one is used.)"""
    hit = jit.load_key(key, symbol, None, before_link=before_link)
    if hit is not None:
        return hit + (None,)
    machine = jit.Machine.get()
    with jit._lock:
        entry = _quick.get(key)
        if entry is None:
            ir_text = make_ir()
            quick = mode() == "always" or same_values(ir_text)
            if quick:
                obj = machine.light_object(ir_text, combine=False)
                STATS["compiled_quick"] += 1
    if entry is not None:
        return entry
    if not quick:       # (outside the lock: before_link takes the runtime's lock)
        return jit.load_key(key, symbol, make_ir, large=large,
                            before_link=before_link) + (None,)
    if before_link is not None:
        before_link()
    with jit._lock:
        entry = _quick.get(key)
        hit = jit._memory.get(key)      # (an upgrade done meanwhile)
        if hit is not None:
            return hit[1], hit[0], None
        if entry is None:
            image = elf.Image([obj])
            entry = _quick[key] = (image.address(symbol), image,
                                   Upgrade(key, symbol, ir_text, machine))
            while len(_quick) > jit.kernel_cache_size():
                del _quick[next(iter(_quick))]    # (its functions keep their own)
            _submit(entry[2])
    return entry


# ---------------------------------------------------------------- the upgrade thread

_queue = collections.deque()
_wake = threading.Condition(forksafe.lock())
_thread = []
_running = []           # the upgrade the thread is compiling
_compilers = {}         # (cpu, features) -> the upgrades' CompilerProcess for that target
_exiting = []


def _submit(upgrade):
    with _wake:
        _queue.append(upgrade)
        while len(_queue) > MAX_QUEUED:
            _queue.popleft()            # compiled when a call needs it (Upgrade.wait)
        if not _thread or not _thread[0].is_alive():
            thread = threading.Thread(target=_upgrade_loop, name="tex-upgrade", daemon=True)
            try:
                thread.start()
            except RuntimeError:        # no thread can start: calls compile their upgrades
                return
            _thread[:] = [thread]
        _wake.notify()


def _upgrade_loop():
    while True:
        with _wake:
            while not _queue or _exiting:
                _wake.wait()
            upgrade = _queue.popleft()
            if not upgrade._claim():
                continue
            _running[:] = [upgrade]
        try:
            upgrade._run()
        except BaseException:   # (a daemon thread at exit)
            return
        finally:
            _running.clear()


def _compiler(machine):
    """The compiler process of upgrades for `machine`'s target (jit.CompilerProcess):
    not the one the caller's compiles use, which a long upgrade would hold; one a
    target, so that kernels for two targets do not restart it in turn. None (compile
    in this process) with TEX_COMPILE_IN_PROCESS=1 or when no process can start."""
    if os.environ.get("TEX_COMPILE_IN_PROCESS") == "1":
        return None                 # (jit.compile_module then compiles here)
    with _state:
        try:
            return jit.process_for(_compilers, machine)
        except OSError:             # no process can start: compiled here
            return None


@atexit.register
def _finish_at_exit():
    """Let the upgrades under way and queued reach the disk cache, for EXIT_WAIT
    seconds at most: the next run of a script loads them (the rest are dropped)."""
    deadline = time.monotonic() + EXIT_WAIT
    while time.monotonic() < deadline:
        with _wake:
            pending = [u for u in _running + list(_queue) if not u.done.is_set()]
            if not _thread or not _thread[0].is_alive():
                break
        if not pending:
            break
        pending[0].done.wait(timeout=max(0.0, deadline - time.monotonic()))
    with _wake:
        _exiting.append(True)
    for compiler in _compilers.values():
        compiler.close_at_exit()


def _after_fork_in_child():
    # the parent's thread and compiler process are not the child's: an upgrade they
    # had begun is the child's to compile when a call needs it
    _thread.clear()
    _queue.clear()
    _running.clear()
    _compilers.clear()
    for upgrade in list(_every):
        if upgrade.state == "running":
            upgrade.state = "queued"
        upgrade.done._cond._at_fork_reinit()    # (a thread of the parent may have held it)


os.register_at_fork(after_in_child=_after_fork_in_child)
