"""The tuning database: what `tex.tune` found, kept under the kernel cache directory so
that `tex.compile(out)` in any later process uses it.

    <cache dir>/tune/<program>-<cpu>-t<threads>.json   {"entries": {size class: entry}}

`program` hashes the structure key of the program's unscheduled loop nest
(ir.structure_key: every statement, buffer, dtype and size, the names the schedule's
steps refer to included) with fast_math and fusion; `cpu` the target's name, vector
features and cache sizes (schedule/target.py); `threads` tex's thread count when it was
tuned (a plan's parallel loops and split-K parts that won on one thread may lose on
two: a compile looks up the entries of its own thread count). An entry holds the tuned stage, its size
class (each size's power-of-two bucket) and the plan (schedule/tuning.py; None when the
auto schedule won), with the times measured. A later compile of the same program on
the same CPU builds the schedule with every entry's plan as a specialization guarded by
its size class (the auto schedule for the other calls); with constant sizes, only the
entry of their class applies.
"""
import hashlib
import json
import os
import tempfile

from .target import target

MAX_ENTRIES = 4          # size classes a compile specializes for (the latest tuned)


def program_key(program, fast_math=True, fuse=True):
    from .ir import structure_key
    from .schedule import Schedule
    text = f"fast_math={fast_math} fuse={fuse}\n" + \
        structure_key(Schedule(program, fast_math).kernel())
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def cpu_key(machine=None):
    t = machine or target()
    vec = ",".join(sorted(f for f in t.feature_set if f.startswith(("avx", "fma", "sse"))))
    digest = hashlib.sha256(f"{vec} {t.caches}".encode()).hexdigest()[:8]
    return f"{t.cpu}-{digest}"


def class_name(cls):
    return ",".join(f"{name}:{lo}-{hi}" for name, lo, hi in cls) or "constant"


def _path(folder, program, fast_math, fuse, threads):
    return os.path.join(folder, "tune", f"{program_key(program, fast_math, fuse)}-"
                                        f"{cpu_key()}-t{int(threads)}.json")


def _read(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {"entries": {}}


def save(folder, program, fast_math, fuse, cls, entry, threads):
    """Record `entry` ({"stage", "plan", times...}) for size class `cls`, tuned on
    `threads` threads."""
    path = _path(folder, program, fast_math, fuse, threads)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = _read(path)
    data["entries"].pop(class_name(cls), None)          # the latest last (see MAX_ENTRIES)
    data["entries"][class_name(cls)] = dict(entry, size_class=[list(c) for c in cls])
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)                               # readers never see half a file
    return path


def lookup(folder, program, fast_math=True, fuse=True, cls=None, *, threads):
    """The entry for size class `cls` on `threads` threads, or with cls=None every
    entry: a list of entries."""
    if not os.path.isdir(os.path.join(folder, "tune")):
        return []                    # the common case: nothing tuned, nothing hashed
    entries = _read(_path(folder, program, fast_math, fuse, threads))["entries"]
    if cls is not None:
        e = entries.get(class_name(cls))
        return [e] if e else []
    return list(entries.values())[-MAX_ENTRIES:]


def tuned_schedule(folder, program, fast_math=True, fuse=True, *, threads):
    """The schedule `tex.compile(program)` uses on `threads` threads when the database
    has entries for it (None: the auto schedule). Constant sizes pick their own class's
    entry only."""
    entries = lookup(folder, program, fast_math, fuse, threads=threads)
    if program.sizes:
        tuned = [(e["stage"], tuple(map(tuple, e["size_class"])), e["plan"]) for e in entries
                 if e.get("plan") is not None]
    else:
        tuned = [(e["stage"], (), e["plan"]) for e in entries
                 if e.get("plan") is not None and not e["size_class"]][:1]
    if not tuned:
        return None
    from .tuning import build        # imported only when there is something to build
    return build(program, tuned, fast_math, fuse)
