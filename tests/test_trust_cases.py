"""The classes of hostile or mismatched input named in issue 8, each on real captured dumps, via the CLI."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from trust_helpers import capture_tiny, copy_dump, run_cli

PART = "rank0/step0"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("cases")
    return {"gpt2": capture_tiny(base / "gpt2"), "llama": capture_tiny(base / "llama", model="llama")}


def _one_error_line(r) -> str:
    assert r.code == 2 and not r.tb, r.text
    lines = [x for x in r.err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("opdiff: error: "), r.err
    return lines[0]


def test_unrelated_models_are_said_to_be_so_and_no_op_is_blamed(runs, tmp_path):
    for args in (("compare", runs["gpt2"], runs["llama"], "-o", tmp_path / "o"),
                 ("diagnose", runs["gpt2"], runs["llama"], "--no-replay")):
        line = _one_error_line(run_cli(*args))
        assert "not runs of the same model" in line and "GPT2LMHeadModel vs LlamaForCausalLM" in line
        assert "culprit" not in line and "fault" not in line
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_same_model_is_not_refused(runs, tmp_path):
    other = capture_tiny(tmp_path / "seed1", seed=1)  # same architecture, other weights: compared, and it FAILs
    r = run_cli("compare", runs["gpt2"], other, "-o", tmp_path / "o", "--format", "json", "--no-progress")
    assert r.code == 1 and "FAIL" in r.out, r.text


def test_nothing_compared_is_not_a_pass(runs, tmp_path):
    empty = copy_dump(runs["gpt2"], tmp_path / "empty")
    (empty / PART / "index.jsonl").write_text("")
    for args in (("compare", empty, empty, "-o", tmp_path / "o"), ("diagnose", empty, empty, "--no-replay")):
        assert "holds no records: nothing to compare" in _one_error_line(run_cli(*args))


def _flip_tensor_byte(dump, name_part: str) -> str:
    """Change one byte inside one tensor's data (its hash no longer matches); returns the record name."""
    lines = [json.loads(x) for x in (dump / PART / "index.jsonl").read_text().splitlines()]
    rec = next(r for r in lines if r.get("kind", "tensor") == "tensor" and name_part in r["name"] and r.get("data"))
    shard = dump / PART / rec["data"]["file"]
    raw = bytearray(shard.read_bytes())
    n = int.from_bytes(raw[:8], "little")
    start, _ = json.loads(raw[8:8 + n])[rec["data"]["key"]]["data_offsets"]
    raw[8 + n + start] ^= 0x01
    shard.write_bytes(bytes(raw))
    return rec["name"]


def test_unreadable_pair_is_na_in_compare_and_never_a_pass_in_diagnose(runs, tmp_path):
    bad = copy_dump(runs["gpt2"], tmp_path / "bad")
    name = _flip_tensor_byte(bad, "lm_head/Linear#0/forward/output")
    r = run_cli("compare", runs["gpt2"], bad, "-o", tmp_path / "o", "--format", "json", "--no-progress")
    assert r.code == 1 and "error" in r.out and "hash" in r.out, r.text
    d = run_cli("diagnose", runs["gpt2"], bad, "--no-replay", "--json")
    assert d.code == 1, d.text
    diag = json.loads(d.out)
    assert diag["verdict"] != "pass"
    assert any(name in w and "could not be read" in w for w in diag["warnings"]), diag["warnings"]


def test_markup_in_names_is_printed_literally(runs, tmp_path):
    dumps = []
    for side in ("g", "t"):
        d = copy_dump(runs["gpt2"], tmp_path / side)
        idx = d / PART / "index.jsonl"
        idx.write_text(idx.read_text().replace('"transformer.wte/', '"[bold red]boom[/]transformer.wte/'))
        dumps.append(d)
    r = run_cli("ls", dumps[0], "--name", "boom")
    assert r.code == 0 and "[bold red]boom[/]" in r.out, r.text
    r = run_cli("shell", dumps[0], dumps[1], "-c", "ls boom", "-c", "ni #0", "-c", "ls --name ([")
    assert r.code == 0 and "[bold red]boom[/]" in r.out and "error" in r.out, r.text


