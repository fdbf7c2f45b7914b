"""Long floating-point sums in blocks, each from zero: the accuracy numpy's pairwise sum
gives, at the speed of one pass.

A scalar loop `for k in 0..E: acc += f(k)` over floats, reassociated (fast math), is
vectorized by LLVM into a few vector accumulators that each add E/64 terms one after
another, the first of them starting from `acc`'s running total: float32 over a million
copies of 0.1 was 1.5e-4 off (numpy, pairwise: 6e-8). Cut into blocks of BLOCK terms,

    for kb in 0..ceil(E / BLOCK):
      blk = 0
      for k in kb*BLOCK .. min(E, kb*BLOCK + BLOCK): blk += f(k)
      acc += blk

each block's lanes add BLOCK/64 terms from zero, and the running total takes one block
sum per block. Only an outermost serial reduction loop whose whole body is one such sum
into an element that does not move with the loop, with an extent that is not a constant
of at most BLOCK, changes; printed nests show the blocks.
"""
import numpy as np
import sympy as sp

from tex.expr import Access, CeilDiv, Const, Index, Min, substitute_indices

from .ir import Buffer, Loop, LoopKind, Scope, Store, Update, children, symbols_of

BLOCK = 4096


def blocked_sums(kernel):
    """The kernel with its long float sums in blocks (module docstring): the sums that
    no other loop encloses (a total, a dot product). A row sum inside its row loop
    keeps its plain loop: blocks cost each row 2-4 ns (float32 384 x 512 row sums,
    7.0 -> 8.0 us), and a row rarely has the millions of terms where they matter."""
    return _outermost(kernel)


def _outermost(node):
    if isinstance(node, Loop):
        return _blocked(node)
    body = children(node)
    if not body:
        return node
    new = tuple(_outermost(c) for c in body)
    return node if all(a is b for a, b in zip(new, body)) else node.replace(body=new)


def _blocked(node):
    if not _long_float_sum(node):
        return node
    (update,) = node.body
    outer, inner = Index(node.var.name + "b"), Index(node.var.name)
    block = Buffer(f"{update.buffer.name}_blk", (), update.buffer.dtype, Scope.LOCAL)
    first = node.start + outer * BLOCK
    rest = sp.sympify(node.extent) - outer * BLOCK
    value = substitute_indices(update.value, {node.var: first + inner})
    body = (Store(block, (), Const(0, update.buffer.dtype)),
            Loop(inner, Min(BLOCK, rest), (Update(block, (), "sum", value,
                                                  update.fast_math),), reduction=True),
            Update(update.buffer, update.index, "sum", Access(block, ()),
                   update.fast_math))
    return Loop(outer, CeilDiv(sp.sympify(node.extent), BLOCK), body, reduction=True)


def _long_float_sum(node):
    if not (isinstance(node, Loop) and node.kind is LoopKind.SERIAL and node.reduction
            and node.plan is None and len(node.body) == 1):
        return False
    u = node.body[0]
    extent = sp.sympify(node.extent)
    return (isinstance(u, Update) and u.combiner == "sum" and u.arg is None and u.fast_math
            and np.dtype(u.buffer.dtype).kind == "f"
            and not any(node.var in symbols_of(ix) for ix in u.index)
            and not (extent.is_Integer and int(extent) <= BLOCK)
            and node.var not in symbols_of(extent))
