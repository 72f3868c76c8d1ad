"""Closed-form bounds on what speculative decoding can reach."""
