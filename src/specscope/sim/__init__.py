"""Trace-driven simulation of SD: policies walk the traces, cost models price the steps.

``policies`` decide how many tokens each step proposes; ``plan`` walks a trace under a policy
into steps; ``paper`` and ``mixed`` batch those steps and price them; ``grid`` runs a whole
datasets × proposers × policies × batch sizes grid.
"""
