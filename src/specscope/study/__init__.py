"""`specscope study`: the whole study in one command (trace, measure, fit, simulate, report)."""
