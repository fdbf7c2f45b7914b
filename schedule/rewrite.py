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
import sympy as sp

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
    subs = {x: sp.Symbol(v) for x, v in names.items()}

    def idx(e):
        return str(sp.sympify(e).xreplace(subs))

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
    """(S rewritten, note) for `S = sum_J C[.., J, ..]` over a contraction C, or None."""
    red = s.reduction
    if red is None or red.combiner != "sum" or not isinstance(red.body, Access):
        return None
    read = red.body
    c = read.tensor
    if not isinstance(c, Definition) or c in program.outputs or readers.get(c) != [s]:
        return None
    cred = c.reduction
    if cred is None or cred.combiner != "sum" or cred.dtype != red.dtype or \
            c.dtype != red.dtype:
        return None
    if not all(COMBINERS["sum"].may_reassociate(r.dtype, fast_math and r.fast_math)
               for r in (red, cred)):
        return None
    if not all(isinstance(sp.sympify(ix), Index) for ix in read.index) or \
            len(set(read.index)) != len(read.index):
        return None
    to_s = dict(zip(c.indices, read.index))        # C's output index -> S's index
    summed = {x for x, y in to_s.items() if y in red.over}
    if not summed or set(red.over) - set(read.index):
        return None
    body = cred.body
    if not (isinstance(body, Op) and body.name == "multiply" and len(body.args) == 2):
        return None
    uses = [_indices_of(a) & summed for a in body.args]
    if uses[0] and uses[1] or not (uses[0] or uses[1]):
        return None                  # the summed indices must be read by one factor only
    x, y = (body.args[0], body.args[1]) if uses[1] else (body.args[1], body.args[0])
    if x.dtype != red.dtype or y.dtype != red.dtype:
        return None
    # Y summed over the summed indices: a definition over Y's other indices
    kept = [v for v in _ordered_indices(y) if v not in summed]
    ys = compute(f"{c.name}_{'_'.join(v.name for v in sorted(summed, key=str))}sum", kept,
                 Reduce("sum", y, tuple(v for v in c.indices if v in summed), red.dtype,
                        red.fast_math and cred.fast_math))
    fresh = {k: Index(k.name) for k in cred.over}
    rename = {**{v: to_s[v] for v in c.indices}, **fresh}
    x_s = substitute_indices(x, rename)
    ys_read = Access(ys, [rename.get(v, v) for v in kept])
    new = compute(s.name, s.indices, Reduce("sum", x_s * ys_read,
                                            tuple(fresh[k] for k in cred.over), red.dtype,
                                            red.fast_math and cred.fast_math))
    summed_names = ", ".join(v.name for v in sorted(summed, key=str))
    note = (f"{s.name} sums {c.name} over {summed_names}: the sum moved inside the "
            f"contraction ({s.name} = sum over {', '.join(k.name for k in cred.over)} of "
            f"{_text(x_s)} * {ys.name}, {ys.name} = the sum of {_text(y)}): {c.name} is not "
            "computed")
    return new, note


def _indices_of(e):
    out = set()
    for n in walk(e):
        if isinstance(n, Access):
            for ix in n.index:
                out |= {v for v in sp.sympify(ix).free_symbols if isinstance(v, Index)}
        elif isinstance(n, IndexValue):
            out |= {v for v in n.expr.free_symbols if isinstance(v, Index)}
    return out


def _ordered_indices(e):
    """Indices in order of first appearance in e's reads."""
    seen = []
    for n in walk(e):
        if isinstance(n, Access):
            for ix in n.index:
                for v in sorted(sp.sympify(ix).free_symbols, key=str):
                    if isinstance(v, Index) and v not in seen:
                        seen.append(v)
    return seen


def _text(e):
    from tex.expr import format_expr
    return format_expr(e)
