"""Rewrites of a program before its kernels are formed (pure: Program -> Program):

- Common definitions. Structurally identical definitions (the same expression over the
  same tensors and index maps, over the same extents) are computed once: readers of a
  duplicate read the first; a duplicate that is an output becomes a copy of it (which
  fuses into its epilogue, so the value is still computed once).
- Distribution. A sum over an output index of a contraction, `S[i] = sum_j C[i, j]` with
  `C[i, j] = sum_k A[i, k] * B[k, j]`, is `sum_k A[i, k] * (sum_j B[k, j])`: the sum
  moves to the factor that reads j (`C_B[k] = sum_j B[k, j]`), and the contraction
  loses a dimension (2*M*N*K flops become M*K + K*N: the reordering numpy's einsum_path
  finds inside one einsum, here across definitions). Made only where both sums may be
  regrouped (integers, or floats under fast_math), C has no other reader and is not an
  output.

Each rewrite returns a note saying what it did, for the printed schedule. The
rewritten program keeps the original's inputs, in their order (its calling
convention), and its outputs' names.
"""
import tex.symbolic as sym

from tex.combiners import COMBINERS
from tex.expr import (Access, Const, Index, IndexValue, Op, Reduce, rebuild, substitute_indices,
                      walk, with_children)
from tex.program import Program
from tex.tensor import Definition, compute


def rewrite(program, fast_math=True):
    """(the rewritten program, [notes]); the program itself when nothing applies."""
    notes = []
    p = _common_definitions(program, notes)
    p = _distribute_sums(p, fast_math, notes)
    return p, notes


# ---------------------------------------------------------------- rebuilding a DAG

def _rebuilt(program, replace):
    """The program with each definition in `replace` (old -> new definition) swapped,
    and every definition that reads a swapped one rebuilt to read the new one."""
    if not replace:
        return program
    new = dict(replace)
    for d in program.definitions:
        if d in new:
            continue
        if any(t in new for t in d.reads()):
            new[d] = _with_reads(d, new)
    outputs = tuple(new.get(o, o) for o in program.outputs)
    return Program(outputs, program._extra_params, inputs=program.inputs)


def _with_reads(d, new):
    def fn(node, kids):
        node = with_children(node, kids)
        if isinstance(node, Access) and node.tensor in new:
            return Access(new[node.tensor], node.index)
        return node
    return Definition(d.name, d.indices, rebuild(d.expr, fn), d.extents)


# ---------------------------------------------------------------- common definitions

def structure(d, rep=lambda t: t):
    """A text two definitions share exactly when they compute the same values: the
    expression with indices named by position (outputs o0.., reduced r0..), tensors by
    identity (`rep` maps a duplicate to the definition it duplicates), and extents."""
    red = d.reduction
    names = {x: f"o{n}" for n, x in enumerate(d.indices)}
    if red is not None:
        names.update({x: f"r{n}" for n, x in enumerate(red.over)})
    subs = {x: sym.Symbol(v) for x, v in names.items()}

    def idx(e):
        return str(sym.sympify(e).xreplace(subs))

    def text(e):
        if isinstance(e, Const):
            return f"c({e.value!r},{e.dtype},{e.weak})"
        if isinstance(e, Access):
            return f"a({id(rep(e.tensor))},{','.join(idx(ix) for ix in e.index)})"
        if isinstance(e, IndexValue):
            return f"v({idx(e.expr)})"
        if isinstance(e, Op):
            return f"{e.name}:{e.dtype}:{e.weak}({','.join(text(a) for a in e.args)})"
        if isinstance(e, Reduce):
            return (f"{e.combiner}:{e.dtype}:{e.fast_math}:{e.strict}"
                    f"[{','.join(names[x] for x in e.over)}]({text(e.body)})")
        raise TypeError(type(e).__name__)
    extents = ",".join(f"{v}={idx(d.extents[x])}" for x, v in names.items())
    return f"{d.dtype}|{extents}|{text(d.expr)}"


def _common_definitions(program, notes):
    first, dup = {}, {}
    for d in program.definitions:
        key = structure(d, lambda t: dup.get(t, t))
        if key in first:
            dup[d] = first[key]
        else:
            first[key] = d
    if not dup:
        return program
    replace = {}
    for d, rep in dup.items():
        if d in program.outputs:       # an output keeps its buffer: a copy of the first
            replace[d] = compute(d.name, d.indices, Access(rep, d.indices))
            notes.append(f"{d.name} computes what {rep.name} does: a copy of it")
        else:
            replace[d] = rep
            notes.append(f"{d.name} computes what {rep.name} does: its readers read "
                         f"{rep.name}")
    return _rebuilt(program, replace)


