"""Names every stage shares: record directions/roles/levels, how pairs match, pair statuses, results, verdicts."""

from __future__ import annotations

from typing import Final, Literal, get_args

# records
Direction = Literal["forward", "backward", "update"]  # update: the optimizer's step (capture with optimizer=)
Role = Literal["input", "output", "parameter", "gradient"]
Level = Literal["module", "api", "aten", "param", "graph"]  # a record's level, as readers and backends write it
DIRECTIONS: tuple[Direction, ...] = get_args(Direction)
ROLES: tuple[Role, ...] = get_args(Role)
LEVELS: tuple[Level, ...] = get_args(Level)
# the levels a torch capture (and so `opdiff run`, `hunt`, `diagnose --level`) offers, coarse to fine
TorchLevel = Literal["module", "api", "aten"]
TORCH_LEVELS: tuple[TorchLevel, ...] = get_args(TorchLevel)
# what a capture keeps of each tensor: data and statistics, statistics only, statistics and a content hash
Mode = Literal["tensor", "stats", "hash"]
MODES: tuple[Mode, ...] = get_args(Mode)
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
PairStatus = Literal["compared", "shape-mismatch", "dtype-mismatch", "unmatched", "error", "not-judged"]
STATUS_COMPARED: Final = "compared"
STATUS_SHAPE_MISMATCH: Final = "shape-mismatch"
STATUS_DTYPE_MISMATCH: Final = "dtype-mismatch"  # only where the compare mode cannot bridge the dtypes (hash mode)
STATUS_UNMATCHED: Final = "unmatched"
STATUS_ERROR: Final = "error"  # data unreadable (corrupt tensor): metrics N/A, reason in err_message
STATUS_NOT_JUDGED: Final = "not-judged"  # both records hold nothing comparable (tfdbg NO_TENSOR): neither agreement nor not

# results of a pair
PairVerdict = Literal["PASS", "WARNING", "FAIL", "N/A"]
PASS: Final = "PASS"
WARNING: Final = "WARNING"
FAIL: Final = "FAIL"
NA: Final = "N/A"

# verdicts of a diagnosis
# inconclusive: nothing wrong among the pairs compared, but some could not be read, or one run has ops
# the other lacks (not casts/copies/views): never a pass (docs/reliability.md)
Verdict = Literal["pass", "inputs-differ", "overflow", "fault", "drift", "inconclusive"]
VERDICTS: tuple[Verdict, ...] = get_args(Verdict)

# what replaying one op showed (replay.ReplayResult): ran (ok), could not run here (unsupported), failed (error);
# skipped: diagnose's confirmation did not replay (no culprit, no tensors, not supported here)
ReplayStatus = Literal["ok", "unsupported", "error", "skipped"]

