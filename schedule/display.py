"""Rich display of schedules and their stages (`_repr_html_`): the stages as a table
(what each computes, its loops, what is computed inside it), the loop nest as `print(s)`
shows it, and the replayable history."""
from tex.html import box, code, details, escape, pre, table

OPEN_LINES = 80        # a longer loop nest is shown collapsed
OPEN_STEPS = 20        # a longer history likewise


def schedule_html(s):
    p = s.program
    hosted = {}
    for producer, consumer in s._hosted_by.items():
        hosted.setdefault(consumer, []).append(producer.name)
    for consumer, fused in s._fused.items():
        hosted.setdefault(fused.into, []).append(f"{consumer.name} (epilogue)")
    rows = []
    for st in s.stages:
        if st.definition in s._hosted_by or st.definition in s._fused:
            continue
        loops = ", ".join(_loop_text(h) for h in st.loops)
        inside = ", ".join(hosted.get(st.definition, [])) or ""
        specs = len(st.specializations)
        rows.append((st.name, ("html", code(st.definition.notation)), loops, inside,
                     specs or ""))
    steps = s.history
    history = "".join(f"<li>{code(repr(step))}</li>" for step in steps)
    about = (f"history ({len(steps)} step{'s' if len(steps) != 1 else ''}, replayable on a "
             f"fresh schedule: {code(f'tex.schedule({_outputs(p)}).replay(s.history)')})")
    if not history:
        history = f"<div>{about}:</div><div><i>no steps: the default loop nest</i></div>"
    elif len(steps) > OPEN_STEPS:
        history = f"<details><summary>{about}</summary><ol>{history}</ol></details>"
    else:
        history = f"<div>{about}:</div><ol>{history}</ol>"
    nest = str(s)
    lines = nest.count("\n") + 1
    if lines > OPEN_LINES:     # a symbolic matmul's 13 nests print 860 lines: collapsed
        nest = details(f"loop nest ({lines} lines; print(s) shows it)", nest, lines)
    else:
        nest = "<div>loop nest:</div>" + pre(nest)
    return box(f"schedule of {escape(', '.join(o.name for o in p.outputs))} "
               f"{code(p.signature())}",
               table(["kernel stage", "computes", "loops (outermost first)",
                      "computed inside", "specializations"], rows),
               _not_fused(s), nest, history)



def _not_fused(s):
    rows = [(c, p, why) for (c, p), why in s.not_fused.items()
            if s[c].definition not in s._fused]
    return table(["not fused", "into", "why"], rows) if rows else ""


def _outputs(p):
    names = ", ".join(o.name for o in p.outputs)
    return names if len(p.outputs) == 1 else f"({names})"



def _loop_text(handle):
    kind = handle.kind
    notes = [kind] if kind and kind != "serial" else []
    if handle.is_reduction:
        notes.append("reduction")
    return handle.name + (f" ({', '.join(notes)})" if notes else "")



def stage_html(stage):
    loops = ", ".join(_loop_text(h) for h in stage.loops)
    return box(f"stage {escape(stage.name)} of a schedule",
               pre(stage.definition.notation),
               f"<div>loops: {escape(loops)}</div>",
               pre(str(stage)))
