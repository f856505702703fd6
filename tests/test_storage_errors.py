"""What the system refuses, said in one line by every command: a directory where an output goes, a full
disk, a read-only or unwritable directory, and an input that is a pipe or a device. A failed write
leaves what was there and what was finished, so the rerun the line asks for resumes."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from adaptive_rag import cli
from adaptive_rag.errors import StorageError
from adaptive_rag.progress import ProgressLog
from conftest import REPO

RESUMES = "nothing finished is lost: {fix}, then rerun the same command, which resumes where it stopped"
ACCESS = "give this user access to it (for an output, write access to its directory)"


def split(out: Path, capsys, monkeypatch, params: Path = REPO / "params.yaml") -> tuple[int, str]:
    """`adaptive-rag split --dataset demo --out OUT` in this process, from the repository root."""
    monkeypatch.chdir(REPO)
    code = cli.main(["--params", str(params), "split", "--dataset", "demo", "--out", str(out)])
    return code, capsys.readouterr().err


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_an_output_that_is_a_directory_is_refused_and_left_as_it_is(tmp_path, capsys, monkeypatch):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "kept.txt").write_text("kept")
    code, err = split(tmp_path / "out", capsys, monkeypatch)
    assert code == 2
    assert err == (f"error: {tmp_path / 'out'}: is a directory, where a file is expected: name a file instead (the "
                   f"directory is left as it is)\n")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["kept.txt"] and leftovers(tmp_path) == []


def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_keeps_the_old_output_and_says_a_rerun_resumes(tmp_path, capsys, monkeypatch):
    out = tmp_path / "demo.jsonl"
    out.write_text("the previous split\n")
    monkeypatch.setattr(os, "fsync", no_space)  # the write reaches the disk only at fsync: the disk is full there
    code, err = split(out, capsys, monkeypatch)
    assert code == 2
    assert err == f"error: {out}: cannot write (no space left on device); {RESUMES.format(fix='free some space')}\n"
    assert out.read_text() == "the previous split\n" and leftovers(tmp_path) == []
    monkeypatch.undo()
    code, err = split(out, capsys, monkeypatch)  # space freed: the rerun writes it
    assert code == 0, err
    meta = json.loads(out.with_suffix(".meta.json").read_text())
    assert len(out.read_text().splitlines()) == meta["questions"] > 0 and leftovers(tmp_path) == []


@pytest.mark.parametrize("code_, what, fix", [
    (errno.EACCES, "permission denied", ACCESS),
    (errno.EROFS, "cannot write (read-only file system)", "write to a writable file system"),
])
def test_an_unwritable_directory_is_one_line_naming_the_output(tmp_path, capsys, monkeypatch, code_, what, fix):
    """The system call that fails in a read-only or unwritable directory is the temporary file's creation."""
    real_open = os.open

    def refused(path, *args, **kwargs):
        if str(path).endswith(".tmp") and Path(path).parent == tmp_path:
            raise OSError(code_, os.strerror(code_), str(path))
        return real_open(path, *args, **kwargs)
    monkeypatch.setattr(os, "open", refused)
    code, err = split(tmp_path / "demo.jsonl", capsys, monkeypatch)
    assert code == 2
    assert err == f"error: {tmp_path / 'demo.jsonl'}: {what}; {RESUMES.format(fix=fix)}\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory anyway")
def test_a_read_only_directory_is_one_line_naming_the_output(tmp_path, capsys, monkeypatch):
    (tmp_path / "data").mkdir()
    (tmp_path / "data").chmod(0o555)
    try:
        code, err = split(tmp_path / "data" / "demo.jsonl", capsys, monkeypatch)
    finally:
        (tmp_path / "data").chmod(0o755)
    assert code == 2
    assert err == f"error: {tmp_path / 'data' / 'demo.jsonl'}: permission denied; {RESUMES.format(fix=ACCESS)}\n"


@pytest.mark.parametrize("kind, what", [("fifo", "a named pipe (FIFO)"), ("device", "a character device")])
def test_an_input_that_is_a_pipe_or_a_device_is_named_for_what_it_is(tmp_path, capsys, monkeypatch, kind, what):
    """`split` reads its dataset without check-params first: the reader itself says what the path is."""
    import yaml

    source = "/dev/zero"
    if kind == "fifo":
        source = str(tmp_path / "fifo")
        os.mkfifo(source)
    data = yaml.safe_load((REPO / "params.yaml").read_text())
    data["datasets"]["demo"]["path"] = source
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(data, sort_keys=False))
    code, err = split(tmp_path / "demo.jsonl", capsys, monkeypatch, params)
    assert code == 2
    assert err == f"error: dataset file {source}: not a regular file ({what})\n"


