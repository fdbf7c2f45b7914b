"""Rich display in notebooks: the HTML behind `_repr_html_` of tensors, definitions,
programs, schedules, stages and compiled functions.

Everything here is plain text made into HTML: the same index notation as `repr`, the
loop nest as `print(s)` shows it. A compiled function's LLVM IR and assembly sit in
collapsed `<details>` blocks, generated when the function is displayed (never at compile
time) and cut at `MAX_LINES` lines; the assembly of a kernel whose IR is longer than
`ASM_IR_LINES` is not generated for display (that takes LLVM about a second), only named.
"""
from html import escape

MAX_LINES = 400        # lines of IR or assembly shown in a display
ASM_IR_LINES = 2500    # a longer IR: its assembly is not generated for a display

_STYLE = ("font-family: var(--jp-code-font-family, monospace); font-size: 12px; "
          "line-height: 1.35")


def code(text):
    return f"<code>{escape(str(text))}</code>"


def pre(text):
    return f'<pre style="{_STYLE}; margin: 4px 0">{escape(str(text))}</pre>'


def box(title, *parts):
    body = "\n".join(p for p in parts if p)
    return f'<div class="tex-display"><div><b>{title}</b></div>\n{body}\n</div>'


def table(header, rows):
    """An HTML table; cells are text (escaped) unless given as ("html", markup)."""
    def cell(c, tag):
        return f"<{tag}>" + (c[1] if isinstance(c, tuple) else escape(str(c))) + f"</{tag}>"
    head = "<tr>" + "".join(cell(h, "th") for h in header) + "</tr>"
    body = "".join("<tr>" + "".join(cell(c, "td") for c in r) + "</tr>" for r in rows)
    return f'<table style="text-align: left">{head}{body}</table>'


def details(summary, text, max_lines=MAX_LINES):
    """A collapsed block of text, cut at `max_lines` lines."""
    lines = text.splitlines()
    if len(lines) > max_lines:
        lines = lines[:max_lines] + [f"... {len(text.splitlines()) - max_lines} more lines"]
    return f"<details><summary>{escape(summary)}</summary>{pre(chr(10).join(lines))}</details>"


def tensor_html(t):
    return box(f"input tensor {escape(t.name)}", f"<div>{code(t.type_str)}</div>")


def _extents_table(d):
    own = [x for x in d.extents]
    from .printing import format_size
    return table(["index", "extent", "role"],
                 [(str(x), format_size(d.extents[x]),
                   "output" if x in d.indices else "reduced") for x in own])


def definition_html(d):
    from .program import Program
    try:
        prog = Program(d)
    except ValueError as err:           # a program tex refuses: say why, show the rest
        return box(f"definition {escape(d.name)}: {code(d.type_str)}", pre(d.notation),
                   _extents_table(d), f"<div><b>cannot be compiled:</b> {escape(str(err))}"
                                      "</div>")
    lines = [x.notation for x in prog.definitions]
    args = ", ".join(t.name for t in prog.inputs)
    return box(f"definition {escape(d.name)}: {code(d.type_str)}",
               pre("\n".join(lines)),
               _extents_table(d),
               f"<div>call: {code(f'{d.name}({args})')} (compiled on the first call; "
               f"inputs in order of first use, or by name: {code(prog.signature())})</div>")


def program_html(p):
    return box(f"program {code(p.signature())}",
               pre("\n".join(d.notation for d in p.definitions)))


def schedule_html(s):
    p = s.program
    hosted = {}
    for producer, consumer in s._hosted_by.items():
        hosted.setdefault(consumer, []).append(producer.name)
    rows = []
    for st in s.stages:
        if st.definition in s._hosted_by:
            continue
        loops = ", ".join(_loop_text(h) for h in st.loops)
        inside = ", ".join(hosted.get(st.definition, [])) or ""
        specs = len(st.specializations)
        rows.append((st.name, ("html", code(st.definition.notation)), loops, inside,
                     specs or ""))
    history = "".join(f"<li>{code(repr(step))}</li>" for step in s.history)
    return box(f"schedule of {escape(', '.join(o.name for o in p.outputs))} "
               f"{code(p.signature())}",
               table(["kernel stage", "computes", "loops (outermost first)",
                      "computed inside", "specializations"], rows),
               "<div>loop nest:</div>" + pre(str(s)),
               f"<div>history ({len(s.history)} step{'s' if len(s.history) != 1 else ''},"
               f" replayable on a fresh schedule: "
               f"{code(f'tex.schedule({_outputs(p)}).replay(s.history)')}):</div>" +
               (f"<ol>{history}</ol>" if history else "<div><i>no steps: the default "
                                                      "loop nest</i></div>"))


def _outputs(p):
    names = ", ".join(o.name for o in p.outputs)
    return names if len(p.outputs) == 1 else f"({names})"


def _loop_text(handle):
    kind = handle.kind
    notes = [kind] if kind and kind != "serial" else []
    if handle.is_reduction:
        notes.append("reduction")
    return handle.name + (f" ({', '.join(notes)})" if notes else "")


def stage_html(stage):
    loops = ", ".join(_loop_text(h) for h in stage.loops)
    return box(f"stage {escape(stage.name)} of a schedule",
               pre(stage.definition.notation),
               f"<div>loops: {escape(loops)}</div>",
               pre(str(stage)))


def compiled_html(f):
    from .printing import format_size
    p = f.program
    rows = [(b.name, f"({', '.join(map(format_size, b.shape))})", b.dtype.name,
             format_size(_nbytes(b)), b.scope.value) for b in f.buffers]
    params = ", ".join(f.param_names)
    ir = f.llvm_ir
    ir_lines = len(ir.splitlines())
    if f._asm is not None or ir_lines <= ASM_IR_LINES:
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
    import sympy as sp
    return sp.Mul(buf.dtype.itemsize, *buf.shape)
