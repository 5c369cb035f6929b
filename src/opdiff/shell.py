"""Interactive shell over one dump or a golden/target pair: list ops, show nodes, print and compare tensors.

In the spirit of precision_tool's shell: `ls`, `ni` (node info), `pt` (print tensor), `cmp`,
`compare`, `fails`, `diag`. Record arguments take a name, `#INDEX`, or a regex matching one record.
numpy only; comparison and diagnosis load on first use.
"""

from __future__ import annotations

import cmd
import json
import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np
from rich.console import Console
from rich.table import Table

from .base import numfmt
from .base.termsafe import escape_markup, safe
from .errors import OpdiffError
from .store import Dump, Record
from .store.format import numpy_dtype

if TYPE_CHECKING:
    from .base.pair import PairResult
    from .compare.run import Comparison
    from .diagnose.verdict import Diagnosis
    from .match.mapping import Mapping


@dataclass
class Session:
    """What the shell looks at: one dump, or golden and target, and results computed on demand."""

    golden: Dump
    target: Dump | None = None
    mapping: Mapping | None = None
    comparison: Comparison | None = None
    diagnosis: Diagnosis | None = None
    _pair_of: dict[str, PairResult] = field(default_factory=dict)

    def side(self, which: str) -> Dump:
        if which in ("g", "golden"):
            return self.golden
        if which in ("t", "target"):
            if self.target is None:
                raise OpdiffError("no target dump open (start the shell with GOLDEN TARGET)")
            return self.target
        raise OpdiffError(f"unknown side {which!r}: use golden or target")

    def compare(self) -> Comparison:
        if self.target is None:
            raise OpdiffError("compare needs a target dump (start the shell with GOLDEN TARGET)")
        if self.comparison is None:
            from .compare import compare

            self.comparison = compare(self.golden, self.target, mapping=self.mapping)
            for r in self.comparison.results:
                for rec in (r.golden, r.target):
                    if rec is not None:
                        self._pair_of.setdefault(rec.name, r)
        return self.comparison

    def pair_for(self, name: str) -> PairResult | None:
        self.compare()
        return self._pair_of.get(name)


def resolve(dump: Dump, ref: str) -> Record:
    """A record by exact name, `#INDEX`, or a regex that matches exactly one record name."""
    if ref in dump:
        return dump[ref]
    if ref.startswith("#") and ref[1:].isdigit():
        i = int(ref[1:])
        if 0 <= i < len(dump.records):
            return dump.records[i]
        raise OpdiffError(f"no record #{i} (the dump has {len(dump.records)})")
    try:
        pat = re.compile(ref)
    except re.error as exc:
        raise OpdiffError(f"{ref!r} is neither a record name nor a valid regex ({exc})") from None
    hits = [r for r in dump.records if pat.search(r.name)]
    if not hits:
        raise OpdiffError(f"no record matches {ref!r}")
    if len(hits) > 1:
        shown = ", ".join(r.name for r in hits[:5])
        raise OpdiffError(f"{len(hits)} records match {ref!r} (e.g. {shown}); be more specific or use #INDEX")
    return hits[0]


def _fmt(x: Any, cosine: bool = False) -> str:
    """A value as the shell shows it: cosines with enough digits near 1, the rest via numfmt."""
    if cosine:
        return numfmt.cosine(x)
    return numfmt.num(x, 6)


HISTORY_ENV = "OPDIFF_HISTORY"  # file of the shell's history; empty: keep none


def history_file() -> Path | None:
    """Where the shell keeps its history: $OPDIFF_HISTORY, else $XDG_STATE_HOME/opdiff/shell_history
    (~/.local/state/opdiff/shell_history): in the user's state directory, never inside a dump."""
    env = os.environ.get(HISTORY_ENV)
    if env is not None:
        return Path(env).expanduser() if env else None
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "opdiff" / "shell_history"


