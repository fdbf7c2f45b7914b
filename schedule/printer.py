"""Loop nests as readable pseudo-code: the vocabulary of golden tests and errors.

    for i in 0..M:                       # parallel
      C_acc = 0.0
      for k in 0..K:                     # reduction
        C_acc += A[i, k] * B[k, j]
      C[i, j] = C_acc

Loop variables are objects; two with one display name print as `i`, `i_1`, ...
"""
import sympy as sp

from tex.expr import Access, Const, IndexValue, Op

from .ir import Allocate, Guard, Kernel, Loop, LoopKind, Stage, Store, Update, unique_name, walk

_INFIX = {"add": "+", "subtract": "-", "multiply": "*", "true_divide": "/",
          "floor_divide": "//", "remainder": "%", "power": "**", "less": "<",
          "less_equal": "<=", "greater": ">", "greater_equal": ">=", "equal": "==",
          "not_equal": "!=", "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^",
          "logical_and": "and", "logical_or": "or"}
_UPDATE = {"sum": "+=", "prod": "*="}


class _Names:
    """Unique display names for loop variables (by object)."""

    def __init__(self, root):
        self.names, used = {}, set()
        for n in walk(root):
            if isinstance(n, Loop) and n.var not in self.names:
                name = unique_name(n.var.name, used)
                used.add(name)
                self.names[n.var] = name
        self.subs = {v: sp.Symbol(nm) for v, nm in self.names.items()}

    def sym(self, e):
        return str(sp.sympify(e).xreplace(self.subs)) if self.subs else str(e)


def format_nest(node, indent=0):
    """The pseudo-code of a Kernel, Stage or statement."""
    names = _Names(node)
    lines = []
    _emit(node, names, indent, lines)
    return "\n".join(lines)


def _expr(e, names):
    if isinstance(e, Const):
        return repr(e.value)
    if isinstance(e, Access):
        idx = ", ".join(names.sym(ix) for ix in e.index)
        return f"{e.tensor.name}[{idx}]" if e.index else e.tensor.name
    if isinstance(e, IndexValue):
        return names.sym(e.expr)
    if isinstance(e, Op):
        args = [_expr(a, names) for a in e.args]
        if e.name in _INFIX and len(args) == 2:
            return f"({args[0]} {_INFIX[e.name]} {args[1]})"
        if e.name == "cast":
            return f"{e.dtype.name}({args[0]})"
        if e.name == "negative":
            return f"-{args[0]}"
        return f"{e.name}({', '.join(args)})"
    return repr(e)


def _target(buf, index, names):
    return f"{buf.name}[{', '.join(names.sym(i) for i in index)}]" if index else buf.name


def _emit(node, names, ind, lines):
    pad = "  " * ind
    if isinstance(node, Kernel):
        for s in node.body:
            _emit(s, names, ind, lines)
    elif isinstance(node, Stage):
        lines.append(f"{pad}# {node.definition.name}" + (f": {node.note}" if node.note else ""))
        for s in node.body:
            _emit(s, names, ind, lines)
    elif isinstance(node, Loop):
        start = names.sym(node.start)
        end = names.sym(node.start + node.extent) if node.start != 0 else names.sym(node.extent)
        notes = [node.kind.value] if node.kind is not LoopKind.SERIAL else []
        if node.kind is LoopKind.VECTOR:
            notes[-1] += f" ({node.tail.value} tail)"
        if node.plan is not None:
            notes.append(node.plan.describe())
        if node.reduction:
            notes.append("reduction")
        note = f"  # {', '.join(notes)}" if notes else ""
        lines.append(f"{pad}for {names.names[node.var]} in {start}..{end}:{note}")
        for s in node.body:
            _emit(s, names, ind + 1, lines)
    elif isinstance(node, Guard):
        note = f"  # {node.note}" if node.note else ""
        lines.append(f"{pad}if {names.sym(node.cond)}:{note}")
        for s in node.body:
            _emit(s, names, ind + 1, lines)
    elif isinstance(node, Allocate):
        b = node.buffer
        shape = ", ".join(names.sym(d) for d in b.shape)
        lines.append(f"{pad}alloc {b.name}[{shape}]: {b.dtype.name}  # {b.scope.value}")
        for s in node.body:
            _emit(s, names, ind, lines)
    elif isinstance(node, Store):
        lines.append(f"{pad}{_target(node.buffer, node.index, names)} = "
                     f"{_expr(node.value, names)}")
    elif isinstance(node, Update):
        tgt = _target(node.buffer, node.index, names)
        val = _expr(node.value, names)
        if node.arg is not None:
            pos = _target(node.arg.buffer, node.arg.index, names)
            lines.append(f"{pad}{tgt}, {pos} = {node.combiner}(({tgt}, {pos}), "
                         f"({val}, {_expr(node.arg.position, names)}))")
        elif node.combiner in _UPDATE:
            lines.append(f"{pad}{tgt} {_UPDATE[node.combiner]} {val}")
        else:
            lines.append(f"{pad}{tgt} = {node.combiner}({tgt}, {val})")
    else:
        lines.append(f"{pad}{node!r}")
