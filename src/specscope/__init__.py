"""specscope: does speculative decoding pay off for my model, my workload and my batch size?

The vocabulary (k, step, acc_len, draft_len, α, τ, c, speedup, policies) is defined once in
the project's DESIGN notes and in the docstrings of `specscope.trace.schema` and
`specscope.sim.policies`.
"""

__version__ = "0.1.0"
