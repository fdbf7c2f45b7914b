"""Load an x86-64 ELF relocatable object (what LLVM emits for a kernel) into executable
memory: tex's own loader, so that running a cached kernel needs neither llvmlite nor a
system linker (a warm start of a new process loads llvmlite's 27 ms of bindings for
nothing else).

Objects are emitted for the large code model with static relocations (jit.py's target
machine), so code reaches everything -- its constants, the thread runtime, libc and
libm -- through 64-bit absolute addresses: R_X86_64_64. The loader also handles the
PC-relative forms (PC32, PLT32, PC64) whose targets lie in the same image, and refuses
anything else with LoadError rather than run code it did not relocate.

An image is one anonymous mapping: executable sections, then read-only ones, then
writable ones (data, bss), each group page-aligned; relocations are applied to a copy
in Python memory, the copy goes into the mapping, and the mapping's pages get their
final protections (code read+execute, never writable and executable at once). Unwind
tables (.eh_frame) are not loaded: nothing unwinds through a kernel. The mapping is
unmapped when the Image is garbage-collected (not at exit, and never the thread
runtime's: `keep`); whoever calls its code keeps it alive.
"""
import ctypes
import mmap
import struct
import sys

PAGE = mmap.PAGESIZE
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR, SHF_TLS = 1, 2, 4, 0x400
STB_WEAK = 2
SHT_PROGBITS, SHT_SYMTAB, SHT_RELA, SHT_NOBITS = 1, 2, 4, 8
SHN_UNDEF, SHN_ABS, SHN_COMMON = 0, 0xFFF1, 0xFFF2
R_X86_64_64, R_X86_64_PC32, R_X86_64_PLT32, R_X86_64_PC64 = 1, 2, 4, 24
SKIPPED = (".eh_frame", ".note.GNU-stack")

_libc = ctypes.CDLL(None, use_errno=True)
_mmap = _libc.mmap
_mmap.restype = ctypes.c_void_p
_mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                  ctypes.c_long]
_mprotect = _libc.mprotect
_mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_munmap = _libc.munmap
_munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
MAP_FAILED = ctypes.c_void_p(-1).value


class LoadError(RuntimeError):
    """An object tex cannot load: not the kind LLVM emits for tex, or a symbol that
    nothing in this process defines."""


_defined = {}        # symbols other images export to later ones (the thread runtime's)
_libraries = []      # libc and the rest of the process, libm, libgcc_s: for undefined symbols


def define(name, address):
    """Make `name` resolve to `address` in every image loaded from now on."""
    _defined[name] = address


def _external(name, weak=False):
    """The address of a symbol that no image defines: the process's own (libc, libm,
    libgcc_s: LLVM calls its half-precision conversions, __extendhfsf2 and
    __truncsfhf2, on a CPU without F16C); 0 for a weak reference that nothing defines."""
    if name in _defined:
        return _defined[name]
    if not _libraries:
        _libraries.append(_libc)
        for soname, short in (("libm.so.6", "m"), ("libgcc_s.so.1", "gcc_s")):
            try:
                _libraries.append(ctypes.CDLL(soname))
            except OSError:
                from ctypes import util
                path = util.find_library(short)
                if path:
                    _libraries.append(ctypes.CDLL(path))
    for lib in _libraries:
        try:
            address = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
        except AttributeError:
            continue
        _defined[name] = address
        return address
    if weak:
        return 0
    raise LoadError(f"tex: a compiled kernel needs the symbol {name!r}, which this "
                    "process does not define")


def _round(n, align):
    return (n + align - 1) // align * align


class _Object:
    """One relocatable object's section headers and names."""

    def __init__(self, obj):
        self.data = obj
        (shoff,) = struct.unpack_from("<Q", obj, 0x28)
        shnum, shstrndx = struct.unpack_from("<HH", obj, 0x3C)
        self.sections = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + 64 * k)
                         for k in range(shnum)]
        for _, sh_type, _, _, offset, length, _, _, _, _ in self.sections:
            if sh_type != SHT_NOBITS and offset + length > len(obj):
                raise ValueError("a section extends past the end of the file")
        self.names_at = self.sections[shstrndx][4]

    def name(self, table_offset, at):
        start = table_offset + at
        return self.data[start:self.data.index(b"\0", start)].decode()

    def symbols(self):
        """(name, bind, section index, value) of every symbol, in table order."""
        for sh_name, sh_type, _, _, offset, length, link, _, _, _ in self.sections:
            if sh_type != SHT_SYMTAB:
                continue
            strings = self.sections[link][4]
            for st_name, info, _, shndx, value, _ in struct.iter_unpack(
                    "<IBBHQQ", self.data[offset:offset + length]):
                yield (self.name(strings, st_name) if st_name else ""), info >> 4, shndx, value


