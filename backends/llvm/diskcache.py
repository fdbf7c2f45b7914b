"""The kernel cache on disk (jit.py's): private folder, HMAC-signed entries, atomic
writes.

The cache is trusted only as far as it is private: its folder is created 0700, and a
folder or file owned by another user, or writable by group or others, is not read (tex
then compiles in memory and says so once). A file holds a magic header, the payload's
length and an HMAC-SHA256 of the payload and the entry's key under a secret kept in the
folder (`.key`, 0600), then the object bytes. A file that fails any check, or whose
payload is not an x86-64 ELF relocatable object, is recompiled and rewritten: bytes that
this user's tex did not write are never mapped as code. Writes go to a temporary file in
the same folder and are renamed into place, so concurrent writers never leave a torn
file. Entries, the key and folders are opened without following links and without
waiting (a FIFO in their place is refused, not read).
"""
import collections
import hashlib
import hmac
import os
import stat
import struct
import warnings

MAGIC = b"TEXOBJ2\n"
DIGEST_BYTES = 32
STATS = collections.Counter()        # "compiled", "disk_hits", "memory_hits", "corrupt",
#                                      "prebuilt" (the runtime compiled ahead: prebuild)


def cache_dir():
    """TEX_CACHE_DIR, else $XDG_CACHE_HOME/tex, else ~/.cache/tex."""
    if os.environ.get("TEX_CACHE_DIR"):
        return os.environ["TEX_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tex")


_warned = set()


# no symbolic link followed, and no wait for a writer (a FIFO put where an entry or the
# key belongs: the regular-file check after the open refuses it)
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK


def _distrust(path, why):
    """Say once per folder why the disk cache is not used; returns None."""
    if path not in _warned:
        _warned.add(path)
        warnings.warn(f"tex: not using the kernel cache at {path}: {why}; kernels are "
                      "compiled in memory (set TEX_CACHE_DIR to a private folder)",
                      RuntimeWarning, stacklevel=4)
    return None


def _private(st):
    """Owned by this user and not writable by group or others."""
    return st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def trusted_dir():
    """The cache folder, created private (0700) if absent, or None when it cannot be
    trusted (another owner, writable by others, not a folder) or created."""
    path = cache_dir()
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
    except OSError as err:
        return _distrust(path, f"it cannot be created ({err.strerror})")
    if not stat.S_ISDIR(st.st_mode):
        return _distrust(path, "it is not a folder")
    if not _private(st):
        return _distrust(path, "it is owned by another user or writable by others")
    return path


def _secret(folder):
    """The folder's HMAC key: 32 random bytes in `.key` (0600), made on first use. Made
    in a temporary file and linked into place, so that concurrent first uses agree."""
    path = os.path.join(folder, ".key")
    for _ in range(3):       # (read; or make, then read; or replace a damaged one)
        try:
            fd = os.open(path, _READ_FLAGS)
        except FileNotFoundError:
            fd = None
        except OSError as err:
            return _distrust(folder, f"its key file cannot be read ({err.strerror})")
        if fd is not None:
            try:
                with os.fdopen(fd, "rb") as f:
                    st = os.fstat(f.fileno())
                    key = f.read() if stat.S_ISREG(st.st_mode) else b""
            except OSError as err:
                return _distrust(folder, f"its key file cannot be read ({err.strerror})")
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
                return _distrust(folder, "its key file is not a file private to this user")
            if len(key) == 32:
                return key
            # damaged (a crash while it was written, a full disk): every entry signed
            # with it is unreadable anyway; a new key replaces it
            try:
                os.unlink(path)
            except FileNotFoundError:        # another process replaced it first
                pass
            except OSError as err:
                return _distrust(folder, f"its key file is damaged and cannot be "
                                         f"replaced ({err.strerror})")
            continue
        import tempfile              # here: a warm start writes nothing
        try:
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".key-")
        except OSError as err:       # a read-only folder (or file system)
            return _distrust(folder, f"its key file cannot be made ({err.strerror})")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(os.urandom(32))
            os.link(tmp, path)           # fails if another process made the key first
        except FileExistsError:
            pass
        except OSError as err:
            return _distrust(folder, f"its key file cannot be made ({err.strerror})")
        finally:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return None


