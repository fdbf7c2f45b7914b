"""tex.scheduler: the loop-nest IR, lowering, schedule primitives and heuristics."""