def test_a_full_disk_in_a_run_keeps_its_finished_batches_for_the_rerun(tmp_path):
    """A generation job's progress log: the batch cut short by the full disk is a torn line, which the
    rerun trims; every batch before it is resumed."""
    parts = {"settings": "s", "split": "p"}
    ids = [["q1"], ["q2"], ["q3"]]

    def batch(i):
        return [{"prediction": {"id": ids[i][0]}, "trace": {}}]

    class FullDisk:
        """The log's file handle once the disk is full: half a line is written, then ENOSPC."""
        def __init__(self, handle):
            self.handle = handle

        def write(self, data):
            self.handle.write(data[: len(data) // 2])
            self.handle.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def __getattr__(self, name):
            return getattr(self.handle, name)

    log_path = tmp_path / ".progress" / "rank0.jsonl"
    with ProgressLog(tmp_path, 0, parts) as log:
        log.append(0, batch(0))
        log._handle = FullDisk(log._handle)
        with pytest.raises(StorageError) as err:
            log.append(1, batch(1))
        log._handle = log._handle.handle
    assert str(err.value) == f"{log_path}: cannot write (no space left on device); {RESUMES.format(fix='free some space')}"
    with ProgressLog(tmp_path, 0, parts) as log:  # the rerun
        assert sorted(log.finished(ids)) == [0]
        log.append(1, batch(1))
    with ProgressLog(tmp_path, 0, parts) as log:
        assert sorted(log.finished(ids)) == [0, 1]


def test_a_full_disk_while_downloading_stops_at_once_and_keeps_the_part(tmp_path, capsys, monkeypatch):
    """No retry (another attempt cannot make space); the bytes written are kept for the rerun."""
    import yaml

    source = tmp_path / "remote" / "dev.json"
    source.parent.mkdir()
    source.write_text('{"data": []}\n')
    data = yaml.safe_load((REPO / "params.yaml").read_text())
    data["downloads"] = {"bundle": {"url": source.as_uri()}}
    work = tmp_path / "work"
    work.mkdir()
    (work / "params.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    monkeypatch.chdir(work)
    monkeypatch.setattr(os, "fsync", no_space)
    assert cli.main(["--params", "params.yaml", "download", "--name", "bundle"]) == 2
    part = "data/raw/bundle/dev.json.part"
    err = capsys.readouterr().err  # after the progress bar
    assert err.endswith(f"\nerror: {part}: cannot write (no space left on device); {RESUMES.format(fix='free some space')}\n")
    assert "retry" not in err and (work / part).exists() and not (work / "data/raw/bundle/dev.json").exists()


def test_the_cli_reports_a_system_error_from_any_step_in_one_line(tmp_path, capsys, monkeypatch):
    """A full disk met inside a library (no writer of ours to name the file) still gets the one line,
    naming the file the system names; any other OSError is a bug and keeps its traceback."""
    def library_write(args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "data/models/tiny/model.safetensors")
    monkeypatch.setattr(cli, "cmd_check_params", library_write)
    assert cli.main(["check-params"]) == 2
    assert capsys.readouterr().err == ("error: data/models/tiny/model.safetensors: cannot write (no space left on "
                                       f"device); {RESUMES.format(fix='free some space')}\n")

    def reset(args):
        raise ConnectionResetError(errno.ECONNRESET, os.strerror(errno.ECONNRESET))
    monkeypatch.setattr(cli, "cmd_check_params", reset)
    with pytest.raises(ConnectionResetError):
        cli.main(["check-params"])


def test_an_output_under_or_at_an_existing_file_is_one_line_naming_the_path(tmp_path, capsys, monkeypatch):
    """`corpus --out FILE` (a directory to make where a file is) and `split --out FILE/x` (a file to write
    inside a file): one line naming the path and the file in the way, which is left as it is."""
    (tmp_path / "taken").write_text("kept")
    monkeypatch.chdir(REPO)
    code = cli.main(["corpus", "--out", str(tmp_path / "taken")])
    assert (code, capsys.readouterr().err) == (2, f"error: {tmp_path / 'taken'}: is a file, where a directory is "
                                                  f"expected: name a directory instead (the file is left as it is)\n")
    for out in (tmp_path / "taken" / "x", tmp_path / "taken" / "x" / "demo.jsonl"):
        code, err = split(out, capsys, monkeypatch)
        assert (code, err) == (2, f"error: {out}: {tmp_path / 'taken'} is a file, so nothing can be written inside "
                                  f"it: name a path under a directory (the file is left as it is)\n")
    assert (tmp_path / "taken").read_text() == "kept" and leftovers(tmp_path) == []
