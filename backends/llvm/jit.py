"""From LLVM IR text to a callable address: optimize, emit an object, cache it, load it.

Every kernel takes one path: key -> (memory | disk cache | IR -> O1 or O3 + codegen) ->
object bytes -> an image of its own (elf.py, tex's loader) -> function address. The key
covers everything that changes the machine code: the kernel's loop nest (its
structure_key text, from which code generation is deterministic, so a cached kernel
never generates IR), the entry symbol and fast-math flag, the code generator's own
source, the llvmlite and LLVM versions, and the target CPU name and features. (A kernel
whose first call is small may first run code from a light compile, kept in memory only,
while this path compiles its optimized code: tiers.py.)

llvmlite is imported only to compile (and, once per machine, to ask LLVM what the host
CPU is: `host_facts` keeps its answer in the disk cache), so a process whose kernels are
all on disk never loads it.

In memory, the images of the most recently used TEX_KERNEL_CACHE_SIZE kernels (default
512) are kept; an evicted image is unmapped once no compiled function uses it.

Optimization runs in this process for the first IN_PROCESS_COMPILES modules, then in a
compiler child process (compile_worker.py, restarted every MAX_COMPILES modules):
llvmlite's pass builder leaks ~100 KB a module, and an LLVM crash there is an error
here, not the end of the user's interpreter. A large module (a blocked matmul's) is
split in two around its parallel regions (split.py) and the halves compile at
once, one here and one in the compiler process (started while the IR is built): the
first call of a matmul waits for the larger half only. Its objects are cached as one
payload (`pack_objects`) and loaded as one image.

On disk (diskcache.py), the cache is trusted only as far as it is private, and every
entry is signed: bytes that this user's tex did not write are never mapped as code.

Code is generated for the CPU and features llvmlite reports for this host; nothing is
hard-coded (a machine without AVX-512 gets AVX2 code).
"""
import atexit
import collections
import hashlib
import json
import os
import sys
import threading
import warnings

import llvmlite

from . import elf
from .diskcache import (MAGIC, STATS, _cache_path, _is_kernel_payload, cache_dir,  # noqa: F401
                        pack_objects, read_cached, unpack_objects, write_cached)
from ...scheduler import target as targets
from ...scheduler.target import target as current_target
from ... import forksafe

CODEGEN_VERSION = "tex-codegen-3"


_codegen_source = []


def codegen_source(disk=True):
    """The digest of the code generator's source (sources.codegen_files), once per
    process: from the disk cache while the files are unchanged (sources.py); `disk=False`
    reads the files alone."""
    if not _codegen_source:
        from . import sources
        cache = (read_cached, write_cached) if disk else ()
        value = sources.digest(sources.codegen_files(), *cache)
        _codegen_source[:] = [value[:16]]
    return _codegen_source[0]


_lock = forksafe.rlock()
_memory = collections.OrderedDict()  # key -> (image, address), least recently used first
_prebuilt = {}      # key -> [threading.Event, object or None]: compiled ahead (prebuild)
_unlinked = {}      # key -> object code compiled or read, not yet linked (load_key)


def kernel_cache_size():
    """How many kernels' images the memory cache keeps (TEX_KERNEL_CACHE_SIZE, default
    512); a value that is not a positive integer gets a warning and the default."""
    text = os.environ.get("TEX_KERNEL_CACHE_SIZE")
    if text is None:
        return 512
    try:
        n = int(text)
        if n >= 1:
            return n
    except ValueError:
        pass
    warnings.warn(f"TEX_KERNEL_CACHE_SIZE={text!r} is not a positive integer; using 512",
                  RuntimeWarning, stacklevel=2)
    return 512


def _llvm():
    """llvmlite's bindings, imported on first use (27 ms): compiling needs them, running
    a cached kernel does not."""
    import llvmlite.binding as llvm
    return llvm


