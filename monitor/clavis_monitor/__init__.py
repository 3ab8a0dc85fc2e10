"""clavis-monitor: the per-host agent (docs/monitor.md).

Standard library and clavis_contracts only, so compute hosts need neither OR-Tools nor
pymoo.
"""
