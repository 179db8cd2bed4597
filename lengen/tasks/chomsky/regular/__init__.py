"""Regular tasks of the Chomsky-hierarchy suite (solvable by a finite-state automaton)."""