def call_args_text(call: dict[str, Any]) -> str:
    """The arguments of a captured call line: tensors by their record's position, other values as recorded."""
    def one(v: Any) -> str:
        if isinstance(v, dict) and "tensor" in v:
            name = v.get("tensor")
            return f"<tensor {'/'.join(name.rsplit('/', 2)[-2:]) if name else v.get('dtype', '?')}>"
        if isinstance(v, dict) and set(v) == {"tuple"}:
            return "(" + ", ".join(one(x) for x in v["tuple"]) + ("," if len(v["tuple"]) == 1 else "") + ")"
        if isinstance(v, list):
            return "[" + ", ".join(one(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k}: {one(x)}" for k, x in v.items()) + "}"
        return json.dumps(v) if isinstance(v, str) else repr(v)

    parts = [one(a) for a in call.get("args") or []]
    parts += [f"{k}={one(v)}" for k, v in (call.get("kwargs") or {}).items()]
    return ", ".join(parts)


def complete_names(dump: Dump, text: str, limit: int = 500) -> list[str]:
    """Record and node names starting with `text` (nodes first: shorter), at most `limit`."""
    nodes = dict.fromkeys(r.node for r in dump.records if r.node.startswith(text))
    names = [r.name for r in dump.records if r.name.startswith(text)]
    return (list(nodes) + names)[:limit]


