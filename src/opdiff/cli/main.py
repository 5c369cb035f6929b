"""`opdiff` entry point: the click group, subcommand registration, and one-line user errors."""

from __future__ import annotations

import inspect
import sys
import textwrap
from importlib import import_module

import click

from ..base.errors import OpdiffError
from ..base.termsafe import plain
from ..base.version import __version__
from .common import Invocation


def summary(cmd: click.Command) -> str:
    """A command's entry in `opdiff --help`: its short_help, else the first paragraph of its help, whole
    (click's default cuts it at the first '.' and at the terminal's width: "Run COMMAND (e.g.")."""
    if cmd.short_help:
        return cmd.short_help
    first = inspect.cleandoc(cmd.help or "").split("\n\n", 1)[0]
    return " ".join(first.replace("\b", "").split())


# command name -> the module of this package whose register() adds it: a command's module (and what it
# imports: torch helpers, the demo's model zoo, the report writers it alone uses) loads only when that command
# runs or help lists it, so `opdiff compare` pays for no other command (tests/test_startup.py checks the table)
COMMANDS: dict[str, str] = {
    "capture-onnx": "fusion_cmd", "compare": "compare_cmd", "convert": "convert_cmd", "demo": "demo_cmd",
    "diagnose": "diagnose_cmd", "explorer": "explorer_cmd", "export-onnx": "export_cmd", "fusion": "fusion_cmd",
    "hunt": "hunt_cmd", "import": "import_cmd", "info": "inspect_cmds", "ls": "inspect_cmds",
    "replay": "diagnose_cmd", "replicas": "replicas_cmd", "run": "run_cmd", "shell": "shell_cmd",
}


class WholeHelpGroup(click.Group):
    """The command group whose listing gives every command's summary whole (wrapped, never cut); each command's
    module is imported on first use (COMMANDS)."""

    def list_commands(self, ctx: click.Context | None) -> list[str]:
        return sorted(set(COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context | None, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            import_module(f"opdiff.cli.{COMMANDS[cmd_name]}").register(self)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, summary(cmd)) for name in self.list_commands(ctx)
                if (cmd := self.get_command(ctx, name)) is not None and not cmd.hidden]
        if rows:
            with formatter.section("Commands"):
                _write_rows(formatter, rows)


def _write_rows(formatter: click.HelpFormatter, rows: list[tuple[str, str]]) -> None:
    """click's definition list, wrapped without breaking at hyphens: an option named in a summary
    (`--no-patch`) stays whole on one line."""
    indent = formatter.current_indent
    first = max(len(name) for name, _ in rows) + 2
    width = max((formatter.width or 80) - indent - first, 20)
    for name, text in rows:
        lines = textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False) or [""]
        formatter.write(f"{'':{indent}}{name:<{first}}{lines[0]}\n")
        for line in lines[1:]:
            formatter.write(f"{'':{indent + first}}{line}\n")


@click.group(cls=WholeHelpGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="opdiff")
def cli() -> None:
    """opdiff: find where and why two runs of the same model stop agreeing.

    capture a golden and a target run, compare them op by op, and diagnose the culprit.
    """


def commands() -> dict[str, click.Command]:
    """Every command by name, each module imported (help, tests): what `opdiff --help` lists."""
    return {name: cmd for name in cli.list_commands(None) if (cmd := cli.get_command(None, name)) is not None}


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; a user's mistake (OpdiffError) is one line on stderr and exit code 2. Without `argv` (the
    `opdiff` command, `python -m opdiff`) the process ends with the command (`Invocation.exits`)."""
    try:
        rv = cli.main(args=argv, prog_name="opdiff", standalone_mode=False, obj=Invocation(exits=argv is None))
        if isinstance(rv, int):
            sys.exit(rv)
    except OpdiffError as exc:
        click.echo(f"opdiff: error: {plain(exc)}", err=True)
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("opdiff: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
