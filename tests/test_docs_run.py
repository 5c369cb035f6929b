"""Every code block of README.md and docs/*.md runs, in order, on the zoo models (docs/report.md,
"Documentation that runs").

- ```python blocks run in one namespace per file, in a shared working directory where README's
  quick start has made runs/golden and runs/target (a GPT-2 with a planted fault).
- ```bash and ```console blocks run line by line (console: the lines starting with "$ "); every
  command must be `opdiff ...` and exit 0 (agree) or 1 (disagree): 2 (a user error) or a traceback fails.
- A block preceded by `<!-- no-run: why -->` is skipped (what takes minutes, or is not Python);
  a block preceded by `<!-- file: NAME -->` is written to NAME in the working directory first.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\s*$")
MARK = re.compile(r"^<!--\s*(no-run|file):?\s*(.*?)\s*-->\s*$")
RUN_LANGS = ("python", "bash", "console")


@dataclass
class Block:
    doc: Path
    line: int
    lang: str
    text: str
    mark: str = ""  # "no-run" or "file"
    arg: str = ""


def blocks(doc: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, with the marker comment just above each (if any)."""
    out, lines = [], doc.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        prev = lines[i - 1] if i else ""
        mk = MARK.match(prev)
        out.append(Block(doc, i + 1, m.group(1), "\n".join(lines[i + 1:j]) + "\n",
                         mk.group(1) if mk else "", mk.group(2) if mk else ""))
        i = j + 1
    return out


def commands(b: Block) -> list[str]:
    """The shell commands of a bash/console block (continuation lines joined)."""
    text = b.text.replace("\\\n", " ")
    if b.lang == "console":
        return [ln[2:] for ln in text.splitlines() if ln.startswith("$ ")]
    return [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def run_block(b: Block, ns: dict, cwd: Path) -> None:
    where = f"{b.doc.name}:{b.line}"
    if b.mark == "file":
        (cwd / b.arg).write_text(b.text, encoding="utf-8")
        return
    if b.mark == "no-run" or b.lang not in RUN_LANGS:
        return
    if b.lang == "python":
        old = os.getcwd()
        os.chdir(cwd)
        try:
            exec(compile(b.text, where, "exec"), ns)
        finally:
            os.chdir(old)
        return
    for cmd in commands(b):
        argv = shlex.split(cmd, comments=True)
        assert argv[0] == "opdiff", f"{where}: not an opdiff command (mark the block no-run): {cmd}"
        code, out = opdiff_cli(argv[1:], cwd)
        assert code in (0, 1), f"{where}: `{cmd}` exited {code}:\n{out[-3000:]}"


def opdiff_cli(args: list[str], cwd: Path) -> tuple[int, str]:
    """Run `opdiff ARGS` in this process (as opdiff.cli.main.main does: a user error is exit 2), stdin empty."""
    from click.testing import CliRunner

    from opdiff.cli.main import cli
    from opdiff.errors import OpdiffError

    old = os.getcwd()
    os.chdir(cwd)
    try:
        res = CliRunner().invoke(cli, args, input="", catch_exceptions=True, standalone_mode=False,
                                 env={"OPDIFF_QUIET": "1", "OPDIFF_HISTORY": "", "COLUMNS": "160"})
    finally:
        os.chdir(old)
    if isinstance(res.exception, OpdiffError):
        return 2, f"{res.output}\nopdiff: error: {res.exception}"
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return (res.return_value if isinstance(res.return_value, int) else res.exit_code), res.output


def run_doc(doc: Path, cwd: Path) -> None:
    """A document's files first (a command may come before the file it names), then its blocks in order."""
    ns: dict = {"__name__": f"__{doc.stem}__"}
    bs = blocks(doc)
    for b in bs:
        if b.mark == "file":
            run_block(b, ns, cwd)
    for b in bs:
        if b.mark != "file":
            run_block(b, ns, cwd)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """README's blocks, run first: they make runs/golden and runs/target."""
    cwd = tmp_path_factory.mktemp("docs")
    run_doc(ROOT / "README.md", cwd)
    return cwd


def test_readme_runs_and_its_quick_start_finds_the_fault(workdir):
    import opdiff
    from opdiff.diagnose import diagnose

    d = diagnose(opdiff.load(workdir / "runs/golden"), opdiff.load(workdir / "runs/target"), replay=False)
    assert d.verdict == "fault" and d.culprit.module == "transformer.h.2.ln_2"


@pytest.mark.parametrize("doc", [d for d in DOCS if d.name != "README.md"], ids=lambda d: d.name)
def test_doc_runs(doc, workdir):
    run_doc(doc, workdir)


def test_every_runnable_block_is_python_or_opdiff():
    """Blocks in other languages are data (json, yaml, text): nothing to run silently ignored."""
    for doc in DOCS:
        for b in blocks(doc):
            if b.lang in ("sh", "shell", "py", "python3"):
                pytest.fail(f"{doc.name}:{b.line}: use ```bash or ```python so the block is run")
