"""The loop-nest IR: loops over symbolic extents, guarded statements, buffers.

All nodes are frozen; a pass builds new nodes and shares the ones it did not touch
(`replace` returns the node itself when nothing changed). Loop variables are
`tex.Index` objects (sympy Dummies): identity by object, the printer makes names unique.
Values inside statements are tex expression nodes whose `Access.tensor` is a `Buffer`.

    Kernel(body=(Stage, ...))        one stage per definition, in dependence order
    Stage(definition, body)          marks where a definition's statements live
    Loop(var, extent, body, kind)    for var in start .. start+extent
    Guard(cond, body)                if cond (a sympy relation over sizes and loop vars)
    Allocate(buffer, body)           a temporary or local buffer live inside body
    Store(buffer, index, value)      buffer[index] = value
    Update(buffer, index, combiner, value, arg)   buffer[index] = combiner(buffer[index], value)
"""
import enum
from dataclasses import dataclass, field, replace as dc_replace

import numpy as np
import sympy as sp


class LoopKind(enum.Enum):
    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTOR = "vector"
    UNROLLED = "unrolled"


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


@dataclass(frozen=True, eq=False)
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


@dataclass(frozen=True, eq=False)
class Loop(Node):
    var: sp.Symbol
    extent: sp.Expr
    body: tuple
    kind: LoopKind = LoopKind.SERIAL
    start: sp.Expr = sp.Integer(0)
    reduction: bool = False     # iterates over a reduced index (for handles and legality)
    tail: str = "peel"          # VECTOR loops: "peel" (scalar remainder) or "mask" (masked lanes)


@dataclass(frozen=True, eq=False)
class Guard(Node):
    cond: sp.Basic
    body: tuple


@dataclass(frozen=True, eq=False)
class Allocate(Node):
    buffer: Buffer
    body: tuple


@dataclass(frozen=True, eq=False)
class Store(Node):
    buffer: Buffer
    index: tuple
    value: object


@dataclass(frozen=True, eq=False)
class ArgTarget:
    """Where argmax/argmin keep the position of the best value, and the position itself."""
    buffer: Buffer
    index: tuple
    position: object          # a tex expression (int64)


@dataclass(frozen=True, eq=False)
class Update(Node):
    buffer: Buffer
    index: tuple
    combiner: str
    value: object
    fast_math: bool = True
    arg: ArgTarget = None


@dataclass(frozen=True, eq=False)
class Stage(Node):
    definition: object
    body: tuple


@dataclass(frozen=True, eq=False)
class Kernel(Node):
    """A whole compiled function: stages over the buffers of one program."""
    body: tuple
    inputs: tuple            # Buffers, in calling order
    outputs: tuple           # Buffers
    sizes: tuple             # size symbols
    params: tuple            # call-time parameter symbols
    bindings: dict = field(default_factory=dict)   # size -> (input position, axis)


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
