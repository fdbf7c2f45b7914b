"""Rich display of a compiled function (`_repr_html_`): its signature, the buffers it
allocates, the loop nest, and the LLVM IR and assembly (generated when shown)."""
import tex.symbolic as sym

from tex import html
from tex.html import box, code, details, escape, pre, table
from tex.indices import format_size


def compiled_html(f):
    from ...scheduler.printer import HOLE, format_nest
    from .codegen import allocated_buffers
    p = f.program
    # the last call's build, whose nests no call has needed yet are holes (`...`):
    # lowering them all for the display took 0.9 s (f.loop_nest and f.buffers have them)
    kernel = f._sig.kernel
    rows = [(b.name, f"({', '.join(map(format_size, b.shape))})", b.dtype.name,
             format_size(_nbytes(b)), b.scope.value) for b in allocated_buffers(kernel)]
    nest = format_nest(kernel)
    params = ", ".join(f.param_names)
    # the IR of the kernel as built so far: the nests no call has needed yet are left
    # out (f.llvm_ir has them all; for a symbolic matmul, 4 MB of text)
    # (a nest a later call needed is a build of its own: the one the last call ran is
    # shown)
    built, builds = f._sig.built, len(f._sig.builds)
    ir = built.make_ir()
    ir_lines = len(ir.splitlines())
    left = len(f._sig.deferred)
    what = (f"LLVM IR ({ir_lines} lines" +
            (f" of the last call's build, one of {builds}" if builds > 1 else "") +
            (f"; {left} specialized nests not built yet: f.llvm_ir has every nest)"
             if left else ")"))
    if f._asm is not None or (ir_lines <= html.ASM_IR_LINES and not built.deferred):
        asm = details(f"assembly ({len(f.asm.splitlines())} lines)", f.asm)
    else:
        asm = (f"<div>assembly: not generated for display ({ir_lines} lines of IR); "
               f"{code('f.asm')} has it</div>")
    return box(f"compiled function {escape(f.symbol)}",
               f"<div>{code(f.symbol + p.signature())}</div>",
               f"<div>call-time parameters: {code(params)}</div>" if params else "",
               "<div>buffers it allocates (outputs excluded" +
               (f"; in the nests lowered so far, {code('f.buffers')} has every nest's"
                if HOLE in nest else "") + "):</div>" +
               (table(["buffer", "shape", "dtype", "bytes", "scope"], rows) if rows
                else "<div><i>none</i></div>"),
               "<div>loop nest" + (" (<code>...</code>: not lowered yet, "
                                   f"{code('f.loop_nest')} has every nest)"
                                   if HOLE in nest else "") + ":</div>" + pre(nest),
               details(what, ir), asm)



def _nbytes(buf):
    return sym.Mul(buf.dtype.itemsize, *buf.shape)
