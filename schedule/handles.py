"""Schedule handles: `s[C]` (a StageHandle) and its loops (LoopHandle). Each primitive
method resolves its loop arguments, calls a pure primitive (schedule/primitives.py) for
the new state, and commits it with its step record once the schedule has checked it
(`Schedule._check`): a refused primitive changes nothing."""
import re
import warnings
from dataclasses import replace

import numpy as np
import tex.symbolic as sym

from tex.errors import ScheduleError
from tex.expr import AutoParts, Index, Param, all_of, negation
from tex.indices import format_size
from tex.symbolic.parse import WORDS as _CONDITION_WORDS

from . import primitives as P
from .display import stage_html
from .ir import Guard, LoopKind, Stage
from .printer import format_nest
from .stage import lower_stage
from .steps import (ComputeAt, Fuse, NotFused, Pack, Privatize, Reorder, SetKind, Specialize,
                    Split, SplitK, SplitParts, Unfuse, recorded_parts)
from .strategies import reduction_strategy
from tex import forksafe


class LoopHandle:
    """A loop of one stage of one schedule: `.name`, `.is_reduction`."""
    __slots__ = ("stage", "var")

    def __init__(self, stage, var):
        self.stage, self.var = stage, var

    @property
    def name(self):
        return self.var.name

    @property
    def is_reduction(self):
        axis = self.stage.state.axis(self.var)
        return bool(axis and axis.reduction)

    @property
    def kind(self):
        axis = self.stage.state.axis(self.var)
        return axis.kind.value if axis else None

    def __repr__(self):
        red = ", reduction" if self.is_reduction else ""
        return f"<loop {self.name} of {self.stage.name}{red}>"

    def __reduce__(self):
        return (_loop_of, (self.stage, self.name))


def _python_int(n):
    """A numpy integer (a factor from an array's shape or np.arange) as the Python int it
    is; anything else as given, for the primitive to judge."""
    return int(n) if isinstance(n, np.integer) else n


def _check_param_name(prim, handle, parts):
    """A part count's tex.param must not take the name of a size, tensor, definition or
    index of the program: printed nests (`ceil(K/K)`) and specialize's conditions
    (`"K >= 20"`) would not say which is meant."""
    if not isinstance(parts, Param) or isinstance(parts, AutoParts):
        return
    program = handle.sched.program
    kinds = [("size", {str(x) for x in program.sizes}),
             ("tensor", {t.name for t in program.inputs}),
             ("definition", {d.name for d in program.definitions}),
             ("index", {x.name for d in program.definitions for x in d.indices} |
              {x.name for d in program.definitions if d.reduction is not None
               for x in d.reduction.over})]
    for kind, names in kinds:
        if parts.name in names:
            article = "an" if kind == "index" else "a"
            raise ScheduleError(f"{prim}: in stage {handle.name}, parameter {parts.name} has "
                                f"the name of {article} {kind} of the program; give it a "
                                f"name of its own (tex.param(\"P\"))")


def _check_one_level(sched, d, cons):
    """compute_at nests one level: `d` inside `cons`, where `d` is read by `cons` alone
    and neither hosts nor is hosted. A chain (mx inside E inside S) lowered E inside S
    without mx, and a producer with a second reader was not stored for it: both read
    memory never written (an adversarial test's finding)."""
    hosted = [p.name for p, c in sched._hosted_by.items() if c is d]
    if hosted:
        raise ScheduleError(f"compute_at: {d.name} computes {hosted[0]} inside it, and "
                            "compute_at nests one level: compute one inside the other, "
                            "not both")
    if cons.definition in sched._hosted_by:
        raise ScheduleError(f"compute_at: {cons.name} is computed inside "
                            f"{sched._hosted_by[cons.definition].name}, and compute_at "
                            f"nests one level: compute one inside the other, not both")
    others = [t.name for t in sched._stages if t is not cons.definition and d in t.reads()]
    if others:
        raise ScheduleError(f"compute_at: {d.name} is also read by {others[0]}; computed "
                            f"inside {cons.name} it would not be stored for {others[0]}")


