"""The machine tex generates code for: one set of facts that the code generator and
every heuristic read (vector width, register file, caches, cores).

    target()            the current Target: the host's, unless overridden
    overriding(t)       a context in which target() is `t` (tests, benchmarks)
    named("haswell")    a known CPU's Target (TEX_CPU=haswell makes it the default;
                        TEX_CACHES=32K,256K,8M overrides the cache sizes)

The host's facts come from llvmlite (the CPU name and features, the same source the
code generator uses), /sys (the data caches of CPU 0) and the process's CPU affinity
(the cores). Nothing assumes AVX-512: a host without it gets 256- or 128-bit vectors.
"""
import contextlib
import functools
import os
import threading
from dataclasses import replace

import numpy as np

from tex.records import record


@record
class Target:
    """A CPU as code generation sees it."""
    cpu: str                 # LLVM's CPU name (znver3, skylake-avx512, ...)
    features: str            # LLVM's feature string: +avx2,+fma,-avx512f,...
    caches: tuple = ()       # ((level, bytes), ...): data and unified caches of one core
    cores: int = 1           # CPUs this process may use

    @functools.cached_property
    def feature_set(self):
        return frozenset(f[1:] for f in self.features.split(",") if f.startswith("+"))

    def has(self, feature):
        return feature in self.feature_set

    @property
    def vector_bits(self):
        """The vector register width: 512 (avx512f), 256 (avx2) or 128."""
        if self.has("avx512f"):
            return 512
        return 256 if self.has("avx2") else 128

    @property
    def vector_registers(self):
        """Architectural vector registers: 32 with AVX-512, else 16."""
        return 32 if self.has("avx512f") else 16

    def lanes(self, dtype):
        """Elements of `dtype` in one vector register."""
        return max(1, self.vector_bits // (8 * np.dtype(dtype).itemsize))

    @property
    def vnni_widths(self):
        """Widths (bits) of the vpdpbusd forms this CPU runs: 512 with avx512vnni, 256
        and 128 with avx512vnni + avx512vl or with avxvnni."""
        out = []
        if self.has("avx512vnni"):
            out.append(512)
        if (self.has("avx512vnni") and self.has("avx512vl")) or self.has("avxvnni"):
            out += [256, 128]
        return tuple(out)

    @property
    def codegen_features(self):
        """The features and the LLVM tuning flags tex's code wants. With VNNI,
        "+fast-dpwssd": an int32 sum of 16-bit products (every int8 and int16 matmul
        tile) runs as one vpdpwssd, not vpmaddwd + vpaddd. LLVM splits it on CPUs not so
        tuned (Intel's) to shorten the accumulator's dependence chain, which a register
        tile of 20-24 independent accumulators does not need, and the split doubles the
        uops on the two vector ports the tile's broadcasts also use: int8 1024^3 on one
        thread of Emerald Rapids, 51 -> 78 GOP/s."""
        return self.features + (",+fast-dpwssd" if self.vnni_widths else "")

    def narrowed(self, bits):
        """This CPU with vectors of at most `bits` bits (AVX-512 and AVX2 turned off as
        needed): code for it runs here, and heuristics see the narrower registers."""
        off = {512: (), 256: ("avx512f",), 128: ("avx512f", "avx2")}[bits]
        features = [f if f[1:] not in off else "-" + f[1:] for f in self.features.split(",")]
        return replace(self, features=",".join(features))

    def cache(self, level, default):
        """The size in bytes of this level's data cache, or `default` if unknown."""
        return dict(self.caches).get(level, default)


def host():
    """The machine this process runs on (read once)."""
    if not _host:
        cpu, features = (_probe[0] if _probe else llvm_host_cpu)()
        _host.append(Target(cpu, features, tuple(sorted(_cache_sizes().items())), _cores()))
    return _host[0]


def llvm_host_cpu():
    """(CPU name, features) of this host, as LLVM reports them."""
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


def use_host_probe(probe):
    """Let the backend answer `host()`'s question -- () -> (CPU name, features), LLVM's
    own answer, but remembered on disk (backends/llvm/jit.py's host_facts) so that a
    warm start need not load LLVM to ask it."""
    _probe[:] = [probe]


_host = []
_probe = []
_local = threading.local()


def target():
    """The Target code is generated for: an override in effect, else TEX_CPU's (and
    TEX_CACHES's), else the host."""
    override = getattr(_local, "override", None)
    if override is not None:
        return override
    env = (os.environ.get("TEX_CPU", ""), os.environ.get("TEX_CACHES", ""))
    return _from_environment(*env) if any(env) else host()


# ---------------------------------------------------------------- named CPUs

_AVX2 = "+sse4.2,+avx,+avx2,+fma,+bmi2,+f16c,-avx512f,-avx512vl,-avx512bw,-avx512vnni"
_AVX512 = "+sse4.2,+avx,+avx2,+fma,+bmi2,+f16c,+avx512f,+avx512vl,+avx512bw,+avx512dq,+avx512cd"
_FAMILIES = {
    "+sse2,-sse4.2,-avx,-avx2,-fma,-avx512f": ("x86-64",),
    "+sse4.2,-avx,-avx2,-fma,-avx512f": ("x86-64-v2", "nehalem", "westmere"),
    "+sse4.2,+avx,-avx2,-fma,-avx512f": ("sandybridge", "ivybridge"),
    _AVX2: ("x86-64-v3", "haswell", "broadwell", "skylake", "znver1", "znver2", "znver3"),
    _AVX2 + ",+avxvnni": ("alderlake", "raptorlake", "meteorlake", "arrowlake"),
    _AVX512 + ",-avx512vnni": ("x86-64-v4", "skylake-avx512", "cannonlake"),
    _AVX512 + ",+avx512vnni": ("cascadelake", "cooperlake", "icelake-client",
                               "icelake-server", "tigerlake", "rocketlake", "sapphirerapids",
                               "emeraldrapids", "graniterapids", "znver4", "znver5"),
}
CPU_FEATURES = {cpu: features for features, cpus in _FAMILIES.items() for cpu in cpus}


def named(cpu, caches=None):
    """The Target of a known CPU (LLVM's name for it: haswell, znver3, skylake-avx512,
    ...): its vector features from the table above, the given caches (((level, bytes),
    ...), default the host's) and the host's cores."""
    if cpu not in CPU_FEATURES:
        raise ValueError(f"TEX_CPU={cpu!r} is not a CPU tex knows (one of "
                         f"{', '.join(sorted(CPU_FEATURES))})")
    h = host()
    return Target(cpu, CPU_FEATURES[cpu], tuple(caches) if caches is not None else h.caches,
                  h.cores)


@functools.lru_cache(maxsize=8)
def _from_environment(cpu, caches):
    base = named(cpu) if cpu else host()
    return replace(base, caches=_parse_caches(caches)) if caches else base


def _parse_caches(text):
    """`32K,512K,32M` -> ((1, 32768), (2, 524288), (3, 33554432)): L1, L2, L3 sizes."""
    out = []
    for level, part in enumerate(text.split(","), start=1):
        part = part.strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(part[-1:], 1)
        try:
            size = int(part.rstrip("KMG")) * scale
        except ValueError:
            raise ValueError(f"TEX_CACHES={text!r}: sizes are like 32K,512K,32M "
                             "(L1, L2, L3)") from None
        if size <= 0:
            raise ValueError(f"TEX_CACHES={text!r}: a cache size must be positive")
        out.append((level, size))
    return tuple(out)


def missing_here(t):
    """The vector features `t`'s code uses that this host lacks (code for it would stop
    the process with an illegal instruction), as a sorted list; [] when it runs here."""
    isa = {"avx", "avx2", "fma", "f16c", "bmi2", "avx512f", "avx512vl", "avx512bw",
           "avx512dq", "avx512cd", "avx512vnni", "avxvnni", "sse4.2"}
    return sorted((t.feature_set & isa) - host().feature_set)


@contextlib.contextmanager
def overriding(t):
    """Generate code and derive heuristics for `t` inside the block (this thread)."""
    saved = getattr(_local, "override", None)
    _local.override = t
    try:
        yield t
    finally:
        _local.override = saved


def _cache_sizes():
    """{level: bytes} of the data caches of CPU 0, from /sys (empty when unavailable)."""
    out = {}
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return out
    for entry in entries:
        path = os.path.join(base, entry)
        try:
            with open(os.path.join(path, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(path, "level")) as f:
                level = int(f.read())
            with open(os.path.join(path, "size")) as f:
                size = f.read().strip()
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified"):
            scale = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(size[-1], 1)
            out[level] = int(size.rstrip("KMG")) * scale
    return out


def _cores():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)
