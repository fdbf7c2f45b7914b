"""Rich display of a compiled function (`_repr_html_`): its signature, the buffers it
allocates, the loop nest, and the LLVM IR and assembly (generated when shown)."""
import sympy as sp

from tex import html
from tex.html import box, code, details, escape, pre, table
from tex.indices import format_size


def compiled_html(f):
    p = f.program
    rows = [(b.name, f"({', '.join(map(format_size, b.shape))})", b.dtype.name,
             format_size(_nbytes(b)), b.scope.value) for b in f.buffers]
    params = ", ".join(f.param_names)
    ir = f.llvm_ir
    ir_lines = len(ir.splitlines())
    if f._asm is not None or ir_lines <= html.ASM_IR_LINES:
        asm = details(f"assembly ({len(f.asm.splitlines())} lines)", f.asm)
    else:
        asm = (f"<div>assembly: not generated for display ({ir_lines} lines of IR); "
               f"{code('f.asm')} has it</div>")
    return box(f"compiled function {escape(f.symbol)}",
               f"<div>{code(f.symbol + p.signature())}</div>",
               f"<div>call-time parameters: {code(params)}</div>" if params else "",
               "<div>buffers it allocates (outputs excluded):</div>" +
               (table(["buffer", "shape", "dtype", "bytes", "scope"], rows) if rows
                else "<div><i>none</i></div>"),
               "<div>loop nest:</div>" + pre(f.loop_nest),
               details(f"LLVM IR ({ir_lines} lines)", ir), asm)



def _nbytes(buf):
    return sp.Mul(buf.dtype.itemsize, *buf.shape)