# ---------------------------------------------------------------- distribution

def _distribute_sums(program, fast_math, notes):
    readers = {}
    for d in program.definitions:
        for t in d.reads():
            readers.setdefault(t, []).append(d)
    for s in program.definitions:
        plan = _distribution(s, readers, program, fast_math)
        if plan is None:
            continue
        new_s, note = plan
        notes.append(note)
        return _distribute_sums(_rebuilt(program, {s: new_s}), fast_math, notes)
    return program


def _distribution(s, readers, program, fast_math):
    """(S rewritten, note) for `S = sum_J C[.., J, ..]` where C is a product (or a sum
    over k of one) whose factors read some of J alone, or None. Each factor is summed
    over the indices of J only it reads (a definition of its own), and S sums the
    product of those over k and the rest of J: `sum_j (A @ B)[i, j]` is
    `sum_k A[i, k] * (sum_j B[k, j])`, `sum_(i, j) A[i] * B[j]` is
    `(sum_i A[i]) * (sum_j B[j])`."""
    red = s.reduction
    if red is None or red.combiner != "sum" or not isinstance(red.body, Access):
        return None
    read = red.body
    c = read.tensor
    if not isinstance(c, Definition) or c in program.outputs or readers.get(c) != [s]:
        return None
    cred = c.reduction
    if c.dtype != red.dtype or cred is not None and (cred.combiner != "sum" or
                                                     cred.dtype != red.dtype):
        return None
    sums = (red,) if cred is None else (red, cred)
    if not all(COMBINERS["sum"].may_reassociate(r.dtype, fast_math and r.fast_math)
               for r in sums):
        return None
    if not all(isinstance(sym.sympify(ix), Index) for ix in read.index) or \
            len(set(read.index)) != len(read.index) or set(red.over) - set(read.index):
        return None
    to_s = dict(zip(c.indices, read.index))        # C's output index -> S's index
    summed = [x for x in c.indices if to_s[x] in red.over]
    body = c.element
    if not summed or not (isinstance(body, Op) and body.name == "multiply" and
                          len(body.args) == 2):
        return None
    x, y = body.args
    if x.dtype != red.dtype or y.dtype != red.dtype:
        return None
    reads = [_indices_of(x), _indices_of(y)]
    alone = [[v for v in summed if v in reads[n] and v not in reads[1 - n]] for n in (0, 1)]
    if not alone[0] and not alone[1]:
        return None                  # every summed index is read by both factors
    fm = all(r.fast_math for r in sums)
    fresh = {k: Index(k.name) for k in (cred.over if cred is not None else ())}
    rename = {**{v: to_s[v] for v in c.indices}, **fresh}
    factors, notes = [], []
    for factor, own in zip((x, y), alone):
        if not own:
            factors.append(substitute_indices(factor, rename))
            continue
        kept = [v for v in _ordered_indices(factor) if v not in own]
        part = compute(f"{c.name}_{'_'.join(v.name for v in own)}sum", kept,
                       Reduce("sum", factor, tuple(own), red.dtype, fm))
        factors.append(Access(part, [rename.get(v, v) for v in kept]))
        notes.append(f"{part.name} = the sum of {_text(factor)} over "
                     f"{', '.join(v.name for v in own)}")
    rest = tuple(fresh.values()) + tuple(to_s[v] for v in summed
                                         if v not in alone[0] + alone[1])
    product = factors[0] * factors[1]
    new = compute(s.name, s.indices, Reduce("sum", product, rest, red.dtype, fm)
                  if rest else product)
    over = f"sum over {', '.join(v.name for v in rest)} of " if rest else ""
    note = (f"{s.name} sums {c.name} over {', '.join(to_s[v].name for v in summed)}: the "
            f"sum moved inside the product ({s.name} = {over}{_text(product)}; "
            f"{'; '.join(notes)}): {c.name} is not computed")
    return new, note


def _indices_of(e):
    out = set()
    for n in walk(e):
        if isinstance(n, Access):
            for ix in n.index:
                out |= {v for v in sym.sympify(ix).free_symbols if isinstance(v, Index)}
        elif isinstance(n, IndexValue):
            out |= {v for v in n.expr.free_symbols if isinstance(v, Index)}
    return out


def _ordered_indices(e):
    """Indices in order of first appearance in e's reads."""
    seen = []
    for n in walk(e):
        if isinstance(n, Access):
            for ix in n.index:
                for v in sorted(sym.sympify(ix).free_symbols, key=str):
                    if isinstance(v, Index) and v not in seen:
                        seen.append(v)
    return seen


def _text(e):
    from tex.expr import format_expr
    return format_expr(e)