class Machine:
    """LLVM's side of a Target (scheduler/target.py): the process triple, a target
    machine for the target's CPU and features, its data layout. One per target."""
    _machines = {}

    def __init__(self, target):
        llvm = _llvm()
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        self.target = target
        self.cpu, self.features = target.cpu, target.codegen_features
        self.triple = llvm.get_process_triple()
        self.llvm_target = llvm.Target.from_triple(self.triple)
        self.machine = self.new_machine()
        self.datalayout = str(self.machine.target_data)

    def new_machine(self, opt=3):
        return self.llvm_target.create_target_machine(cpu=self.cpu, features=self.features,
                                                      opt=opt, codemodel="jitdefault")

    def light_object(self, ir_text, combine=True):
        """Object code from a light pipeline (compile_worker.optimize_light) and LLVM's
        fast instruction selection and register allocation (codegen level 0), on a
        target machine of its own (a warm-up thread compiles the thread runtime while
        the caller's thread compiles a kernel). For the thread runtime, whose code
        waits, spins and hands out work: the O1 pipeline and full codegen took 110-130
        ms of a cold first call's LLVM time here (Emerald Rapids), this takes about 20,
        and parallel regions run no slower (repeated 400^2 .. 2048^2 elementwise
        products and row sums on 2 threads, A/B within noise). And for a kernel's
        quick code (tiers.py), without InstCombine (combine=False:
        compile_worker.optimize_light says why)."""
        from . import compile_worker
        machine = self.new_machine(opt=0)
        return machine.emit_object(compile_worker.optimize_light(_llvm(), machine, ir_text,
                                                                 combine))

    @classmethod
    def get(cls, target=None):
        """The Machine of `target`, default the current one (target.target())."""
        t = target or current_target()
        key = (t.cpu, t.features)
        if key not in cls._machines:
            with _lock:
                if key not in cls._machines:
                    cls._machines[key] = Machine(t)
        return cls._machines[key]

    def has_feature(self, name):
        return self.target.has(name)

    @property
    def fingerprint(self):
        return fingerprint(self.target)


Host = Machine          # the name tex's benchmarks and older code use


def fingerprint(target=None):
    """What, besides a kernel's own text, decides its machine code: the code generator's
    version and source, llvmlite's and LLVM's versions, the target CPU and features
    (default the current target)."""
    t = target or current_target()
    return "|".join([CODEGEN_VERSION, codegen_source(), llvmlite.__version__,
                     host_facts()[2], t.cpu, t.codegen_features])


# ---------------------------------------------------------------- the host, remembered

HOST_VERSION = "tex-host-1"


def _host_signature():
    """What decides LLVM's answer about the host, read without LLVM: the CPU's identity
    and flags as Linux reports them (/proc/cpuinfo's first processor) and the llvmlite
    build (its version, and the size and time of its library). None where either is
    unavailable (then LLVM is asked every time)."""
    lib = os.path.join(os.path.dirname(llvmlite.__file__), "binding", "libllvmlite.so")
    keep = ("vendor_id", "cpu family", "model", "model name", "stepping", "flags")
    try:
        st = os.stat(lib)
        lines = []
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break
                if line.split(":")[0].strip() in keep:
                    lines.append(line.strip())
    except OSError:
        return None
    if not any(line.startswith("flags") for line in lines):
        return None
    return "\n".join([HOST_VERSION, llvmlite.__version__, lib, str(st.st_size),
                      str(st.st_mtime_ns)] + lines)


def _is_host_record(payload):
    try:
        facts = json.loads(payload)
        return isinstance(facts, list) and len(facts) == 3 and all(
            isinstance(f, str) for f in facts)
    except (ValueError, UnicodeDecodeError):
        return False


def _ask_llvm():
    cpu, features = targets.llvm_host_cpu()
    return [cpu, features, ".".join(map(str, _llvm().llvm_version_info))]


def host_facts(disk=True):
    """(host CPU name, its features, LLVM's version), as llvmlite reports them. The
    answer is kept in the disk cache under the host's signature (`_host_signature`), so
    that a process running cached kernels need not load llvmlite to learn it.
    `disk=False` (a warm-up thread) asks llvmlite and leaves the record for the next
    load on the caller's thread to write (`_save_host_facts`)."""
    if not _facts:
        if not disk:
            _facts.append(tuple(_ask_llvm()))
            _unsaved.append(True)
            return _facts[0]
        key = _host_key()
        payload = key and read_cached(key, "host", check=_is_host_record)
        if payload:
            facts = json.loads(payload)
        else:
            facts = _ask_llvm()
            if key:
                write_cached(key, json.dumps(facts).encode(), kind="host")
        _facts.append(tuple(facts))
    return _facts[0]


def _host_key():
    signature = _host_signature()
    return signature and hashlib.sha256(signature.encode()).hexdigest()


def _save_host_facts():
    """Write the host record that a warm-up thread learned without the disk."""
    if _unsaved:
        _unsaved.clear()
        key = _host_key()
        if key and read_cached(key, "host", check=_is_host_record) is None:
            write_cached(key, json.dumps(list(_facts[0])).encode(), kind="host")


_facts = []
_unsaved = []
targets.use_host_probe(lambda: host_facts()[:2])


def cache_key(text):
    """The cache key of a kernel described by `text` (see the module docstring)."""
    return hashlib.sha256((fingerprint() + "\n" + text).encode()).hexdigest()


