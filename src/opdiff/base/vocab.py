"""Names every stage shares: record directions/roles/levels, how pairs match, pair statuses, results, verdicts."""

from __future__ import annotations

# records
DIRECTIONS = ("forward", "backward", "update")  # update: the optimizer's step (capture with optimizer=)
ROLES = ("input", "output", "parameter", "gradient")
LEVELS = ("module", "api", "aten", "param", "graph")
# Record.extra keys of graph-engine captures (docs/fusion.md): the graph value a record holds (equal in two
# runs of one model: tensor name, "tensor|consumer" for a node input), and the original nodes a fused op replaces
GRAPH_VALUE = "graph_value"
PROVENANCE_KEY = "fused_from"
# Record.extra key a reader sets when a checksum the format carries fails: why (the pair is an error, never data)
DAMAGED = "damaged"

# match kinds: how a pair was made
MATCH_NAME = "name"  # same record name on both sides
MATCH_SEQUENCE = "sequence"  # sequence alignment on (module, op, role, pos)
MATCH_MAPPING = "mapping"  # a user mapping file: exact name or regex rename
MATCH_FUSION = "fusion"  # many-to-one: one target op stands for several golden ops
UNMATCHED = "unmatched"  # one side only

# status of a pair: whether numbers could be computed at all
STATUS_COMPARED = "compared"
STATUS_SHAPE_MISMATCH = "shape-mismatch"
STATUS_DTYPE_MISMATCH = "dtype-mismatch"  # only where the compare mode cannot bridge the dtypes (hash mode)
STATUS_UNMATCHED = "unmatched"
STATUS_ERROR = "error"  # data unreadable (corrupt tensor): metrics N/A, reason in err_message
STATUS_NOT_JUDGED = "not-judged"  # both records hold nothing comparable (tfdbg NO_TENSOR): neither agreement nor not

# results of a pair
PASS, WARNING, FAIL, NA = "PASS", "WARNING", "FAIL", "N/A"

# verdicts of a diagnosis
# inconclusive: nothing wrong among the pairs compared, but some could not be read, or one run has ops
# the other lacks (not casts/copies/views): never a pass (docs/reliability.md)
VERDICTS = ("pass", "inputs-differ", "overflow", "fault", "drift", "inconclusive")
