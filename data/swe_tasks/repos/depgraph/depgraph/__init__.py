from depgraph.graph import CycleError, toposort

__all__ = ["toposort", "CycleError"]
