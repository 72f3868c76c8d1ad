"""Learned causal policies: what a policy may know before a step (:mod:`.observation`), the
features it reads of that (:mod:`.features`), the decision rule per batch size (:mod:`.chooser`)
and the portable policy file holding them (:mod:`.learned`). Below the engine's proposers and
the simulator, so that both run the same policy."""
