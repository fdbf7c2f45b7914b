"""A large LLVM module as two, compiled at once on two cores (jit.compile_module).

A kernel's module holds its entry point, the body (inlined into it), internal helpers
(vector math) and its outlined parallel regions, `<kernel>.parN`, which only the thread
runtime calls, through pointers the body or another region hands it. The regions are
the natural cut: nothing inlines them, so moving some to a second module changes no
code, and tex's loader (elf.Image) links the two objects into one image.
"""
import re

# a module larger than this (IR text) is compiled as two, in this process and in the
# compiler process at once: a matmul's 440 KB, 340 ms of LLVM on Zen 5, -> 200 + 140 ms
# side by side; smaller ones are not worth the second process
SPLIT_BYTES = 64 * 1024
# a kernel whose loop nest prints longer than this starts the compiler process while
# its IR is built (it is about to be split); an elementwise kernel's prints 0.4 KB
LARGE_NEST_BYTES = 8 * 1024

# LLVM's time on the kernel's body (inlined into its entry: the dispatch, allocations,
# serial loops) for a character of IR, against a region's: with the body counted once,
# the larger half of a matmul, a three-operand einsum and a batched product took
# 192/195/195 ms (Zen 5); counted 2.5 times, 164/150/153 ms
BODY_WEIGHT = 2.5

_REGION = re.compile(r'define internal void @"[^"]+\.par\d+"\(')
_BODY = re.compile(r'define internal \S+ @"[^"]+\.body"\(')
_SIGNATURE = re.compile(r'define internal (\S+) (@"[^"]+")\(([^)]*)\)')


def split_module(ir_text):
    """The module as [rest, parallel regions] when it is large: the regions are split
    between the two modules, the largest moving until the second is as large as the
    first (the body weighted by BODY_WEIGHT); every region is external and declared in
    the module that does not define it (the loader resolves one object's references to
    the other's); declarations, external globals, metadata and internal helpers go to
    both. Anything else (a defined global, no region, a line this does not read) keeps
    one module."""
    if len(ir_text) < SPLIT_BYTES:
        return [ir_text]
    header, shared, defines = [], [], []
    lines, i = ir_text.split("\n"), 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("define "):
            j = lines.index("}", i)
            defines.append("\n".join(lines[i:j + 1]))
            i = j + 1
            continue
        if line.startswith("@") and " = external global " not in line:
            return [ir_text]                   # a defined global: one module owns it
        if line.startswith(("declare ", "@", "!")):
            shared.append(line)
        elif line.startswith(("; ModuleID", "target ")):
            header.append(line)
        elif line.strip():
            return [ir_text]                   # (attribute groups and the like)
        i += 1
    regions = [d for d in defines if _REGION.match(d)]
    declarations = {d: _declaration(d) for d in regions}
    if not regions or None in declarations.values():
        return [ir_text]
    rest = [d for d in defines if not _REGION.match(d)]
    moved, size = [], sum(len(d) * (BODY_WEIGHT if _BODY.match(d) else 1) for d in rest)
    for d in sorted(regions, key=len, reverse=True):
        if sum(map(len, moved)) < size:
            moved.append(d)
        else:
            rest.append(d)
            size += len(d)
    kept = [d for d in defines if d in rest]
    helpers = [d for d in kept if d.startswith("define internal ") and not
               _REGION.match(d) and not _BODY.match(d)]
    first = header + [declarations[d] for d in moved] + shared + _exported(kept)
    second = (header + [declarations[d] for d in kept if d in declarations] + shared
              + helpers + _exported(moved))
    return ["\n".join(first) + "\n", "\n".join(second) + "\n"]


def _exported(defines):
    """Regions external: the other module calls them."""
    return [d.replace("define internal ", "define ", 1) if _REGION.match(d) else d
            for d in defines]


def _declaration(define):
    """`declare` for a region, from its `define internal` line (None if unread)."""
    m = _SIGNATURE.match(define)
    if m is None:
        return None
    params = ", ".join(a.rsplit(" ", 1)[0] for a in m.group(3).split(", ")) \
        if m.group(3) else ""
    return f"declare {m.group(1)} {m.group(2)}({params})"