def optimized_module(ir_text):
    """Parse, verify and optimize in this process (compile_worker.optimize)."""
    from . import compile_worker
    host = Machine.get()
    return compile_worker.optimize(_llvm(), host.machine, ir_text)


class CompileError(RuntimeError):
    """LLVM refused a module, or the compiler process died on it."""


class CompilerProcess:
    """The compiler child process (compile_worker.py): IR text in, object bytes out.
    It is started on first use and replaced after MAX_COMPILES modules, which bounds the
    memory llvmlite leaks there; a crash in it raises CompileError and the next compile
    starts a new one."""
    MAX_COMPILES = 200

    def __init__(self, machine):
        import subprocess              # imported here: a warm start never starts one
        import tempfile
        from . import compile_worker
        self.worker = compile_worker
        self.errors = tempfile.TemporaryFile()
        self.cpu, self.features = machine.cpu, machine.features
        self.proc = subprocess.Popen(
            [sys.executable, compile_worker.__file__, machine.cpu, machine.features],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errors)
        self.compiles = 0
        # one request at a time: a split module's half is awaited on another thread,
        # which may still wait for its reply after a Ctrl-C ended the caller's wait;
        # close() takes it too, so a process replaced while a thread awaits its reply
        # (another target's compile, tiers.py's upgrades) ends after that reply
        self.lock = threading.RLock()

    def closed(self):
        """Whether close() or kill() ended it (a request then fails at once)."""
        return self.errors.closed

    def spent(self):
        """Whether to start a new one: it died, or compiled MAX_COMPILES modules."""
        return self.compiles >= self.MAX_COMPILES or self.proc.poll() is not None

    def request(self, kind, ir_text):
        with self.lock:
            return self._request(kind, ir_text)

    def _request(self, kind, ir_text):
        self.compiles += 1
        try:
            self.worker.write_frame(self.proc.stdin, kind + ir_text.encode())
            reply = self.worker.read_frame(self.proc.stdout)
        except (OSError, ValueError):   # (ValueError: closed by a Ctrl-C's kill meanwhile)
            reply = None
        except BaseException:
            # a Ctrl-C between the request and its reply leaves the reply in the pipe,
            # where the next request would read it as its own (another kernel's code,
            # cached under the wrong key): this process serves no more requests
            self.kill()
            raise
        if reply is None and self.errors.closed:     # (ended by a Ctrl-C's kill)
            raise CompileError("the LLVM compiler process was ended during a compile")
        if reply is None:
            self.proc.wait()
            self.errors.seek(0)          # (before close() closes it)
            tail = self.errors.read()[-2000:].decode(errors="replace").strip()
            raise CompileError(f"the LLVM compiler process died (exit status "
                               f"{self.proc.returncode}) on a module: {tail or 'no message'}")
        if reply[:1] == b"e":
            raise CompileError(reply[1:].decode())
        return reply[1:]

    def kill(self):
        """End the process now (it may be in the middle of a compile) and close it."""
        if not self.errors.closed:
            self.proc.kill()
            self.close()

    def close(self):
        with self.lock:
            self._close()

    def close_at_exit(self):
        """close(), or the process killed when a thread still awaits a reply (an
        exiting process waits for no compile)."""
        if self.lock.acquire(blocking=False):
            try:
                self._close()
            finally:
                self.lock.release()
        else:
            self.proc.kill()

    def _close(self):
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except Exception:               # subprocess.TimeoutExpired
            self.proc.kill()
        self.errors.close()


# the running CompilerProcesses, one a target ((cpu, features): a process compiles for
# the target it was started for), the latest used last: code for two targets in turn
# (tests of the AVX2 paths beside the host's, TEX_CPU set for a block) started a new
# process at each switch, ~120 ms of CPU each (a run of the test suite started 163)
_compilers = {}
MAX_COMPILER_PROCESSES = 3
# the first modules of a process are optimized in it: a short session never waits
# ~60 ms for the compiler process to start, and leaks at most this many x ~100 KB
IN_PROCESS_COMPILES = 32


@atexit.register
def _close_compiler():
    """End the compiler processes with this one (after tiers.py's upgrades: atexit runs
    its handlers last registered first)."""
    while _compilers:
        _compilers.popitem()[1].close_at_exit()