class StageHandle:
    """`s[C]`: the schedule of one definition."""

    def __init__(self, sched, defn):
        self.sched, self.definition = sched, defn
        self.name = defn.name
        self.origin = {}           # user's tex.indices object -> this stage's loop variable
        self.specializations = []  # Specialization handles, tried in order at run time

    @property
    def state(self):
        return self.sched._states[self.definition]

    def _store(self, state):
        self.sched._states[self.definition] = state

    def _apply(self, state, *steps):
        """Make `state` this stage's, recording `steps`, once it is known legal (a
        refused state raises ScheduleError and changes nothing)."""
        sched, d = self.sched, self.definition
        if d in sched._fused:
            root = sched._fused[d].into.name
            raise ScheduleError(f"stage {d.name} runs in {root}'s epilogue (fused): its loops "
                                f"are {root}'s; schedule {root}, or s.unfuse({d.name!r}) first")
        if d in sched._hosted_by:
            host = sched._hosted_by[d].name
            raise ScheduleError(f"stage {d.name} is computed inside {host} (compute_at), from "
                                f"its definition over the part {host} reads: it has no loops "
                                f"of its own to schedule there; schedule {host}'s loops")
        sched._check(self.state, state)
        if sched._replaying is None:
            sched._check_epilogue(d, state)
        else:                       # a replay checks the last state of each stage it
            sched._replaying[id(self)] = self   # changes: a strategy's steps were accepted
        self._store(state)                      # together, not one by one
        for step in steps:
            self._record(step)
        if self.specializations and not (sched._in_auto or sched._replaying is not None) \
                and not self._told_general:
            self._told_general = True
            names = ", ".join(f"s[{sp_.name!r}]" for sp_ in self.specializations[:3])
            more = ", ..." if len(self.specializations) > 3 else ""
            warnings.warn(f"stage {self.name} has {len(self.specializations)} "
                          f"specialized nest{'s' * (len(self.specializations) > 1)} "
                          f"({names}{more}; print(s) shows their conditions): this step "
                          f"changes only its general nest, which calls run when no "
                          "specialization's condition holds", UserWarning, stacklevel=3)

    _told_general = False       # the warning above, once a stage

    def _record(self, step):
        self.sched._record(step)

    def _steps(self):
        """The list this handle's steps are recorded in (`_record`)."""
        return self.sched._history

    @property
    def loops(self):
        """The stage's loops, outermost first, as handles (`.name`, `.is_reduction`) that
        the primitives take (as they take the loop's name or, before it is split, the
        tex.indices object)."""
        return [LoopHandle(self, a.var) for a in self.state.axes]

    def check_schedule(self, sched):
        """Refuse this stage where a step of `sched` names it and it is another's."""
        if self.sched is not sched:
            raise ScheduleError(f"stage {self.name} belongs to another schedule: name it "
                                f"in this one (s[{self.name.partition('#')[0]!r}])")

    def _var(self, prim, loop):
        """A loop argument -> this stage's loop variable (refusing other stages' loops)."""
        if isinstance(loop, LoopHandle):
            if loop.stage is not self:
                raise ScheduleError(f"{prim}: loop {loop.name} belongs to stage "
                                    f"{loop.stage.name} of "
                                    f"{'another schedule' if loop.stage.sched is not self.sched else 'this schedule'}"
                                    f", not to stage {self.name}")
            var = loop.var
        elif isinstance(loop, Index):
            var = self.state.subst.get(loop)
            if var is None or self.state.axis(var) is None:
                raise ScheduleError(f"{prim}: index {loop.name} is not a loop of stage "
                                    f"{self.name} (already split, or not one of its indices)")
        elif isinstance(loop, str):
            matches = [a.var for a in self.state.axes if a.name == loop]
            if not matches:
                names = ", ".join(a.name for a in self.state.axes)
                raise ScheduleError(f"{prim}: stage {self.name} has no loop named {loop!r} "
                                    f"(loops: {names})")
            var = matches[0]
        else:
            raise ScheduleError(f"{prim}: {loop!r} is not a loop handle, index or name")
        if self.state.axis(var) is None:
            raise ScheduleError(f"{prim}: loop {var.name} is no longer a loop of stage "
                                f"{self.name} (it was split)")
        return var

    # ------------------------------------------------------------ primitives
    def split(self, loop, factor, tail="peel"):
        """Split `loop` into an outer loop over blocks of `factor` iterations and an inner
        one within a block: returns their handles (named `io`, `ii` for `i`). `factor`
        need not divide the extent: `tail` "peel" shortens the last block, "guard" runs
        whole blocks with each iteration past the end skipped, "mask" as "guard" for an
        inner loop then vectorized (its guard becomes a mask on the vector lanes)."""
        var = self._var("split", loop)
        factor = _python_int(factor)
        state, outer, inner = P.split(self.state, var, factor, P.Tail.parse(tail))
        self._apply(state, Split(self.name, var.name, factor, P.Tail.parse(tail).value))
        return LoopHandle(self, outer), LoopHandle(self, inner)

    def split_k(self, loop, parts):
        """Split a reduction loop into `parts` parallel chunks with private partial
        results and a merge; `parts` may be `tex.param("P")` (chosen at call time)."""
        var = self._var("split_k", loop)
        parts = _python_int(parts)
        _check_param_name("split_k", self, parts)
        state, outer, inner = P.split_k(self.state, var, parts)
        self._apply(state, SplitK(self.name, var.name, recorded_parts(parts)))
        return LoopHandle(self, outer), LoopHandle(self, inner)

    def split_parts(self, loop, parts):
        """Split a loop into `parts` chunks (the outer loop counts them): split_k's split
        without partial results; `parts` may be `tex.param("P")`."""
        var = self._var("split_parts", loop)
        parts = _python_int(parts)
        _check_param_name("split_parts", self, parts)
        state, outer, inner = P.split_parts(self.state, var, parts)
        self._apply(state, SplitParts(self.name, var.name, recorded_parts(parts)))
        return LoopHandle(self, outer), LoopHandle(self, inner)

    def privatize(self, loop):
        """Keep the partial results of reduction loop `loop` apart and merge them after."""
        var = self._var("privatize", loop)
        self._apply(P.privatize(self.state, var), Privatize(self.name, var.name))

    def pack(self, tensor, at, layout="box"):
        """Copy what the loops below `at` read of `tensor` into a contiguous buffer:
        `layout="box"` keeps the tensor's dimensions, `layout="loops"` lays it out in the
        order the loops read it (BLIS's packed micro-panels, zero-padded)."""
        if isinstance(tensor, str):
            try:
                tensor = self.sched.program.tensor(tensor)
            except KeyError:
                names = ", ".join(sorted(t.name for t in self.sched.program.inputs))
                raise ScheduleError(f"pack: in stage {self.name}, the program has no tensor "
                                    f"{tensor!r} (its inputs: {names})") from None
        var = self._var("pack", at)
        state = P.pack(self.state, tensor, var, layout)
        self._apply(state, Pack(self.name, tensor.name, var.name, state.packs[-1][2].value))

    def compute_at(self, consumer, at):
        """Compute this definition inside loop `at` of `consumer`, only over the part the
        consumer reads below `at`, into a local buffer (never written to memory whole)."""
        sched = self.sched
        if isinstance(consumer, StageHandle):
            consumer.check_schedule(sched)
        cons = consumer if isinstance(consumer, StageHandle) else sched[consumer]
        d = self.definition
        if cons.definition is d:
            raise ScheduleError(f"compute_at: {d.name} cannot be computed inside itself; "
                                "name the stage that reads it")
        if d in sched.program.outputs:
            raise ScheduleError(f"compute_at: {d.name} is an output of the program; it must be "
                                "computed whole")
        if d in sched._hosted_by:
            raise ScheduleError(f"compute_at: {d.name} is already computed inside "
                                f"{sched._hosted_by[d].name}")
        for x in (d, cons.definition):
            # a stage in another's epilogue has no nest of its own (and the root it runs
            # in does not store it): computing it inside a consumer read memory never
            # written
            if x in sched._fused:
                raise ScheduleError(f"compute_at: {x.name} runs in "
                                    f"{sched._fused[x].into.name}'s epilogue (fused); "
                                    f"s.unfuse({x.name!r}) first")
        _check_one_level(sched, d, cons)
        if self.specializations:
            raise ScheduleError(f"compute_at: stage {d.name} has specialized schedules "
                                f"(specialize, or the auto schedule of a contraction); inside "
                                f"{cons.name} it is computed by one nest only, and they would "
                                "be dropped: compute_at before specializing")
        var = cons._var("compute_at", at)
        if cons.specializations or isinstance(cons, Specialization):
            base = cons.parent if isinstance(cons, Specialization) else cons
            raise ScheduleError(f"compute_at: stage {base.name} has specialized schedules "
                                "(specialize, or the auto schedule of a contraction); "
                                f"{d.name} can be computed inside one nest only: fuse "
                                "before specializing")
        own = [st for st in sched._history if st.stage.partition("#")[0] == d.name and
               not isinstance(st, (Fuse, Unfuse, NotFused))]
        if own:
            # inside the consumer it is computed from its definition over the part read
            # there (primitives.host): its own steps would be dropped without a word
            steps = f"{len(own)} step{'s' * (len(own) != 1)}"
            raise ScheduleError(f"compute_at: {d.name} has a schedule of its own ({steps}); "
                                f"inside {cons.name} it is computed from its definition over "
                                f"the part {cons.name} reads, and those steps (yours or "
                                "s.auto()'s) would be dropped: compute_at before scheduling "
                                "it, then schedule the consumer's loops")
        cons._apply(P.host(cons.state, d, var), ComputeAt(self.name, cons.name, var.name))
        sched._hosted_by[d] = cons.definition

    def reduction_strategy(self, name, tail="peel", accumulators=None):
        """How the innermost reduction loop uses vector registers (seeds/004):
        "inner_reduction", "vector_accumulator" or "inner_parallel" (see
        schedule/strategies.py), built from the primitives, whose steps go to
        `s.history`; `tail` is the vector loops' tail, "peel" or "mask"; `accumulators`
        the vector accumulator's count of vectors. A refused strategy changes nothing."""
        state, steps = reduction_strategy(self.state, name, tail, accumulators)
        # (recorded under this handle's name: a specialization's are C#n, not C)
        steps = [replace(st, stage=self.name) for st in steps]
        vector = next(a for a in reversed(state.axes) if a.kind is LoopKind.VECTOR)
        self.sched._check_vector("reduction_strategy", state, vector.var)
        self._apply(state, *steps)

    def _condition(self, text, known):
        """A condition written as a string, as `print(s)` and `s.history` show them
        (`M == 1 and N >= 32`, `N % 4 != 0`, `min(...)`, `ceil(N/64)`) or in sympy's
        spelling (`Eq(M, 1) & (N >= 32)`), read with the program's own names only."""
        names = {str(x): x for x in known}
        words = set(re.findall(r"[A-Za-z_]\w*", text))
        unknown = sorted(words - set(names) - _CONDITION_WORDS)
        hint = "write a relation of the program's sizes, such as \"M >= 64 and N >= 16\""
        if unknown:
            raise ScheduleError(f"specialize: in stage {self.name}, the condition {text!r} "
                                f"uses {', '.join(unknown)}, which are not sizes or "
                                f"parameters of the program: {hint}")
        try:
            return sym.sympify(text, locals=names)
        except (sym.SympifyError, TypeError, SyntaxError) as err:
            raise ScheduleError(f"specialize: in stage {self.name}, {text!r} is not a "
                                f"condition tex can read ({type(err).__name__}): "
                                f"{hint}") from None

    def specialize(self, condition, schedule=None, params=()):
        """A specialization of this stage (Halide's `specialize`): a handle whose
        schedule starts as this one's and is used, at run time, for calls where
        `condition` -- a relation of sizes and call-time parameters, such as
        `(M >= 6) & (N >= 16)`, or the text `"M >= 6 and N >= 16"` -- holds. Specializations are tried in the order they
        were made; calls where none holds run this stage's own schedule. Both nests
        are compiled into the one kernel. A condition that fixes a size (`Eq(M, 3)`,
        alone or in a conjunction) makes it a constant in the specialization's loops, so
        they may be unrolled.

        `schedule(spec)`, for tex's heuristics, is the specialization's schedule, run
        when something first needs it (its state, its steps, its nest in a build;
        see Specialization) rather than now; `params`: the parameters it adds (AutoParts),
        which the kernel's signature needs before."""
        if self.definition in self.sched._fused:
            root = self.sched._fused[self.definition].into.name
            raise ScheduleError(f"specialize: stage {self.name} runs in {root}'s epilogue "
                                f"(fused), in {root}'s loops: a specialization of it would "
                                f"never run; specialize {root}, or s.unfuse({self.name!r}) "
                                "first")
        if self.definition in self.sched._hosted_by:
            raise ScheduleError(f"specialize: stage {self.name} is computed inside "
                                f"{self.sched._hosted_by[self.definition].name} "
                                "(compute_at), by one nest only: a specialization of it would "
                                "never run")
        known = set(self.sched.program.sizes) | set(self.sched.program.params) | {
            x for st in self.sched.stages for x in st.params() if isinstance(x, Param)}
        cond = self._condition(condition, known) if isinstance(condition, str) else \
            sym.sympify(condition)
        if (cond is sym.true or cond is sym.false) and not isinstance(condition, bool):
            raise ScheduleError(f"specialize: in stage {self.name}, the condition is always "
                                f"{'true' if cond is sym.true else 'false'} (sizes are "
                                "integers of at least 0): there is nothing to specialize on")
        if cond is sym.true or cond is sym.false or not isinstance(cond, sym.Boolean):
            raise ScheduleError(f"specialize: in stage {self.name}, {condition!r} is not a "
                                "condition on sizes (a relation such as M >= 64)")
        unknown = [str(x) for x in cond.free_symbols if x not in known]
        if unknown:
            raise ScheduleError(f"specialize: in stage {self.name}, the condition {cond} uses "
                                f"{', '.join(sorted(unknown))}, which are not sizes or "
                                "parameters of the program")
        spec = Specialization(self, cond, len(self.specializations) + 1)
        fixed = fixed_sizes(cond, self.sched.program.sizes)
        if fixed:
            spec._store(with_sizes(spec.state, fixed))
        self.specializations.append(spec)
        self.sched._record(Specialize(self.name, format_size(cond)))
        if schedule is not None:
            spec._defer(schedule, params)
        return spec

    def params(self):
        """The parameters (tex.param, AutoParts) in this stage's loop extents."""
        return self._state_params()

    def _state_params(self):
        return {x for a in self.state.axes for x in sym.sympify(a.extent).free_symbols
                if isinstance(x, Param)}

    def lower(self, buffers, states, epilogue=None, holes=False):
        """This stage's Stage node: its own nest, or `if c1: spec1 elif c2: ... else:
        own` when it has specializations; with the `epilogue` of its fused consumers.
        `holes`: the choices' nests are left empty (Guard.hole), to be lowered when a
        build needs them (schedule/nests.py); not with an epilogue, which spans them."""
        from dataclasses import replace
        holes = bool(holes and epilogue is None and self.specializations)

        def nest(handle):
            if holes:
                return ()
            state = handle.state
            if epilogue is not None:
                state = replace(state, epilogue=epilogue)
            return lower_stage(state, buffers, states).body
        body = nest(self)
        if self.specializations:
            body, own, taken = [], body, []
            for spec in self.specializations:
                cond = all_of(spec.condition, *[negation(c) for c in taken])
                body.append(Guard(cond, nest(spec), choice=spec.name,
                                  shown=spec.condition, hole=holes))
                taken.append(spec.condition)
            body.append(Guard(all_of(*[negation(c) for c in taken]), own, choice=self.name,
                              shown=sym.true, hole=holes))
        note = None
        if epilogue is not None:
            from .epilogue import around, check_races, describe, privatize_parts
            body, parted = privatize_parts(epilogue, body)
            check_races(epilogue, body, self.definition.name, parted)
            body = around(epilogue, body, parted)
            note = describe(epilogue)
        return Stage(self.definition, tuple(body), note)

    def choice_states(self):
        """{choice name: its state}: the specializations' and this stage's own (the
        names of Guard.choice); a deferred specialization's is a function that runs its
        schedule and returns the state it gave."""
        return {**{spec.name: spec.scheduled_state if spec.pending else spec.state
                   for spec in self.specializations},
                self.name: self.state}

    def tile(self, *loops_and_factors, tail="peel"):
        """`tile(i, 64, j, 64)`: split each, then order the outer loops before the inner."""
        if len(loops_and_factors) % 2 or not loops_and_factors:
            raise ScheduleError(f"tile: in stage {self.name}, loops and factors come in "
                                "pairs, tile(i, 64, j, 64)"
                                + (f": {loops_and_factors[-1]!r} has no factor"
                                   if loops_and_factors else ""))
        pairs = list(zip(loops_and_factors[::2], loops_and_factors[1::2]))
        # all or nothing: a refused pair undoes the splits made before it
        state, recorded = self.state, self._steps()
        steps = len(recorded)
        outs, ins = [], []
        try:
            for loop, factor in pairs:
                o, i = self.split(loop, factor, tail)
                outs.append(o)
                ins.append(i)
            self.reorder(*outs, *ins)
        except ScheduleError as err:
            self._store(state)
            del recorded[steps:]
            raise ScheduleError("tile: " + re.sub(r"^\w+: ", "", str(err))) from None
        return tuple(outs + ins)

    def reorder(self, *loops):
        """Put these loops in this order (outermost first), in the places they take up
        now; a loop whose extent depends on another stays inside it."""
        vars_ = [self._var("reorder", x) for x in loops]
        self._apply(P.reorder(self.state, vars_), Reorder(self.name, tuple(v.name for v in vars_)))

    def _kind(self, loop, kind, tail="peel", checked=True):
        var = self._var(kind.value, loop)
        state = P.set_kind(self.state, var, kind, tail)
        if kind is LoopKind.VECTOR and checked:
            self.sched._check_vector("vectorize", state, var)
        self._apply(state, SetKind(self.name, var.name, kind.value, state.axis(var).tail.value))

    def parallel(self, loop):
        """Share `loop`'s iterations among the threads (tex.set_num_threads); a reduction
        loop only with private partial results (split_k, privatize)."""
        self._kind(loop, LoopKind.PARALLEL)

    def vectorize(self, loop, tail="peel"):
        """Run the innermost loop on the target's vector registers; `tail` is "peel" (a
        scalar remainder loop) or "mask" (masked loads and stores for the last vector).
        A loop whose body cannot run on vectors is refused, with the reason."""
        self._kind(loop, LoopKind.VECTOR, tail)

    def vectorize_known(self, loop, tail="peel"):
        """`vectorize` for tex's own heuristics, on a loop they know runs on vectors (the
        columns of a float contraction's register tile): without the legality check,
        which lowers the whole stage (~5 ms, seven times in a matmul's auto schedule).
        A replayed history checks it as usual."""
        self._kind(loop, LoopKind.VECTOR, tail, checked=False)

    def unroll(self, loop):
        """Emit `loop`'s body once for each of its iterations (a loop of a constant
        extent, such as the inner loop of a split)."""
        self._kind(loop, LoopKind.UNROLLED)

    def __str__(self):
        sched = self.sched
        return format_nest(self.lower(sched._buffers(), sched._states,
                                      sched._epilogue(self.definition)))

    def __repr__(self):
        loops = ", ".join(f"{h.name}{' (reduction)' if h.is_reduction else ''}"
                          for h in self.loops)
        return f"<stage {self.name} of a schedule of " \
               f"{', '.join(o.name for o in self.sched.program.outputs)}: loops {loops}>"

    def _repr_html_(self):
        return stage_html(self)

    def __reduce__(self):
        return (_stage_of, (self.sched, self.name))


