"""From LLVM IR text to a callable address: optimize, emit an object, cache it, load it.

Every kernel takes one path: key -> (memory | disk cache | IR -> O3 + codegen) ->
object bytes -> an MCJIT engine of its own -> function address. The key covers
everything that changes the machine code: the kernel's loop nest (its structure_key
text, from which code generation is deterministic, so a cached kernel never generates
IR), the entry symbol and fast-math flag, the code generator's own source, the llvmlite
and LLVM versions, and the host CPU name and features. A cache file holds a magic header, the
payload's length and SHA-256, then the object bytes; a file that fails any check is
recompiled and rewritten. Writes go to a temporary file in the same folder and are
renamed into place, so concurrent writers never leave a torn file.

Code is generated for the CPU and features llvmlite reports for this host; nothing is
hard-coded (a machine without AVX-512 gets AVX2 code).
"""
import collections
import ctypes.util
import hashlib
import os
import struct
import tempfile
import threading

import llvmlite
import llvmlite.binding as llvm

CODEGEN_VERSION = "tex-codegen-2"


def _codegen_source_hash():
    """The code generator's source (this folder's modules, and schedule/stage.py, whose
    reduction identities it uses): a change to it changes the IR a loop nest turns
    into, so it is part of every cache key."""
    from ...scheduler import stage
    folder = os.path.dirname(os.path.abspath(__file__))
    paths = [os.path.join(folder, n) for n in sorted(os.listdir(folder)) if n.endswith(".py")]
    h = hashlib.sha256()
    for path in paths + [stage.__file__]:
        with open(path, "rb") as f:
            h.update(os.path.basename(path).encode() + b"\0" + f.read())
    return h.hexdigest()[:16]


CODEGEN_SOURCE = _codegen_source_hash()
MAGIC = b"TEXOBJ1\n"
STATS = collections.Counter()        # "compiled", "disk_hits", "memory_hits", "corrupt"
_lock = threading.Lock()
_memory = {}                         # key -> (engine, address)


class Host:
    """The host target, initialised once per process."""
    _instance = None

    def __init__(self):
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        self.cpu = llvm.get_host_cpu_name()
        self.features = llvm.get_host_cpu_features().flatten()
        self.triple = llvm.get_process_triple()
        self.target = llvm.Target.from_triple(self.triple)
        self.machine = self.new_machine()
        self.datalayout = str(self.machine.target_data)
        # libgomp reads its wait policy when it loads: idle workers must sleep, not spin,
        # or they steal the cores of numpy's BLAS threads between our calls
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        for lib in ("gomp", "m"):
            path = ctypes.util.find_library(lib)
            if path:
                llvm.load_library_permanently(path)

    def new_machine(self):
        return self.target.create_target_machine(cpu=self.cpu, features=self.features,
                                                 opt=3, codemodel="jitdefault")

    @classmethod
    def get(cls):
        if cls._instance is None:
            with _lock:
                if cls._instance is None:
                    cls._instance = Host()
        return cls._instance

    def has_feature(self, name):
        return f"+{name}" in self.features.split(",")

    @property
    def fingerprint(self):
        return "|".join([CODEGEN_VERSION, CODEGEN_SOURCE, llvmlite.__version__,
                         ".".join(map(str, llvm.llvm_version_info)), self.cpu, self.features])


def cache_dir():
    """TEX_CACHE_DIR, else $XDG_CACHE_HOME/tex, else ~/.cache/tex."""
    if os.environ.get("TEX_CACHE_DIR"):
        return os.environ["TEX_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tex")


def cache_key(text):
    """The cache key of a kernel described by `text` (see the module docstring)."""
    host = Host.get()
    return hashlib.sha256((host.fingerprint + "\n" + text).encode()).hexdigest()


def optimized_module(ir_text):
    """Parse, verify and optimize at O3 with the new pass manager."""
    host = Host.get()
    mod = llvm.parse_assembly(ir_text)
    mod.triple, mod.data_layout = host.triple, host.datalayout
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(host.machine, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


def compile_object(ir_text):
    STATS["compiled"] += 1
    return Host.get().machine.emit_object(optimized_module(ir_text))


def assembly(ir_text):
    return Host.get().machine.emit_assembly(optimized_module(ir_text))


def _cache_path(key):
    return os.path.join(cache_dir(), key[:2], key + ".o")


def read_cached(key):
    """The cached object bytes, or None if absent or damaged (damaged files are removed)."""
    path = _cache_path(key)
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError:
        return None
    head = len(MAGIC) + 8 + 32
    ok = blob[:len(MAGIC)] == MAGIC and len(blob) >= head
    if ok:
        (length,) = struct.unpack("<Q", blob[len(MAGIC):len(MAGIC) + 8])
        digest, payload = blob[len(MAGIC) + 8:head], blob[head:]
        ok = length == len(payload) and hashlib.sha256(payload).digest() == digest
    if not ok:
        STATS["corrupt"] += 1
        try:
            os.unlink(path)
        except OSError:
            pass
        return None
    return payload


def write_cached(key, obj):
    """Atomically store object bytes; a failure to write only loses the cache entry."""
    path = _cache_path(key)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC + struct.pack("<Q", len(obj)) + hashlib.sha256(obj).digest() + obj)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except (OSError, UnboundLocalError):
            pass


def load(text, symbol, make_ir=None):
    """The address of `symbol` in the kernel described by `text`, compiling only on a
    cache miss: `make_ir()` gives the LLVM IR then (default: `text` is the IR).
    Returns (address, engine); keep the engine alive as long as the address is used."""
    key = cache_key(text)
    with _lock:
        hit = _memory.get(key)
        if hit is not None:
            STATS["memory_hits"] += 1
            return hit[1], hit[0]
        obj = read_cached(key)
        if obj is None:
            obj = compile_object(make_ir() if make_ir is not None else text)
            write_cached(key, obj)
        else:
            STATS["disk_hits"] += 1
        engine = _engine()
        engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        engine.finalize_object()
        address = engine.get_function_address(symbol)
        if not address:
            raise RuntimeError(f"tex: symbol {symbol} missing from its compiled object")
        _memory[key] = (engine, address)
        return address, engine


def _engine():
    host = Host.get()
    empty = llvm.parse_assembly("")
    empty.triple = host.triple
    # an engine takes ownership of its target machine and frees it when it is disposed:
    # give each engine its own, never the shared host.machine (use after free, double free)
    return llvm.create_mcjit_compiler(empty, host.new_machine())
