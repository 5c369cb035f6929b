"""Errors a user can cause (bad paths, corrupt dumps, wrong options).

The CLI prints these as one line and exits 2; anything else is a bug and keeps its traceback.
"""


class OpdiffError(Exception):
    """A user-facing error: the message names the file and the problem in one line."""


class DumpError(OpdiffError):
    """A dump directory, index or shard is missing, truncated, foreign or corrupt."""