class Image:
    """Object files loaded and relocated together into one mapping: `address(name)` of
    their global symbols. A symbol one object defines is what the others' references to
    it resolve to (a kernel compiled as several modules, one per core, calls across
    them); anything else comes from `define` or the process (libc, libm)."""

    def __init__(self, objs):
        self.size, self.base, self.symbols, self.kept = 0, None, {}, False
        if isinstance(objs, (bytes, bytearray, memoryview)):
            objs = [objs]
        try:
            self._load([_Object(bytes(obj)) for obj in objs])
        except (struct.error, IndexError, ValueError) as err:
            raise LoadError(f"tex: a damaged object file ({err})") from None

    def address(self, name):
        """The address of the global symbol `name`; KeyError if the image lacks it."""
        return self.symbols[name]

    def _load(self, objects):
        # layout: (object, section) -> offset in the image, by protection group
        groups = ([], [], [])        # executable, read-only, writable
        for n, o in enumerate(objects):
            for k, (sh_name, sh_type, flags, _, _, _, _, _, _, _) in enumerate(o.sections):
                if flags & SHF_ALLOC and o.name(o.names_at, sh_name) not in SKIPPED:
                    if sh_type not in (SHT_PROGBITS, SHT_NOBITS) or flags & SHF_TLS:
                        raise LoadError(f"tex: an object section of type {sh_type:#x} "
                                        f"({o.name(o.names_at, sh_name)})")
                    groups[0 if flags & SHF_EXECINSTR else 2 if flags & SHF_WRITE
                           else 1].append((n, k))
        offsets, spans, size = {}, [], 0
        for prot, group in zip((mmap.PROT_READ | mmap.PROT_EXEC, mmap.PROT_READ,
                                mmap.PROT_READ | mmap.PROT_WRITE), groups):
            start = size
            for n, k in group:
                section = objects[n].sections[k]
                size = _round(size, max(section[8], 1))
                offsets[n, k] = size
                size += section[5]
            size = _round(size, PAGE)
            if size > start:
                spans.append((start, size - start, prot))
        size = max(size, PAGE)
        base = _mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE,
                     mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
        if base in (None, MAP_FAILED):
            raise MemoryError(f"tex: cannot map {size} bytes for a kernel "
                              f"(errno {ctypes.get_errno()})")
        self.base, self.size = base, size
        image = bytearray(size)
        for (n, k), at in offsets.items():
            _, sh_type, _, _, offset, length, _, _, _, _ = objects[n].sections[k]
            if sh_type == SHT_PROGBITS:
                image[at:at + length] = objects[n].data[offset:offset + length]
        # every object's globals first: the others' undefined references resolve to them
        for n, o in enumerate(objects):
            for name, bind, shndx, value in o.symbols():
                if bind and name and (n, shndx) in offsets:
                    self.symbols[name] = base + offsets[n, shndx] + value
        for n, o in enumerate(objects):
            values = self._values(o, n, offsets)
            for sh_name, sh_type, _, _, offset, length, _, info, _, _ in o.sections:
                if sh_type == SHT_RELA and (n, info) in offsets:
                    self._relocate(image, o.data[offset:offset + length], offsets[n, info],
                                   o.sections[info][5], values)
        ctypes.memmove(base, (ctypes.c_char * size).from_buffer(image), size)
        for start, length, prot in spans:
            if _mprotect(base + start, length, prot) != 0:
                raise OSError(ctypes.get_errno(), "tex: mprotect of a kernel's pages failed")

    def _values(self, obj, n, offsets):
        """The address of each of object n's symbols (by symbol index)."""
        values = []
        for name, bind, shndx, value in obj.symbols():
            if shndx == SHN_UNDEF:
                if not name:
                    values.append(0)
                elif name in self.symbols:
                    values.append(self.symbols[name])
                else:
                    values.append(_external(name, bind == STB_WEAK))
            elif shndx == SHN_ABS:
                values.append(value)
            elif shndx == SHN_COMMON or shndx >= 0xFF00:
                raise LoadError(f"tex: a symbol in special section {shndx:#x}")
            elif (n, shndx) in offsets:
                values.append(self.base + offsets[n, shndx] + value)
            else:
                values.append(None)           # in a section not loaded (.eh_frame)
        return values

    def _relocate(self, image, table, section_at, section_size, values):
        base = self.base
        for offset, info, addend in struct.iter_unpack("<QQq", table):
            if offset + 8 > section_size:
                raise ValueError("a relocation outside its section")
            kind, symbol = info & 0xFFFFFFFF, info >> 32
            target = values[symbol]
            if target is None:
                raise LoadError("tex: a relocation against a section that is not loaded")
            at = section_at + offset
            if kind == R_X86_64_64:
                struct.pack_into("<Q", image, at, (target + addend) & 0xFFFFFFFFFFFFFFFF)
            elif kind == R_X86_64_PC64:
                struct.pack_into("<q", image, at, target + addend - (base + at))
            elif kind in (R_X86_64_PC32, R_X86_64_PLT32):
                delta = target + addend - (base + at)
                if not -2 ** 31 <= delta < 2 ** 31:
                    raise LoadError("tex: a 32-bit relative reference out of range")
                struct.pack_into("<i", image, at, delta)
            else:
                raise LoadError(f"tex: relocation type {kind} is not one tex loads")

    def keep(self):
        """Never unmap this image (the thread runtime: its workers park in its code)."""
        self.kept = True

    def __del__(self, _munmap=_munmap, finalizing=sys.is_finalizing):
        # not at exit: the process's memory goes with it, and a thread may still be
        # inside the code
        if self.base is not None and not self.kept and not finalizing():
            _munmap(self.base, self.size)
            self.base = None
