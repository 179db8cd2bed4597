"""Deterministic context-free tasks of the Chomsky-hierarchy suite (automaton + stack)."""
