"""A program: the DAG of definitions that some outputs read (tex/dag.py).

Nodes are tensors (inputs and definitions); an edge t -> d means definition d reads t.
The program fixes the calling convention of a compiled kernel: inputs in order of first
use, the sizes bound from their shapes, the call-time parameters, and the outputs.
"""
import numpy as np
import tex.symbolic as sym

from . import dag
from .errors import ShapeError
from .html import box, code, pre
from .indices import format_size
from .expr import Index, IndexValue, Param, walk
from .tensor import Definition, Tensor, access_checks


class Program:
    """The definitions `outputs` need, in an order that respects their dependences."""

    def __init__(self, outputs, params=(), inputs=None):
        """`inputs`: the calling order of the inputs (a rewritten program keeps the
        original's), default their order of first use."""
        outputs = tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)
        self._extra_params = tuple(params)
        self._fixed_inputs = tuple(inputs) if inputs is not None else None
        for n, o in enumerate(outputs):
            if not isinstance(o, Definition):
                raise TypeError(f"{o!r} is not a tex.compute definition")
            if any(o is other for other in outputs[:n]):
                raise ValueError(f"{o.name} is listed twice among the outputs: a program "
                                 "computes each output once (list it once, and use its "
                                 "array twice)")
        self.outputs = outputs
        self.graph = dag.DiGraph()
        stack, seen = list(outputs), set()
        while stack:
            t = stack.pop()
            if t in seen:
                continue
            seen.add(t)
            self.graph.add_node(t)
            if isinstance(t, Definition):
                for r in t.reads():
                    self.graph.add_edge(r, t)
                    stack.append(r)
        self._check_names()
        self.definitions = self._ordered_definitions()
        self.inputs = self._inputs_in_order_of_use()
        if self._fixed_inputs is not None:
            self.inputs = tuple(t for t in self._fixed_inputs if t in self.inputs) + \
                tuple(t for t in self.inputs if t not in self._fixed_inputs)
        self.intermediates = tuple(d for d in self.definitions if d not in self.outputs)
        self.sizes = self._sizes()
        self.params = tuple(sorted(self._symbols(Param) | set(params), key=str))

    def _check_names(self):
        seen = {}
        for t in self.graph.nodes:
            other = seen.setdefault(t.name, t)
            if other is not t:
                if all(isinstance(x, Definition) for x in (t, other)):
                    raise ValueError(
                        f"two definitions are named {t.name!r} in one program: each "
                        f"tex.compute makes a new one (a notebook cell run again too), and "
                        f"this program reads both; re-run the cells that use the old "
                        f"{t.name}, or give one another name")
                kinds = sorted(f"{'a definition' if isinstance(x, Definition) else 'an input'}"
                               f" {x.name}: {x.type_str}" for x in (t, other))
                raise ValueError(
                    f"two different tensors are named {t.name!r} in one program ({kinds[0]}; "
                    f"{kinds[1]}): a tensor declared again with the same name, shape and "
                    "dtype is the same tensor, but these differ; give one another name, or "
                    "re-run the cells that use the old one")

    def _ordered_definitions(self):
        # stable topological order: ties broken by the order definitions were created
        defs = [t for t in self.graph.nodes if isinstance(t, Definition)]
        rank = {d: n for n, d in enumerate(defs)}
        sub = self.graph.subgraph(defs)
        return tuple(dag.topological_order(sub, key=lambda d: rank[d]))

    def _inputs_in_order_of_use(self):
        out = []
        for d in self.definitions:
            for t in d.reads():
                if not isinstance(t, Definition) and t not in out:
                    out.append(t)
        return tuple(out)

    def _symbols(self, kind):
        syms = set()
        for t in list(self.inputs) + list(self.definitions):
            exprs = list(t.shape)
            if isinstance(t, Definition):
                exprs += list(t.extents.values())
                exprs += [n.expr for n in walk(t.expr) if isinstance(n, IndexValue)]
            for e in exprs:
                syms |= {s for s in e.free_symbols
                         if isinstance(s, kind) and not isinstance(s, Index)}
        return syms

    def _sizes(self):
        syms = {s for s in self._symbols(sym.Symbol) if not isinstance(s, Param)}
        return tuple(sorted(syms, key=str))

    def size_bindings(self):
        """{size: (input position, axis)}: where each size is read from at call time."""
        bind = {}
        for pos, t in enumerate(self.inputs):
            for axis, d in enumerate(t.shape):
                if isinstance(d, sym.Symbol) and not isinstance(d, Param) and d not in bind:
                    bind[d] = (pos, axis)
        unbound = [s for s in self.sizes if s not in bind]
        if unbound:
            names = ", ".join(map(str, unbound))
            raise ShapeError(f"size {names} cannot be bound: no input has it as a dimension"
                             f"{_binding_hint(self.inputs, unbound[0])}")
        return bind

    def access_checks(self):
        return [c for d in self.definitions for c in access_checks(d)]

    def tensor(self, name):
        for t in self.graph.nodes:
            if t.name == name:
                return t
        raise KeyError(name)

    def signature(self):
        """`(A: float32[M, K], B: float32[K, N]) -> C: float32[M, N]`: the inputs in the
        order a compiled function takes them positionally (first use), and the outputs."""
        ins = ", ".join(f"{t.name}: {t.type_str}" for t in self.inputs)
        outs = ", ".join(f"{o.name}: {o.type_str}" for o in self.outputs)
        return f"({ins}) -> {outs}"

    def __reduce__(self):
        return (Program, (self.outputs, self._extra_params, self._fixed_inputs))

    def __repr__(self):
        lines = [f"inputs: {', '.join(repr(t) for t in self.inputs)}"]
        for d in self.definitions:
            lines.append(d.notation)
        return "\n".join(lines)

    def _repr_html_(self):
        return box(f"program {code(self.signature())}",
                   pre("\n".join(d.notation for d in self.definitions)))


def as_program(outputs):
    return outputs if isinstance(outputs, Program) else Program(outputs)


def check_fast_math(value, caller):
    """`fast_math` must be a bool: `tex.compile(D, E)` took E for it and dropped it."""
    if isinstance(value, (int, np.bool_, np.integer)):      # (True, False, 1, 0)
        return
    if isinstance(value, Tensor):
        raise TypeError(f"{caller}: its second argument is fast_math, not a definition "
                        f"({value.name}); several outputs go in one tuple: "
                        f"{caller}((..., {value.name}))")
    raise TypeError(f"{caller}: fast_math must be True or False, not {value!r}")


__all__ = ["Program", "Tensor", "as_program"]


def _binding_hint(inputs, n):
    """How to bind size `n` that inputs have only inside an expression: for `n + c`, a
    size of its own and n written through it; otherwise that the dimension needs one."""
    for t in inputs:
        for d in t.shape:
            d = sym.sympify(d)
            if n in d.free_symbols:
                c = d - n
                if c.is_Integer:
                    m = f"{n}{1 if c > 0 else 0}"
                    return (f" ({t.name} has shape ({', '.join(map(format_size, t.shape))}): "
                            f"declare it with a size of its own, {m} = tex.sizes('{m}'), and "
                            f"write {n} as {format_size(sym.Symbol(m) - c)})")
                return (f" ({t.name} has {format_size(d)}: give that dimension a size of its "
                        f"own and write {n} through it)")
    return ""
