"""The kernel library, written in the Argus DSL (each kernel carries its invariants)."""
