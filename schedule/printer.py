"""Loop nests as readable pseudo-code: the vocabulary of golden tests and errors.

    for i in 0..M:                       # parallel
      C_acc = 0.0
      for k in 0..K:                     # reduction
        C_acc += A[i, k] * B[k, j]
      C[i, j] = C_acc

Loop variables are objects; two with one display name print as `i`, `i_1`, ...
"""
import tex.symbolic as sym

from tex.expr import Access, Const, IndexValue, Op, all_of, const_text, negation
from tex.indices import format_size

from .ir import (Allocate, Guard, Kernel, Loop, LoopKind, Stage, Store, Update, children,
                 unique_name, walk)

_INFIX = {"add": "+", "subtract": "-", "multiply": "*", "true_divide": "/",
          "floor_divide": "//", "remainder": "%", "power": "**", "less": "<",
          "less_equal": "<=", "greater": ">", "greater_equal": ">=", "equal": "==",
          "not_equal": "!=", "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^",
          "left_shift": "<<", "right_shift": ">>", "logical_and": "and", "logical_or": "or"}
_UPDATE = {"sum": "+=", "prod": "*="}


class _Names:
    """Display names for loop variables (by object): each loop's own name (the one a
    stage's primitives take: `s[R].split("i", 4)`), unless a loop around it shows that
    name already; two stages that both loop over `i` print `i` in each. Where a
    variable would need two names, every name is made unique over the whole nest."""

    def __init__(self, root):
        self.names = {}
        if not self._scoped(root, ()):
            self.names, used = {}, set()
            for n in walk(root):
                if isinstance(n, Loop) and n.var not in self.names:
                    self.names[n.var] = unique_name(n.var.name, used)
                    used.add(self.names[n.var])
        self.subs = {v: sym.Symbol(nm) for v, nm in self.names.items()}
        self._texts = {}

    def sym(self, e):
        """`e` as text with the display names (memoized: a nest repeats its bounds and
        indices, and renaming rebuilds each expression: a symbolic matmul's schedule
        printed in 0.29 s, most of it here)."""
        text = self._texts.get(e)
        if text is None:
            text = self._texts[e] = format_size(
                sym.sympify(e).xreplace(self.subs) if self.subs else e)
        return text

    def _scoped(self, node, around):
        """Name the loops under `node` apart from the names `around` them; False when a
        variable met again would clash there."""
        if isinstance(node, Loop):
            name = self.names.get(node.var)
            if name is None:
                name = self.names[node.var] = unique_name(node.var.name, set(around))
            elif name in around:
                return False
            around = around + (name,)
        return all(self._scoped(child, around) for child in children(node))


def format_nest(node, indent=0):
    """The pseudo-code of a Kernel, Stage or statement."""
    names = _Names(node)
    lines = []
    _emit(node, names, indent, lines)
    return "\n".join(lines)


def _expr(e, names):
    if isinstance(e, Const):
        return const_text(e)
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


def _chain(guards):
    """The heads of a stage's choices (consecutive choice guards) as `if c1:`, `elif c2:`
    ..., `else:`, each with its own condition only (the guard's is that and the negations
    of the ones before it, first match wins); None unless every guard's condition is
    exactly that (a pass that rewrote one prints them all in full)."""
    heads, before = [], []
    for k, g in enumerate(guards):
        if g.shown is None or g.cond != all_of(g.shown, *[negation(c) for c in before]):
            return None
        heads.append("else" if g.shown is sym.true and k == len(guards) - 1 and k > 0
                     else ("if" if k == 0 else "elif"))
        before.append(g.shown)
    return heads


HOLE = "...  # not lowered yet"       # a choice's nest a build has not needed (nests.py)


def _emit_all(nodes, names, ind, lines):
    """Sibling nodes, a stage's choices as one if/elif/else chain."""
    nodes, k = list(nodes), 0
    while k < len(nodes):
        end = k
        while end < len(nodes) and isinstance(nodes[end], Guard) and nodes[end].choice:
            end += 1
        heads = _chain(nodes[k:end]) if end - k > 1 else None
        if heads is None:
            _emit(nodes[k], names, ind, lines)
            k += 1
            continue
        pad = "  " * ind
        for head, g in zip(heads, nodes[k:end]):
            note = f"  # {g.note}" if g.note else ""
            cond = "" if head == "else" else f" {names.sym(g.shown)}"
            lines.append(f"{pad}{head}{cond}:{note}")
            if g.hole:          # (schedule/nests.py: lowered when a build needs it)
                lines.append(f"{pad}  {HOLE}")
            _emit_all(g.body, names, ind + 1, lines)
        k = end


_PART_RULES = {"split_k": "the parts of a split reduction",
               "split_k_stream": "the parts of a split reduction",
               "threads": "the parts the threads share the column blocks in"}


def _whole_vectors(loop):
    """Whether a vector loop runs a constant number of whole vectors (the inner loop of
    a split by a multiple of its lanes): no tail to name."""
    extent, plan = loop.extent, loop.plan
    step = plan.width * plan.unroll if plan is not None else 0
    return bool(step) and getattr(extent, "is_Integer", False) and int(extent) % step == 0


def _emit(node, names, ind, lines):
    pad = "  " * ind
    if isinstance(node, Kernel):
        for p in node.params:       # AutoParts: named in the nest, chosen by no one visible
            if getattr(p, "rule", None) in _PART_RULES:
                lines.append(f"{pad}# {p.name}: {_PART_RULES[p.rule]}, chosen at each call "
                             "from the sizes and the thread count")
        _emit_all(node.body, names, ind, lines)
    elif isinstance(node, Stage):
        lines.append(f"{pad}# {node.definition.name}" + (f": {node.note}" if node.note else ""))
        _emit_all(node.body, names, ind, lines)
    elif isinstance(node, Loop):
        start = names.sym(node.start)
        end = names.sym(node.start + node.extent) if node.start != 0 else names.sym(node.extent)
        notes = [node.kind.value] if node.kind is not LoopKind.SERIAL else []
        if node.kind is LoopKind.VECTOR and not _whole_vectors(node):
            notes[-1] += f" ({node.tail.value} tail)"
        if node.plan is not None:
            notes.append(node.plan.describe())
        if node.reduction:
            notes.append("reduction")
        note = f"  # {', '.join(notes)}" if notes else ""
        lines.append(f"{pad}for {names.names[node.var]} in {start}..{end}:{note}")
        _emit_all(node.body, names, ind + 1, lines)
    elif isinstance(node, Guard):
        note = f"  # {node.note}" if node.note else ""
        lines.append(f"{pad}if {names.sym(node.cond)}:{note}")
        _emit_all(node.body, names, ind + 1, lines)
    elif isinstance(node, Allocate):
        b = node.buffer
        shape = ", ".join(names.sym(d) for d in b.shape)
        lines.append(f"{pad}alloc {b.name}[{shape}]: {b.dtype.name}  # {b.scope.value}")
        _emit_all(node.body, names, ind, lines)
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
