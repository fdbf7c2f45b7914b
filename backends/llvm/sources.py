"""Digests of tex's own source files for the cache keys, read once per change, not once
per process.

The kernel cache's key covers the code generator's source (jit.fingerprint) and a warm
start's call-level key covers the whole package's (warm.call_key): hashing the package's
920 KB took 4-9 ms of every new process's first call. Here the digest of a list of files
is kept in the disk cache under their stat signature -- each file's path, inode, size,
mtime and ctime, as git's index keeps them -- and read back while that signature holds.
Any write, rename or replacement of a file moves its ctime (which no tool sets back,
unlike an mtime kept by `cp -p`, tar or a reproducible wheel), so a changed file always
has a new signature and its contents are hashed again. A file written within RACY_S of
the stat could still change within the same timestamp tick, so a digest that covers one
is used but not stored (git's "racily clean" entries).
"""
import hashlib
import importlib.util
import os
import time

VERSION = "tex-sources-1"
RACY_S = 2.0


def content_digest(files):
    """sha256 of the (name, path) pairs' names and contents, in the given order."""
    h = hashlib.sha256()
    for name, path in files:
        with open(path, "rb") as f:
            h.update(name.encode() + b"\0" + f.read() + b"\0")
    return h.hexdigest()


def python_files(folders):
    """(name relative to its folder, path) of every .py file under `folders`, in a fixed
    order."""
    out = []
    for folder in folders:
        folder = os.path.abspath(folder)
        skip = len(os.path.join(folder, ""))        # the folder's part of each path
        for root, dirs, names in sorted(os.walk(folder)):
            dirs.sort()
            for name in sorted(names):
                if name.endswith(".py"):
                    path = os.path.join(root, name)
                    out.append((path[skip:], path))
    return out


def codegen_files():
    """The code generator's source (this folder's modules, schedule/stage.py, whose
    reduction identities it uses, and schedule/vector_plan.py, whose plans carry more
    than a printed nest shows): a change to it changes the IR a loop nest turns into,
    so its digest is part of every cache key."""
    # found, not imported: they import the scheduler, which a warm start never needs
    package = __name__.rsplit(".", 3)[0] + ".scheduler."
    scheduler = [importlib.util.find_spec(package + m).origin for m in ("stage", "vector_plan")]
    folder = os.path.dirname(os.path.abspath(__file__))
    paths = [os.path.join(folder, n) for n in sorted(os.listdir(folder)) if n.endswith(".py")]
    return [(os.path.basename(path), path) for path in paths + scheduler]


def _is_digest(payload):
    return len(payload) == 64 and all(c in b"0123456789abcdef" for c in payload)


def digest(files, read=None, write=None):
    """content_digest(files), taken from the cache while the files' stat signature is
    unchanged: `read(key, kind, check=)` and `write(key, payload, kind)` are the disk
    cache's (jit.read_cached / write_cached); without them the files are read."""
    if read is None:
        return content_digest(files)
    now = time.time_ns()
    signature = hashlib.sha256(VERSION.encode())
    racy = False
    try:
        for name, path in files:
            st = os.stat(path)
            signature.update(f"{name}\0{os.path.abspath(path)}\0{st.st_ino}\0{st.st_size}\0"
                             f"{st.st_mtime_ns}\0{st.st_ctime_ns}\n".encode())
            racy |= now - max(st.st_mtime_ns, st.st_ctime_ns) < RACY_S * 1e9
    except OSError:
        return content_digest(files)
    key = signature.hexdigest()
    known = read(key, "sources", check=_is_digest)
    if known is not None:
        return known.decode()
    value = content_digest(files)
    if not racy:
        write(key, value.encode(), "sources")
    return value
