"""Learned causal policies: what a policy may know before a step (:mod:`.observation`) and the
portable decision rule a fitted policy file holds (:mod:`.learned`). Below the engine's
proposers and the simulator, so that both run the same policy."""
