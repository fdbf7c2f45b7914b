"""Schedules: `tex.schedule(out)`, its stages, loop handles and a replayable history.

    s = tex.schedule(C)
    io, ii = s[C].split(i, 64)
    s[C].reorder(io, k, ii)
    s[C].parallel(io)
    print(s)                 # the loop nest after these steps
    s.history                # [Split('C', 'i', 64, 'peel'), Reorder('C', ('io', 'k', 'ii')), ...]

The user-facing methods are thin recorders: each resolves its loop arguments, calls a
pure primitive (schedule/primitives.py) and appends a frozen step record. Replaying
the records on a fresh schedule of the same program gives the same loop nest.
"""
import sympy as sp

from tex.errors import ScheduleError
from tex.expr import AutoParts, Param
from tex.program import as_program

from .display import schedule_html
from .handles import StageHandle
from .ir import Buffer, Kernel, Loop, LoopKind, Scope, walk
from .printer import format_nest
from .stage import initial_state, lower_stage
from .steps import (ComputeAt, Pack, Privatize, Reorder, SetKind, Specialize, Split, SplitK,
                    from_json, to_json)
from .vectorize import plan_vectors, vector_refusal


def buffers_for(program):
    """One Buffer per input and definition: inputs, outputs, and temporaries between."""
    buffers = {t: Buffer(t.name, t.shape, t.dtype, Scope.INPUT) for t in program.inputs}
    for d in program.definitions:
        scope = Scope.OUTPUT if d in program.outputs else Scope.TEMP
        buffers[d] = Buffer(d.name, d.shape, d.dtype, scope)
    return buffers