def _digest(secret, key, payload):
    return hmac.new(secret, key.encode() + b"\0" + payload, hashlib.sha256).digest()


def _is_relocatable_object(payload):
    """A structural check before LLVM parses the bytes: a 64-bit little-endian x86-64
    ELF relocatable object whose section header table lies inside it."""
    if len(payload) < 64 or payload[:6] != b"\x7fELF\x02\x01":
        return False
    e_type, e_machine = struct.unpack_from("<HH", payload, 16)
    (e_shoff,) = struct.unpack_from("<Q", payload, 0x28)
    e_shentsize, e_shnum = struct.unpack_from("<HH", payload, 0x3A)
    return (e_type == 1 and e_machine == 62 and e_shentsize == 64
            and 0 < e_shoff and e_shoff + e_shnum * e_shentsize <= len(payload))


PARTS = b"tex-parts\0"      # a kernel compiled as several modules: their objects


def pack_objects(objs):
    """One cache payload for a kernel's objects (a single object as itself)."""
    if len(objs) == 1:
        return objs[0]
    return (PARTS + struct.pack("<I", len(objs))
            + b"".join(struct.pack("<Q", len(o)) for o in objs) + b"".join(objs))


def unpack_objects(payload):
    """The objects of a payload (`pack_objects`); ValueError if it is damaged."""
    if not payload.startswith(PARTS):
        return [payload]
    at = len(PARTS)
    (count,) = struct.unpack_from("<I", payload, at)
    lengths = struct.unpack_from(f"<{count}Q", payload, at + 4)
    at += 4 + 8 * count
    if count < 2 or at + sum(lengths) != len(payload):
        raise ValueError("a damaged multi-object payload")
    out = []
    for n in lengths:
        out.append(payload[at:at + n])
        at += n
    return out


def _is_kernel_payload(payload):
    """One ELF relocatable object, or several packed by `pack_objects`."""
    try:
        objs = unpack_objects(payload)
    except (ValueError, struct.error):
        return False
    return all(_is_relocatable_object(o) for o in objs)


def _cache_path(folder, key, kind):
    if kind == "kernel":
        return os.path.join(folder, key[:2], key + ".o")
    return os.path.join(folder, kind, key + ".o")


def read_cached(key, kind="kernel", check=_is_kernel_payload):
    """The cached object bytes (or another payload that passes `check`), or None if
    absent, untrusted or damaged (damaged files are removed)."""
    folder = trusted_dir()
    secret = folder and _secret(folder)
    if not secret:
        return None
    path = _cache_path(folder, key, kind)
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                return None                  # (a folder in an entry's place: no entry)
            if not _private(st):
                return _distrust(path, "the entry is owned by another user or writable "
                                       "by others")
            blob = f.read()
    except OSError:
        return None
    head = len(MAGIC) + 8 + DIGEST_BYTES
    ok = blob[:len(MAGIC)] == MAGIC and len(blob) >= head
    if ok:
        (length,) = struct.unpack("<Q", blob[len(MAGIC):len(MAGIC) + 8])
        digest, payload = blob[len(MAGIC) + 8:head], blob[head:]
        ok = (length == len(payload) and hmac.compare_digest(digest, _digest(secret, key, payload))
              and check(payload))
    if not ok:
        STATS["corrupt"] += 1
        try:
            os.unlink(path)
        except OSError:
            pass
        return None
    return payload


def write_cached(key, obj, kind="kernel"):
    """Atomically store object bytes; a failure to write only loses the cache entry."""
    folder = trusted_dir()
    secret = folder and _secret(folder)
    if not secret:
        return
    path = _cache_path(folder, key, kind)
    tmp = None
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        import tempfile
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC + struct.pack("<Q", len(obj)) + _digest(secret, key, obj) + obj)
        os.replace(tmp, path)
    except OSError:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


# ---------------------------------------------------------------- loading
