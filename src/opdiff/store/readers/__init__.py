"""Readers of dump formats (the contract adds READERS here; tfdbg is one line of it)."""