class Schedule:
    """The schedule of every definition a program's outputs read."""

    def __init__(self, out, fast_math=True):
        self.program = as_program(out)
        self._buffer_map = buffers_for(self.program)
        self.fast_math = fast_math
        self._states = {d: initial_state(d, fast_math) for d in self.program.definitions}
        self._stages = {d: StageHandle(self, d) for d in self.program.definitions}
        self._hosted_by = {}        # producer definition -> consumer that computes it
        self.history = []

    def __getitem__(self, defn):
        if isinstance(defn, str) and "#" in defn:          # a specialization: "C#1"
            base, _, number = defn.partition("#")
            specs = self[base].specializations
            if not number.isdigit() or not 1 <= int(number) <= len(specs):
                raise ScheduleError(f"{defn} is not a specialization of {base}")
            return specs[int(number) - 1]
        if isinstance(defn, str):
            found = [d for d in self._stages if d.name == defn]
            if not found:
                names = ", ".join(d.name for d in self.program.definitions)
                raise ScheduleError(f"{defn!r} is not a definition of this schedule's program "
                                    f"(its definitions: {names})")
            defn = found[0]
        if defn not in self._stages:
            name = getattr(defn, "name", defn)
            raise ScheduleError(f"{name} is not a definition of this schedule's program")
        return self._stages[defn]

    @property
    def stages(self):
        return [self._stages[d] for d in self.program.definitions]

    def _record(self, step):
        self.history.append(step)

    def _buffers(self):
        return self._buffer_map

    def kernel(self):
        """The scheduled loop nest (tex.scheduler.ir.Kernel), its vector plan included."""
        p, buffers = self.program, self._buffers()
        body = tuple(self._stages[d].lower(buffers, self._states)
                     for d in p.definitions if d not in self._hosted_by)
        params = set(p.params)
        states = list(self._states.values()) + [spec.state for st in self._stages.values()
                                                for spec in st.specializations]
        for state in states:
            for a in state.axes:
                params |= {x for x in sp.sympify(a.extent).free_symbols if isinstance(x, Param)}
        kernel = Kernel(body, inputs=tuple(buffers[t] for t in p.inputs),
                        outputs=tuple(buffers[d] for d in p.outputs), sizes=p.sizes,
                        params=tuple(sorted(params, key=str)), bindings=p.size_bindings())
        return plan_vectors(kernel, self.fast_math)

    def fuse(self, consumer, at=None):
        """Fuse `consumer` with the definition it reads: the producer is computed inside
        the consumer's loop `at` (default: its outermost loop), tile by tile, so the
        producer's full result is never written to memory."""
        cons = self[consumer]
        producers = [t for t in cons.definition.reads()
                     if t in self._stages and t not in self._hosted_by]
        if len(producers) != 1:
            names = ", ".join(t.name for t in producers) or "none"
            raise ScheduleError(f"fuse: {cons.name} must read exactly one definition to fuse "
                                f"with (it reads: {names})")
        if at is None:
            if not cons.loops:
                raise ScheduleError(f"fuse: {cons.name} has no loop to fuse into")
            at = cons.loops[0]
        self[producers[0]].compute_at(cons, at)
        return self

    def auto(self):
        from .auto import auto_schedule
        auto_schedule(self)
        return self

    def __str__(self):
        return format_nest(self.kernel())

    __repr__ = __str__

    def _repr_html_(self):
        return schedule_html(self)

    def __reduce__(self):
        """A schedule pickles (and copies) as its program and its history, replayed."""
        return (_replayed, (self.program, self.fast_math, tuple(self.history)))

    # ------------------------------------------------------------ legality
    def _check(self, old, new):
        """Refuse a stage state whose local copies no longer lower: their boxes depend
        on the loop order (the error names the primitive and the tensor)."""
        same_nest = [(a.var, a.extent) for a in old.axes] == \
            [(a.var, a.extent) for a in new.axes] and old.packs == new.packs and \
            old.hosted == new.hosted and old.private is new.private
        if (new.packs or new.hosted) and not same_nest:
            lower_stage(new, self._buffers(), self._states)

    def _check_vector(self, prim, state, var):
        """Refuse a vector loop `var` of `state` whose body cannot run on vectors."""
        stage = lower_stage(state, self._buffers(), self._states)
        for loop in walk(stage):
            if isinstance(loop, Loop) and loop.var is var and loop.kind is LoopKind.VECTOR:
                why = vector_refusal(loop, state.fast_math)
                if why is not None:
                    raise ScheduleError(f"{prim}: in stage {state.definition.name}, loop "
                                        f"{var.name} cannot run on vector registers: {why}")

    # ------------------------------------------------------------ history
    def history_json(self):
        return to_json(self.history)

    def replay(self, steps):
        """Apply step records (or their JSON) to this schedule, resolving loops by name."""
        if isinstance(steps, str):
            steps = from_json(steps)
        for st in steps:
            stage = self[st.stage]
            if isinstance(st, Split):
                stage.split(st.loop, st.factor, st.tail)
            elif isinstance(st, Reorder):
                stage.reorder(*st.loops)
            elif isinstance(st, SplitK):
                stage.split_k(st.loop, self._parts(st.parts))
            elif isinstance(st, Privatize):
                stage.privatize(st.loop)
            elif isinstance(st, Pack):
                stage.pack(st.tensor, st.at, st.layout)
            elif isinstance(st, ComputeAt):
                stage.compute_at(st.consumer, st.at)
            elif isinstance(st, SetKind):
                stage._kind(st.loop, LoopKind(st.kind), st.tail)
            elif isinstance(st, Specialize):
                names = {str(x): x for x in list(self.program.sizes) + list(self.program.params)}
                stage.specialize(sp.sympify(st.condition, locals=names))
        return self

    def _parts(self, parts):
        """A recorded split_k part count (steps.recorded_parts) as split_k takes it."""
        if isinstance(parts, str) and parts.startswith("param:"):
            return Param(parts[len("param:"):])
        if isinstance(parts, str) and parts.startswith("auto:"):
            name, rows, length = parts[len("auto:"):].split("|")
            names = {str(x): x for x in self.program.sizes}
            return AutoParts(name, sp.sympify(rows, locals=names), sp.sympify(length, locals=names))
        return parts

    @property
    def buffers(self):
        return [b for b in self._buffers().values() if b.scope is Scope.TEMP]


def _replayed(program, fast_math, history):
    return Schedule(program, fast_math).replay(history)


def schedule(out, fast_math=True):
    """`tex.schedule(out)`: a schedule over the whole DAG that `out` reads."""
    return Schedule(out, fast_math)


def default_schedule(program, fast_math=True):
    """What `tex.compile(out)` uses: the built-in heuristics."""
    return Schedule(program, fast_math).auto()