def _compiler_process(started=False):
    """The compiler process of the current target, (re)started as needed (one a
    target: `_compilers`); None when this module is compiled in this process: among its
    first IN_PROCESS_COMPILES (unless `started`: a split module's second half,
    `compile_module`), with TEX_COMPILE_IN_PROCESS=1, or when a child process cannot be
    started."""
    if (STATS["compiled"] <= IN_PROCESS_COMPILES and not started) or \
            os.environ.get("TEX_COMPILE_IN_PROCESS") == "1":
        return None
    try:
        return process_for(_compilers, Machine.get(), MAX_COMPILER_PROCESSES)
    except OSError as err:
        warnings.warn(f"tex: cannot start the compiler process ({err}); compiling in "
                      "this process", RuntimeWarning, stacklevel=3)
        os.environ["TEX_COMPILE_IN_PROCESS"] = "1"
        return None


def process_for(processes, machine, limit=None):
    """The CompilerProcess of `machine`'s target in `processes` ({(cpu, features):
    process}, the latest used last), started when it has none or its own is spent;
    beyond `limit` processes the least recently used is closed. Raises OSError when
    no process can start."""
    target = (machine.cpu, machine.features)
    process = processes.pop(target, None)
    if process is not None and process.spent():
        process.close()             # (after a reply another thread awaits)
        process = None
    if process is None:
        process = CompilerProcess(machine)
    processes[target] = process
    while limit is not None and len(processes) > limit:
        processes.pop(next(iter(processes))).close()
    return process


def _llvm_lock():
    """llvmlite's lock around every call into LLVM, once llvmlite is loaded."""
    ffi = sys.modules.get("llvmlite.binding.ffi")
    return getattr(getattr(getattr(ffi, "lib", None), "_lock", None), "_lock", None)


_held_at_fork = []


def _before_fork():
    """A fork waits for the compile under way (this module's lock) and for the LLVM
    call under way (llvmlite's): a child copied in the middle of either found both
    locks held by a thread it does not have, and its first compile waited for ever."""
    warmup = sys.modules.get("tex.warmup")      # (no warm-up thread without it)
    if warmup is not None:
        warmup.wait_for_thread()    # (the warm-up thread's LLVM calls: before ours)
    _lock.acquire()
    llvm_lock = _llvm_lock()
    if llvm_lock is not None:
        llvm_lock.acquire()
    _held_at_fork.append(llvm_lock)


def _after_fork():
    llvm_lock = _held_at_fork.pop()
    if llvm_lock is not None:
        llvm_lock.release()
    _lock.release()


def _after_fork_in_child():
    _after_fork()
    # the child shares the parent's pipes: it must start a compiler of its own; and a
    # compile ahead on the parent's warm-up thread never ends here
    _compilers.clear()
    _prebuilt.clear()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork,
                    after_in_child=_after_fork_in_child)


def compile_object(ir_text):
    STATS["compiled"] += 1
    with _lock:
        worker = _compiler_process()
        if worker is not None:
            return worker.request(b"o", ir_text)
    return Machine.get().machine.emit_object(optimized_module(ir_text))


def compile_module(ir_text, near=None):
    """The object bytes of a module: one object, or two compiled at once for a large
    module (split.split_module): one half here (or by the CompilerProcess `near`: an
    upgrade's, tiers.py), the other in the compiler process (whose reply a thread
    awaits: llvmlite's calls let other threads run). A half that fails (LLVM refuses
    it, or the compiler process dies on it or cannot run at all) gets the module
    compiled whole, where it would have been without the split: a failed split is
    never worse than none. The half compiled here is outside the compiler process's
    bound on llvmlite's leak (~100 KB a large kernel)."""
    from .split import split_module

    def here(text):
        if near is not None:
            return near.request(b"o", text)
        return Machine.get().machine.emit_object(optimized_module(text))
    whole = compile_object if near is None else here
    texts = split_module(ir_text) if os.environ.get("TEX_COMPILE_IN_PROCESS") != "1" \
        else [ir_text]
    if len(texts) == 1:
        return [whole(ir_text)]
    with _lock:
        worker = _compiler_process(started=True)
    if worker is None:
        return [whole(ir_text)]
    STATS["compiled"] += 1
    result = {}

    def far():
        try:
            result["obj"] = worker.request(b"o", texts[1])
        except Exception as err:           # CompileError, or the pipe's own errors
            result["err"] = err
    helper = threading.Thread(target=far, name="tex-compile", daemon=True)
    helper.start()
    try:
        mine = here(texts[0])
    except RuntimeError:                   # LLVM refused this half (CompileError too)
        mine = None
    finally:
        helper.join()
    if mine is None or "err" in result:
        return [whole(ir_text)]            # as if it had never been split
    return [mine, result["obj"]]


