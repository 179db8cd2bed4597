"""Context-sensitive tasks of the Chomsky-hierarchy suite (automaton + bounded tape)."""
