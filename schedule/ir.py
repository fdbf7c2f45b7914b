"""The loop-nest IR: loops over symbolic extents, guarded statements, buffers.

All nodes are frozen; a pass builds new nodes and shares the ones it did not touch
(`replace` returns the node itself when nothing changed). Loop variables are
`tex.Index` objects (tex.symbolic Dummies): identity by object, the printer makes names unique.
Values inside statements are tex expression nodes whose `Access.tensor` is a `Buffer`.

    Kernel(body=(Stage, ...))        one stage per definition, in dependence order
    Stage(definition, body)          marks where a definition's statements live
    Loop(var, extent, body, kind)    for var in start .. start+extent
    Guard(cond, body)                if cond (a relation over sizes and loop vars)
    Allocate(buffer, body)           a temporary or local buffer live inside body
    Store(buffer, index, value)      buffer[index] = value
    Update(buffer, index, combiner, value, arg)   buffer[index] = combiner(buffer[index], value)
"""
import enum
import functools
from dataclasses import field, replace as dc_replace

import numpy as np
import tex.symbolic as sym
from tex.records import record


class LoopKind(enum.Enum):
    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTOR = "vector"
    UNROLLED = "unrolled"


class VectorTail(enum.Enum):
    """What a VECTOR loop does with the iterations that do not fill a last vector."""
    PEEL = "peel"       # a scalar remainder loop
    MASK = "mask"       # one more vector with a lane mask (masked loads and stores)


class Scope(enum.Enum):
    INPUT = "input"
    OUTPUT = "output"
    TEMP = "temp"      # heap, allocated by the kernel (intermediate definitions, partials)
    LOCAL = "local"    # stack / registers (accumulators)


class Node:
    __slots__ = ()

    def replace(self, **changes):
        """A copy with `changes`, or self when every field is already the same object."""
        if all(getattr(self, k) is v for k, v in changes.items()):
            return self
        return dc_replace(self, **changes)


@record(eq=False)
class Buffer:
    """Memory a statement reads or writes. Identity by object. A TEMP buffer with an
    `alias` is that buffer (an output) whenever its first dimension is 1 at run time:
    a split-K partial with one part is the result itself, with no copy to merge."""
    name: str
    shape: tuple
    dtype: np.dtype
    scope: Scope
    alias: object = None

    @property
    def ndim(self):
        return len(self.shape)

    def __repr__(self):
        return f"Buffer({self.name}, {self.shape}, {self.dtype.name}, {self.scope.value})"


@record(eq=False)
class Loop(Node):
    var: sym.Symbol
    extent: sym.Expr
    body: tuple
    kind: LoopKind = LoopKind.SERIAL
    start: sym.Expr = sym.Integer(0)
    reduction: bool = False     # iterates over a reduced index (for handles and legality)
    tail: VectorTail = VectorTail.PEEL     # VECTOR loops: a scalar remainder or masked lanes
    plan: object = None         # the vector plan (schedule/vectorize.py), or None

    def replace(self, **changes):
        """As Node.replace; a plan describes the loop it was made for, so any other
        change drops it (vectorize.plan_vectors plans the new loop)."""
        if changes and "plan" not in changes:
            changes["plan"] = None
        return Node.replace(self, **changes)


@record(eq=False)
class Guard(Node):
    cond: sym.Basic
    body: tuple
    note: str = None            # why the guard is there, when a pass made it ("whole tile")
    choice: str = None          # the schedule it selects, when it is a stage's choice among
    #                             its specializations (C#1, ..., C for its own); a choice's
    #                             condition is on sizes and parameters only
    shown: sym.Basic = None      # a choice's own condition: `cond` is it and the negations
    #                             of the choices before it, the printer's `elif shown:`
    hole: bool = False          # a choice whose nest is not lowered yet (schedule/nests.py):
    #                             a build may only leave it out


@record(eq=False)
class Allocate(Node):
    buffer: Buffer
    body: tuple


@record(eq=False)
class Store(Node):
    buffer: Buffer
    index: tuple
    value: object


@record(eq=False)
class ArgTarget:
    """Where argmax/argmin keep the position of the best value, and the position itself.
    `ordered`: each target element sees its positions in increasing order, so a later
    equal value never wins and no tie test is needed (ops.increasing_better)."""
    buffer: Buffer
    index: tuple
    position: object          # a tex expression (int64)
    ordered: bool = False


@record(eq=False)
class Update(Node):
    buffer: Buffer
    index: tuple
    combiner: str
    value: object
    fast_math: bool = True
    arg: ArgTarget = None


@record(eq=False)
class Stage(Node):
    definition: object
    body: tuple
    note: str = None            # what else the stage computes (fused consumers)


@record(eq=False)
class Kernel(Node):
    """A whole compiled function: stages over the buffers of one program."""
    body: tuple
    inputs: tuple            # Buffers, in calling order
    outputs: tuple           # Buffers
    sizes: tuple             # size symbols
    params: tuple            # call-time parameter symbols
    bindings: dict = field(default_factory=dict)   # size -> (input position, axis)


def unique_name(base, used):
    """`base`, else the first of `base_1`, `base_2`, ... not in `used`: how loops and
    the loops a primitive makes are named apart."""
    name, k = base, 0
    while name in used:
        k += 1
        name = f"{base}_{k}"
    return name


def children(node):
    return getattr(node, "body", ())