class Specialization(StageHandle):
    """`s[C].specialize(cond)`: the schedule of C for calls where `cond` holds. It has
    the primitives of a stage; its steps are recorded under the name `C#n`.

    A deferred one (`specialize(cond, schedule)`, the auto schedule's dozen nests of a
    symbolic matmul, of which a call runs one) runs `schedule` when first needed: its
    state read, the schedule's history read or stepped further, its nest built
    (schedule/nests.py). Until then the history holds a `Deferred` in place of its
    steps, which are recorded there when it runs (as if it had run at once). It runs in
    the target it was made in."""

    def __init__(self, parent, condition, number):
        super().__init__(parent.sched, parent.definition)
        self.parent, self.condition = parent, condition
        self.name = f"{parent.name}#{number}"
        self._state = parent.state
        self.origin = dict(parent.origin)
        self._deferred = None       # Deferred, until its schedule runs
        self._scheduled = None      # the state its deferred schedule gave

    def _defer(self, schedule, params):
        from .target import target
        self._deferred = Deferred(self, schedule, tuple(params), target())
        self.sched._record(self._deferred)

    @property
    def pending(self):
        return self._deferred is not None and not self._deferred.ran

    @property
    def state(self):
        if self._deferred is not None and (self.pending or self._deferred.error):
            self._deferred.run()        # (raises again what it raised: no half schedule)
        return self._state

    def scheduled_state(self):
        """The state as its own schedule left it (a deferred one's, run now if not yet):
        what a kernel compiled before any further step builds."""
        state = self.state
        return self._scheduled if self._scheduled is not None else state

    def params(self):
        if self.pending:
            return set(self._deferred.params)
        return super().params()

    def _record(self, step):
        if self._deferred is not None and self._deferred.running:
            self._deferred.steps.append(step)
        else:
            self.sched._record(step)

    def _steps(self):
        if self._deferred is not None and self._deferred.running:
            return self._deferred.steps
        return self.sched._history

    def _store(self, state):
        self._state = state

    def specialize(self, condition):
        raise ScheduleError(f"specialize: {self.name} is a specialization already; "
                            f"specialize {self.parent.name} with a combined condition")

    def lower(self, buffers, states, epilogue=None):
        from dataclasses import replace
        state = self.state if epilogue is None else replace(self.state, epilogue=epilogue)
        return lower_stage(state, buffers, states)