class Shell(cmd.Cmd):
    """The command loop; each do_* is one shell command."""

    intro = "opdiff shell — type help or ? to list commands, quit to leave."
    prompt = "opdiff> "

    def __init__(self, session: Session, console: Console | None = None, stdin: IO[str] | None = None):
        super().__init__(stdin=stdin)
        self.s = session
        self.con = console or Console(width=160)
        if stdin is not None and not stdin.isatty():
            self.use_rawinput = False
            self.prompt = ""
            self.intro = ""

    # -- plumbing ----------------------------------------------------------------------
    def onecmd(self, line: str) -> bool:
        """Run one command; any mistake prints one line and the shell goes on."""
        try:
            return super().onecmd(line)
        except OpdiffError as exc:
            self.con.print(f"[red]error:[/] {safe(exc)}", markup=True, highlight=False)
        except re.error as exc:
            self.con.print(f"[red]error:[/] bad regex: {safe(exc)}", highlight=False)
        except KeyboardInterrupt:
            self.con.print("[dim]interrupted[/]")
        except Exception as exc:
            self.con.print(f"[red]error:[/] {type(exc).__name__}: {safe(exc)}", highlight=False)
        return False

    def get_names(self) -> list[str]:
        """Commands `help` lists: without the EOF entry (Ctrl-D) that cmd.Cmd would show."""
        return [n for n in super().get_names() if n != "do_EOF"]

    def preloop(self) -> None:
        """Interactive: complete whole record names (no splitting at / # .) and load the history."""
        self._readline = None
        if not self.use_rawinput:
            return
        try:
            import readline
        except ImportError:  # Windows without pyreadline: no completion, no history
            return
        self._readline = readline
        readline.set_completer_delims(" \t\n")
        path = history_file()
        if path is not None and path.is_file():
            try:
                readline.read_history_file(path)
            except OSError:
                pass

    def postloop(self) -> None:
        path = history_file()
        if self._readline is None or path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._readline.set_history_length(2000)
            self._readline.write_history_file(path)
        except OSError as exc:
            self.con.print(f"[yellow]warning:[/] history not saved to {safe(path)}: {safe(exc)}")

    def completenames(self, text: str, *ignored: Any) -> list[str]:
        return [n for n in super().completenames(text, *ignored) if n != "EOF"]

    def completedefault(self, text: str, line: str, begidx: int, endidx: int) -> list[str]:
        """Complete record names and node names (of the target with -t, else golden)."""
        dump = self.s.target if (" -t " in f" {line} " and self.s.target is not None) else self.s.golden
        return complete_names(dump, text)

    def emptyline(self) -> bool:
        return False

    def default(self, line: str) -> None:
        self.con.print(f"[red]unknown command:[/] {safe(line.split()[0])} (type help)")

    @staticmethod
    def _args(line: str) -> list[str]:
        try:
            return shlex.split(line)
        except ValueError as exc:
            raise OpdiffError(f"cannot parse arguments: {exc}") from None

    def _side_and_ref(self, line: str) -> tuple[Dump, str, list[str]]:
        args = self._args(line)
        if not args:
            raise OpdiffError("give a record: NAME, #INDEX or a regex")
        dump = self.s.golden
        if args[0] in ("-t", "--target"):
            dump, args = self.s.side("target"), args[1:]
        elif args[0] in ("-g", "--golden"):
            args = args[1:]
        if not args:
            raise OpdiffError("give a record: NAME, #INDEX or a regex")
        return dump, args[0], args[1:]

    # -- commands ----------------------------------------------------------------------
    def do_ls(self, line: str) -> None:
        """ls [-t] [REGEX] [--op REGEX] [--module REGEX] [--limit N]: list records (golden, or -t target)."""
        args = self._args(line)
        dump = self.s.golden
        name = op = module = None
        limit = 50
        it = iter(args)
        for a in it:
            if a in ("-t", "--target"):
                dump = self.s.side("target")
            elif a == "--op":
                op = next(it, None)
            elif a == "--module":
                module = next(it, None)
            elif a == "--limit":
                value = next(it, "")
                if not value.isdigit():
                    raise OpdiffError(f"--limit takes a number of records, not {value!r}")
                limit = int(value)
            else:
                name = a
        recs = dump.select(name=name, op=op, module=module)
        table = Table(show_header=True, header_style="bold")
        for col in ("#", "name", "dtype", "shape", "min", "max", "mean"):
            table.add_column(col, overflow="fold")
        for r in recs[:limit] if limit else recs:
            st = r.stats
            table.add_row(str(r.index), safe(r.name), safe(r.dtype), "x".join(map(str, r.shape)) or "()",
                          _fmt(st.min if st else None), _fmt(st.max if st else None), _fmt(st.mean if st else None))
        self.con.print(table)
        if limit and len(recs) > limit:
            self.con.print(f"... {len(recs) - limit} more (use --limit 0 for all)")

    def do_ni(self, line: str) -> None:
        """ni [-t] RECORD: node info — the record, its op call's other tensors, producer, source line."""
        dump, ref, _ = self._side_and_ref(line)
        r = resolve(dump, ref)
        fields = [("name", r.name), ("index", r.index), ("node", r.node), ("module", r.module or "(root)"),
                  ("op", r.op), ("level", r.level), ("call", r.call), ("direction", r.direction), ("role", r.role),
                  ("pos", r.pos), ("dtype", r.dtype), ("shape", list(r.shape)), ("hash", r.hash),
                  ("source", r.source), ("produced by", r.src), ("data", r.data["file"] if r.data else None)]
        for k, v in fields:
            if v is not None:
                self.con.print(f"[bold]{k:>12}[/]: {safe(v)}")
        if r.stats:
            self.con.print("[bold]       stats[/]: " + "  ".join(f"{k}={_fmt(v)}" for k, v in r.stats.to_json().items()))
        call = next((c for c in dump.calls if c.get("node") == r.node and c.get("direction", r.direction) == r.direction), None)
        if call is not None:
            self.con.print("[bold]   arguments[/]: " + escape_markup(f"{r.op}({call_args_text(call)})"), highlight=False)
        siblings = [x for x in dump.records if x.node == r.node and x.name != r.name]
        if siblings:
            self.con.print(f"[bold]other tensors of {safe(r.node)}[/]:")
            for x in siblings:
                self.con.print(f"  #{x.index} {safe(x.direction)}/{safe(x.role)}/{safe(x.pos)}  {safe(x.dtype)} {list(x.shape)}")
        if self.s.target is not None and self.s.comparison is not None:
            p = self.s.pair_for(r.name)
            if p is not None:
                self.con.print(f"[bold]      result[/]: {p.result} ({p.match}, {p.status}) {safe(p.err_message)}")

    do_info = do_ni

    def do_pt(self, line: str) -> None:
        """pt [-t] RECORD [--full]: print the tensor's values and statistics."""
        dump, ref, rest = self._side_and_ref(line)
        r = resolve(dump, ref)
        arr = dump.tensor(r)
        opts: dict[str, Any] = {"threshold": sys.maxsize} if "--full" in rest else {"threshold": 200, "edgeitems": 3}
        with np.printoptions(precision=6, suppress=False, linewidth=150, **opts):
            shown = arr.astype(np.float32) if numpy_dtype(r.dtype).kind == "V" or r.dtype in ("bfloat16",) or r.dtype.startswith("float8") else arr
            self.con.print(f"[bold]{safe(r.name)}[/] {safe(r.dtype)} {list(r.shape)}", highlight=False)
            self.con.print(np.array2string(np.asarray(shown)), highlight=False, markup=False)

    def do_cmp(self, line: str) -> None:
        """cmp GOLDEN_RECORD [TARGET_RECORD]: metrics of one pair (target defaults to the aligned or same-named record)."""
        args = self._args(line)
        if not args:
            raise OpdiffError("cmp GOLDEN_RECORD [TARGET_RECORD]")
        target = self.s.side("target")
        g = resolve(self.s.golden, args[0])
        if len(args) > 1:
            t = resolve(target, args[1])
        elif g.name in target:
            t = target[g.name]
        else:
            p = self.s.pair_for(g.name)
            if p is None or p.target is None:
                raise OpdiffError(f"{g.name} has no counterpart in the target; name one")
            t = p.target
        from .compare import compare_pair
        from .match.align import Pair
        from .metrics import names as M

        res = compare_pair(self.s.golden, target, Pair(golden=g, target=t, match="name" if g.name == t.name else "mapping"))
        self.con.print(f"[bold]{safe(g.name)}[/] vs [bold]{safe(t.name)}[/]: [bold]{res.result}[/] ({res.mode}, {res.status})")
        table = Table(show_header=False)
        table.add_column("metric")
        table.add_column("value")
        for k, v in res.metrics.items():
            table.add_row(M.column(k), _fmt(v, k == M.COSINE))
        self.con.print(table)
        if res.err_message:
            self.con.print(f"note: {safe(res.err_message)}")

    def do_compare(self, line: str) -> None:
        """compare: compare the whole golden/target pair and summarise the verdicts."""
        c = self.s.compare()
        counts = c.counts()
        self.con.print("  ".join(f"{k}: {v}" for k, v in counts.items()))
        first = c.first_fail()
        if first is not None:
            self.con.print(f"first FAIL: #{first.index} {safe(first.name)}")

    def do_fails(self, line: str) -> None:
        """fails [N]: the first N failing pairs in execution order (default 20)."""
        args = self._args(line)
        n = int(args[0]) if args else 20
        c = self.s.compare()
        from .metrics import names as M

        rows = [r for r in c.results if r.result == "FAIL"][:n]
        table = Table(show_header=True, header_style="bold")
        shown = (M.COSINE, M.MAX_ABS_ERR, M.RED)
        for col in ("#", "name", *map(M.column, shown)):
            table.add_column(col, overflow="fold")
        for r in rows:
            table.add_row(str(r.index), safe(r.name), *(_fmt(r.metrics.get(k), k == M.COSINE) for k in shown))
        self.con.print(table)

    def do_diag(self, line: str) -> None:
        """diag: diagnose the pair — the culprit, why, and what to do next."""
        if self.s.diagnosis is None:
            from .diagnose import diagnose

            self.s.diagnosis = diagnose(self.s.golden, self.s.side("target"), mapping=self.s.mapping,
                                        comparison=self.s.compare())
        from . import report

        report.render(self.s.diagnosis, self.con)

    def do_quit(self, line: str) -> bool:
        """quit: leave the shell."""
        return True

    do_exit = do_quit
    do_EOF = do_quit


def run_shell(golden: Dump, target: Dump | None = None, mapping: Mapping | None = None,
              commands: list[str] | None = None, stdin: IO[str] | None = None) -> None:
    """Run the shell; with `commands`, run them in order and return (scripting and tests)."""
    sh = Shell(Session(golden=golden, target=target, mapping=mapping), stdin=stdin or sys.stdin)
    if commands:
        for c in commands:
            if sh.onecmd(c):
                break
        return
    sh.cmdloop()