def walk(node):
    """Every statement under node (node included), parents first."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(children(n)))


def map_nest(node, fn):
    """Rebuild bottom-up: `fn(node)` sees children already rebuilt and returns a node,
    a tuple of nodes (spliced into the parent), or the node itself."""
    body = children(node)
    if body:
        new = []
        for child in body:
            r = map_nest(child, fn)
            new.extend(r if isinstance(r, tuple) else (r,))
        new = tuple(new)
        if len(new) != len(body) or any(a is not b for a, b in zip(new, body)):
            node = node.replace(body=new)
    return fn(node)


def buffers_of(node):
    """Every buffer read or written under node, in order of first appearance."""
    from tex.expr import Access, walk as walk_expr
    seen = {}
    for n in walk(node):
        if isinstance(n, (Store, Update)):
            seen.setdefault(id(n.buffer), n.buffer)
            exprs = [n.value] + ([n.arg.position] if isinstance(n, Update) and n.arg else [])
            if isinstance(n, Update) and n.arg:
                seen.setdefault(id(n.arg.buffer), n.arg.buffer)
            for e in exprs:
                for a in walk_expr(e):
                    if isinstance(a, Access):
                        seen.setdefault(id(a.tensor), a.tensor)
        elif isinstance(n, Allocate):
            seen.setdefault(id(n.buffer), n.buffer)
    return list(seen.values())


@functools.lru_cache(maxsize=16384)
def symbols_of(e):
    """The free symbols of an index expression, memoized (sympy walks the expression
    again at every `free_symbols`; code generation asks about the same few hundred
    expressions for every address and vector it emits)."""
    return frozenset(sym.sympify(e).free_symbols)


def structure_key(kernel):
    """A text that two kernels share exactly when they are the same loop nest: every
    statement, loop (kind, tail, extent), buffer (shape, dtype, scope, alias) and value,
    with loop variables and buffers named by their first appearance (identity, not
    their display names, tells them apart). Code generation is a function of this
    text (and the code generator), so it keys the compiled-object cache without
    generating any IR."""
    from tex.expr import Access, Const, IndexValue, Op
    names = {}

    def name(obj, prefix):
        if id(obj) not in names:
            names[id(obj)] = (f"{prefix}{len(names)}", obj)    # keep obj alive: ids stay unique
        return names[id(obj)][0]

    texts = {}

    def expr_key(e):
        """An expression's structure: its class and arguments (sympy keeps the arguments
        of Add, Mul, Min and the logic in a canonical order), loop variables by their
        canonical names. Neither rebuilt (sympy would re-evaluate every Min and
        relation) nor printed (sympy's printer sorts every sum's terms, most of this
        function's time)."""
        e = sym.sympify(e)
        text = texts.get(e)
        if text is None:
            if isinstance(e, sym.Symbol):
                text = name(e, "v") if e.__class__.__name__ == "Index" else \
                    f"{e.__class__.__name__}:{e.name}"
            elif not e.args:
                text = f"{e.__class__.__name__}:{e}"
            else:
                text = f"{e.__class__.__name__}({', '.join(expr_key(a) for a in e.args)})"
            texts[e] = text
        return text

    def buf(b):
        if id(b) not in names:
            alias = buf(b.alias) if b.alias is not None else None
            shape = [expr_key(d) for d in b.shape]
            name(b, "b")
            out.append(f"buffer {names[id(b)][0]} {b.name} {shape} {b.dtype.str} "
                       f"{b.scope.value} {alias}")
        return names[id(b)][0]

    def value(e):
        if isinstance(e, Const):
            return f"Const({e.value!r}, {e.dtype.str}, {e.weak})"
        if isinstance(e, Access):
            return f"{buf(e.tensor)}[{', '.join(expr_key(i) for i in e.index)}]"
        if isinstance(e, IndexValue):
            return f"IndexValue({expr_key(e.expr)})"
        if isinstance(e, Op):
            return f"{e.name}:{e.dtype.str}({', '.join(value(a) for a in e.args)})"
        raise TypeError(f"structure_key: value {e!r}")

    out = []

    def node(n, depth):
        pad = " " * depth
        if isinstance(n, Loop):
            plan = "" if n.plan is None else f" plan {n.plan.describe()}"
            out.append(f"{pad}loop {name(n.var, 'v')} {n.var.name} {expr_key(n.start)} "
                       f"{expr_key(n.extent)} {n.kind.value} {n.tail.value} {n.reduction}{plan}")
        elif isinstance(n, Guard):
            out.append(f"{pad}guard {expr_key(n.cond)} {n.note} {n.choice}{' hole' * n.hole}")
        elif isinstance(n, Allocate):
            out.append(f"{pad}allocate {buf(n.buffer)}")
        elif isinstance(n, Store):
            out.append(f"{pad}store {buf(n.buffer)}[{', '.join(expr_key(i) for i in n.index)}] = "
                       f"{value(n.value)}")
        elif isinstance(n, Update):
            arg = "" if n.arg is None else (f" arg {buf(n.arg.buffer)}"
                                            f"[{', '.join(expr_key(i) for i in n.arg.index)}] "
                                            f"{value(n.arg.position)} {n.arg.ordered}")
            out.append(f"{pad}update {buf(n.buffer)}[{', '.join(expr_key(i) for i in n.index)}] "
                       f"{n.combiner} {n.fast_math} {value(n.value)}{arg}")
        elif isinstance(n, Stage):
            out.append(f"{pad}stage {n.definition.name}")
        for c in children(n):
            node(c, depth + 1)

    for b in kernel.inputs + kernel.outputs:
        buf(b)
    out.append(f"sizes {[str(s) for s in kernel.sizes]} params {[str(p) for p in kernel.params]}")
    out.append(f"bindings {sorted((str(k), v) for k, v in kernel.bindings.items())}")
    for stage in kernel.body:
        node(stage, 0)
    return "\n".join(out)