class Deferred:
    """A specialization's schedule not run yet (Specialization), in the history in
    place of its steps; `steps` once it ran."""

    def __init__(self, spec, schedule, params, target):
        self.spec, self.schedule, self.params, self.target = spec, schedule, params, target
        self.steps, self.ran, self.running = [], False, False
        self.error = None           # what the schedule raised: raised again at each use
        self._lock = forksafe.rlock()

    @property
    def stage(self):
        return self.spec.name

    def run(self):
        from .target import overriding
        with self._lock:
            if self.error is not None:      # (a half-scheduled nest is never built)
                raise _again(self.error)
            if self.ran or self.running:
                return
            self.running = True
            try:
                with overriding(self.target):
                    self.schedule(self.spec)
                extra = self.spec._state_params() - set(self.params)
                if extra:       # the kernel's signature was made without them
                    raise RuntimeError(f"tex: the deferred schedule of {self.spec.name} "
                                       f"added parameters {sorted(map(str, extra))} it did "
                                       "not declare")
            except Exception as e:
                self.error = _again(e)      # (without its traceback: the caller's frames)
                raise
            finally:
                self.running, self.ran = False, True
                self.spec._scheduled = self.spec._state

    def expanded(self):
        """Its steps (running the schedule first if it has not run)."""
        self.run()
        return list(self.steps)

    def __repr__(self):
        return f"Deferred({self.stage!r}{', ran' if self.ran else ''})"


def _again(error):
    """A copy of an exception, to raise once more without the first raise's frames."""
    try:
        return type(error)(*error.args)
    except Exception:       # noqa: BLE001 -- an exception class with another signature
        return RuntimeError(str(error))


def fixed_sizes(cond, sizes):
    """{size: value} for each conjunct of `cond` that is Eq(size, integer)."""
    terms = cond.args if isinstance(cond, sym.And) else (cond,)
    out = {}
    for t in terms:
        if isinstance(t, sym.Eq):
            a, b = t.args
            if b in sizes and a.is_Integer:
                a, b = b, a
            if a in sizes and b.is_Integer:
                out[a] = b
    return out


def with_sizes(state, fixed):
    """`state` with the sizes in `fixed` replaced by their values in every loop extent
    and guard."""
    axes = [replace(a, extent=sym.sympify(a.extent).xreplace(fixed)) for a in state.axes]
    return state.with_axes(axes, guards=tuple(g.xreplace(fixed) for g in state.guards))


def _stage_of(sched, name):
    return sched[name]


def _loop_of(stage, name):
    return LoopHandle(stage, stage._var("unpickle", name))