def assembly(ir_text):
    with _lock:
        worker = _compiler_process()
        if worker is not None:
            return worker.request(b"a", ir_text).decode()
    return Machine.get().machine.emit_assembly(optimized_module(ir_text))


# ---------------------------------------------------------------- the disk cache

def prebuild(text, kind):
    """Compile `text` (the thread runtime) to object code ahead of its load, on a
    warm-up thread (tex/warmup.py): LLVM alone, which releases the GIL, with a context
    and a target machine of its own (the caller's thread may compile at the same time).
    Nothing is read from or written to the disk cache here and no warning is given (only
    whether the runtime's file exists is looked at, to skip the compile): the load does
    that on the caller's thread, with the caller's settings (its cache folder may change
    before then); it waits for a compile under way and uses its object."""
    host_facts(disk=False)       # (no disk here: the load writes the host's record)
    codegen_source(disk=False)
    machine = Machine.get()      # first: the load waits for the slot holding _lock
    key = cache_key(text)
    with _lock:
        if key in _prebuilt or os.path.exists(_cache_path(cache_dir(), key, kind)):
            return
        slot = _prebuilt[key] = [threading.Event(), None]
    try:
        slot[1] = machine.light_object(text)
    finally:
        slot[0].set()


def _take_prebuilt(key):
    """prebuild's object for `key` (waiting for it if under way), or None."""
    slot = _prebuilt.pop(key, None)
    if slot is None:
        return None
    slot[0].wait()
    if slot[1] is not None:
        STATS["prebuilt"] += 1
    return slot[1]


def load(text, symbol, make_ir=None, kind="kernel"):
    """The address of `symbol` in the kernel described by `text`, compiling only on a
    cache miss: `make_ir()` gives the LLVM IR then (default: `text` is the IR).
    Returns (address, image); keep the image (elf.Image) alive as long as the address
    is used.
    Kernels are kept in the bounded memory cache; other kinds (the thread runtime)
    are not."""
    return load_key(cache_key(text), symbol, make_ir or (lambda: text), kind)


def load_key(key, symbol, make_ir=None, kind="kernel", large=False, before_link=None):
    """`load` by the cache key itself; without `make_ir`, None on a cache miss (a warm
    start, backends/llvm/warm.py, which knows the key from an earlier process's record).
    `large`: the kernel's IR will be large (split_module), so a miss starts the
    compiler process before building it. `before_link()` runs once the object code is
    at hand and before it is linked (a kernel: the thread runtime it links against, so
    that a cold first call compiles the kernel while the warm-up thread still compiles
    the runtime); outside this module's lock, which the runtime's own load takes after
    its lock."""
    with _lock:
        _save_host_facts()
        hit = _memory.get(key)
        if hit is not None:
            STATS["memory_hits"] += 1
            _memory.move_to_end(key)
            return hit[1], hit[0]
        pending = _unlinked.get(key)
        obj = pending or read_cached(key, kind)
        if obj is None and make_ir is None:
            return None
        if obj is None:
            if kind == "kernel" and (STATS["compiled"] >= IN_PROCESS_COMPILES or large):
                _compiler_process(started=large)   # starts while make_ir() builds the IR
            ir_text = make_ir()
            if kind == "kernel":
                obj = pack_objects(compile_module(ir_text))
            else:     # the runtime: one small module, compiled once per machine, here
                obj = _take_prebuilt(key) or Machine.get().light_object(ir_text)
            write_cached(key, obj, kind)
        elif kind == "kernel" and pending is None:
            STATS["disk_hits"] += 1
        _unlinked[key] = obj        # (a call of another thread meanwhile takes it)
    try:
        if before_link is not None:
            before_link()
    except BaseException:
        with _lock:
            _unlinked.pop(key, None)
        raise
    with _lock:
        _unlinked.pop(key, None)    # (in the section that links: no gap to compile again)
        hit = _memory.get(key)      # linked by another thread meanwhile
        if hit is not None:
            STATS["memory_hits"] += 1
            return hit[1], hit[0]
        image = elf.Image(unpack_objects(obj) if kind == "kernel" else obj)
        try:
            address = image.address(symbol)
        except KeyError:
            raise RuntimeError(f"tex: symbol {symbol} missing from its compiled object") \
                from None
        if kind == "kernel":
            remember(key, (image, address))
        return address, image


def remember(key, entry):
    """Keep a kernel's (image, address) in the memory cache (under _lock), dropping the
    least recently used beyond kernel_cache_size(): unmapped when no compiled function
    uses it."""
    _memory[key] = entry
    while len(_memory) > kernel_cache_size():
        _memory.popitem(last=False)