def test_control_characters_in_names_are_refused_with_the_line(runs, tmp_path):
    d = copy_dump(runs["gpt2"], tmp_path / "ansi")
    idx = d / PART / "index.jsonl"
    idx.write_text(idx.read_text().replace('"name":"transformer.wte/', '"name":"\\u001b[31mtransformer.wte/', 1))
    line = _one_error_line(run_cli("ls", d))
    assert "index.jsonl:1" in line and "control characters" in line and "\x1b" not in line


def test_outputs_checked_before_work_and_never_written_through_a_symlink(runs, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    (out / "compare.json").symlink_to(victim)
    r = run_cli("compare", runs["gpt2"], runs["gpt2"], "-o", out, "--force", "--format", "json", "--no-progress")
    assert r.code == 0, r.text
    assert victim.read_text() == "precious" and not (out / "compare.json").is_symlink()
    (out / "compare.csv").mkdir()  # not a file opdiff wrote: --force does not replace it
    line = _one_error_line(run_cli("compare", runs["gpt2"], runs["gpt2"], "-o", out, "--force", "--format", "csv"))
    assert "not a file opdiff wrote" in line
    if os.path.isdir("/proc/self"):  # a directory no one can create files in, even root
        line = _one_error_line(run_cli("compare", runs["gpt2"], runs["gpt2"], "-o", "/proc/self", "--force"))
        assert "not writable" in line


def test_shard_path_leaving_the_dump_is_refused(runs, tmp_path):
    d = copy_dump(runs["gpt2"], tmp_path / "esc")
    idx = d / PART / "index.jsonl"
    idx.write_text(idx.read_text().replace('"file":"shards/000000.safetensors"', '"file":"../../../x.safetensors"', 1))
    assert "leaves the dump directory" in _one_error_line(run_cli("ls", d))
    d2 = copy_dump(runs["gpt2"], tmp_path / "link")
    shard = d2 / PART / "shards" / "000000.safetensors"
    shutil.move(shard, tmp_path / "outside.safetensors")
    shard.symlink_to(tmp_path / "outside.safetensors")
    line = _one_error_line(run_cli("compare", runs["gpt2"], d2, "-o", tmp_path / "o2"))
    assert "outside the dump directory" in line
    shutil.move(tmp_path / "outside.safetensors", d2 / "real.safetensors")  # a symlink that stays inside: allowed
    shard.unlink()
    shard.symlink_to(d2 / "real.safetensors")
    assert run_cli("compare", runs["gpt2"], d2, "-o", tmp_path / "o3", "--format", "json", "--no-progress").code == 0


def test_fifo_index_does_not_hang(runs, tmp_path):
    d = copy_dump(runs["gpt2"], tmp_path / "fifo")
    (d / PART / "index.jsonl").unlink()
    os.mkfifo(d / PART / "index.jsonl")
    assert "not a regular file" in _one_error_line(run_cli("info", d))


def test_complete_as_a_string_is_not_complete(runs, tmp_path):
    d = copy_dump(runs["gpt2"], tmp_path / "str")
    meta = json.loads((d / "meta.json").read_text())
    meta["complete"] = "false"
    (d / "meta.json").write_text(json.dumps(meta))
    line = _one_error_line(run_cli("compare", runs["gpt2"], d, "-o", tmp_path / "o"))
    assert "'complete'" in line and "--allow-partial" in line


def test_nan_in_meta_is_refused_not_a_traceback_in_the_report(runs, tmp_path):
    d = copy_dump(runs["gpt2"], tmp_path / "nan")
    meta = json.loads((d / "meta.json").read_text())
    meta["host"] = float("nan")  # found by the fuzz on main: the JSON report raised "Out of range"
    (d / "meta.json").write_text(json.dumps(meta))
    assert "NaN is not JSON" in _one_error_line(run_cli("compare", runs["gpt2"], d, "-o", tmp_path / "o"))
