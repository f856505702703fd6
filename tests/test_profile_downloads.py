"""The `download` step on every profile's `downloads:` entries, against local `file://` stand-ins.

Each entry of each profile in params/ gets a small stand-in file of the kind its URL names (plain JSON
or JSONL, a gzip'd TSV, a zip or tar.gz holding the `extract:` members) and runs the real CLI with its
`url` pointed at the stand-in; `filename` is pinned to what the profile's own URL yields, so the file
lands where the profile's datasets and corpus expect it. Entries are read from the YAML, so a new
entry or profile is covered without editing this file.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

from adaptive_rag import cli
from adaptive_rag.config import load_params
from conftest import REPO, copy_workflow, edit_params, run

PROFILES = sorted(p.stem for p in (REPO / "params").glob("*.yaml"))
CASES = [(profile, entry) for profile in PROFILES
         for entry in (yaml.safe_load((REPO / "params" / f"{profile}.yaml").read_text()).get("downloads") or {})]


def test_the_profiles_with_downloads_are_found():
    """A guard against the parametrized test below silently running nothing (e.g. after a params/ rename)."""
    assert {profile for profile, _ in CASES} >= {"paper", "scaar"}


# ---- stand-ins ----

def member_bytes(member: str) -> bytes:
    return json.dumps([{"_id": "q1", "question": f"stand-in for {member}?", "answer": "yes"}]).encode()


def archive_kind(filename: str) -> str | None:
    for suffix, kind in ((".zip", "zip"), (".tar.gz", "w:gz"), (".tgz", "w:gz"), (".tar", "w"),
                         (".tar.bz2", "w:bz2"), (".tar.xz", "w:xz")):
        if filename.endswith(suffix):
            return kind
    return None


def stand_in(path: Path, members: list[str]) -> bytes:
    """Write a small file of the kind `path`'s name says, holding `members` if it is an archive."""
    path.parent.mkdir(parents=True, exist_ok=True)
    name = path.name
    if members:
        kind = archive_kind(name)
        if kind is None:
            pytest.fail(f"{name}: `extract` is set but this test has no stand-in for that kind of archive")
        extra = "stand-in/README.txt"  # a member nobody asked for: it must not be extracted
        if kind == "zip":
            with zipfile.ZipFile(path, "w") as zf:
                for member in (*members, extra):
                    zf.writestr(member, member_bytes(member))
        else:
            with tarfile.open(path, kind) as tf:
                for member in (*members, extra):
                    data = member_bytes(member)
                    info = tarfile.TarInfo(member)
                    info.size = len(data)
                    tf.addfile(info, io.BytesIO(data))
    elif name.endswith(".gz"):  # e.g. the DPR dump: a gzip'd TSV that the corpus step reads compressed
        path.write_bytes(gzip.compress(b"id\ttext\ttitle\n1\tA stand-in passage.\tStand-in\n"))
    elif name.endswith(".jsonl"):
        path.write_text('{"question": "stand-in?", "answer": ["yes"]}\n{"question": "two?", "answer": ["2"]}\n')
    elif name.endswith(".json"):
        path.write_text(json.dumps({"version": "stand-in", "data": [{"question": "stand-in?"}]}))
    else:
        path.write_bytes(b"stand-in bytes\n")
    return path.read_bytes()


def point_at(data: dict, entry: str, url: str, filename: str, payload: bytes) -> None:
    """`entry` fetched from `url` under the profile's `filename`; any pins re-made for the stand-in."""
    d = data["downloads"][entry]
    d.update(url=url, filename=filename)
    if d.get("sha256") is not None:
        d["sha256"] = hashlib.sha256(payload).hexdigest()
    if d.get("size") is not None:
        d["size"] = len(payload)
    data["mirrors"] = []  # the file:// URL is what is exercised, not a mirror


def download(cwd: Path, name: str, capsys, monkeypatch) -> tuple[int, str, str]:
    """`adaptive-rag --params params.yaml download --name NAME` in `cwd`, in this process."""
    monkeypatch.chdir(cwd)
    code = cli.main(["--params", "params.yaml", "download", "--name", name])
    out, err = capsys.readouterr()
    return code, out, err


# ---- every entry of every profile ----

@pytest.mark.parametrize(("profile", "entry"), CASES, ids=[f"{p}-{e}" for p, e in CASES])
def test_profile_download_entry_from_a_file_url(profile, entry, tmp_path, capsys, monkeypatch):
    d = load_params(REPO / "params" / f"{profile}.yaml").downloads[entry]  # filename as the profile derives it
    payload = stand_in(tmp_path / "remote" / entry / d.filename, list(d.extract))
    work = tmp_path / "work"
    work.mkdir()
    data = yaml.safe_load((REPO / "params" / f"{profile}.yaml").read_text())
    point_at(data, entry, (tmp_path / "remote" / entry / d.filename).as_uri(), d.filename, payload)
    (work / "params.yaml").write_text(yaml.safe_dump(data, sort_keys=False))

    code, out, err = download(work, entry, capsys, monkeypatch)
    assert code == 0, err
    assert "error" not in err
    dest = work / d.directory
    assert (work / d.path).read_bytes() == payload and not (work / d.path).is_symlink()
    for member, path in zip(d.extract, d.extracted_paths()):
        assert (work / path).read_bytes() == member_bytes(member), member
        assert f"download {entry}: extracted {path}" in out
    assert sorted(p.name for p in dest.iterdir()) == sorted({d.filename, *(Path(p).name for p in d.extracted_paths())})
    if d.filename.endswith(".gz") and not d.extract:
        assert gzip.decompress(payload).startswith(b"id\ttext\ttitle\n")  # kept compressed, as the corpus step reads it

    # A rerun keeps what is there: the stand-in is gone, so a fetch would fail.
    (tmp_path / "remote" / entry / d.filename).unlink()
    code, _, err = download(work, entry, capsys, monkeypatch)
    assert code == 0, err
    assert (work / d.path).read_bytes() == payload


# ---- what goes wrong, said in one line ----

def one_download(work: Path, url: str, **entry) -> None:
    work.mkdir(parents=True, exist_ok=True)
    data = yaml.safe_load((REPO / "params.yaml").read_text())
    data["downloads"] = {"bundle": {"url": url, **entry}}
    (work / "params.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.mark.parametrize("filename", ["dev.json", "psgs.tsv.gz"])
def test_extract_on_a_file_that_is_no_archive_names_the_entry_and_the_file(filename, tmp_path, capsys, monkeypatch):
    source = tmp_path / "remote" / filename
    payload = stand_in(source, [])
    one_download(tmp_path / "work", source.as_uri(), extract=["train.json"])
    code, _, err = download(tmp_path / "work", "bundle", capsys, monkeypatch)
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        f"error: params.yaml: downloads.bundle.extract: data/raw/bundle/{filename} is neither a zip nor a tar "
        f"archive, so it has no members to extract (leave `extract` out to keep the file as it was downloaded)")
    assert (tmp_path / "work/data/raw/bundle" / filename).read_bytes() == payload  # fetched and verified, kept


def test_missing_archive_member_names_the_entry_and_lists_the_members(tmp_path, capsys, monkeypatch):
    source = tmp_path / "remote" / "bundle.zip"
    stand_in(source, ["bundle/dev.json"])
    one_download(tmp_path / "work", source.as_uri(), extract=["bundle/test.json"])
    code, _, err = download(tmp_path / "work", "bundle", capsys, monkeypatch)
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        "error: params.yaml: downloads.bundle.extract: data/raw/bundle/bundle.zip has no member 'bundle/test.json'; "
        "it has: bundle/dev.json, stand-in/README.txt")


def test_members_with_one_base_name_are_refused_before_anything_is_fetched(tmp_path, capsys, monkeypatch):
    """Members land under their base names: two `data.json` would leave only the second (exit 0, the train
    data silently gone). Refused when params is read, so nothing is fetched or written."""
    source = tmp_path / "remote" / "bundle.zip"
    stand_in(source, ["train/data.json", "dev/data.json"])
    one_download(tmp_path / "work", source.as_uri(), extract=["train/data.json", "dev/data.json"])
    code, out, err = download(tmp_path / "work", "bundle", capsys, monkeypatch)
    assert (code, out) == (2, "")
    assert err == ("error: params.yaml: downloads.bundle.extract: members 'train/data.json' and 'dev/data.json' would "
                   "both be extracted to data/raw/bundle/data.json (members land under their base name, so the "
                   "second would overwrite the first); extract one of them here and the other under a second "
                   "`downloads:` entry with the same url\n")
    assert not (tmp_path / "work/data").exists()


def test_extraction_stays_inside_the_download_directory(tmp_path, capsys, monkeypatch):
    """A member path climbing out with `..` or starting at `/` is written under its base name in the
    directory; a link to a file outside the archive is no member to extract; a link to a member inside it
    is extracted as a regular file holding that member's bytes."""
    source = tmp_path / "remote" / "bundle.tar.gz"
    source.parent.mkdir(parents=True)
    outside = tmp_path / "outside.json"
    outside.write_text("not for the archive")
    with tarfile.open(source, "w:gz") as tf:
        for name in ("../../climb.json", "/abs/rooted.json", "inside/real.json"):
            data = member_bytes(name)
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        for name, target in (("escape.json", str(outside)), ("inside/alias.json", "real.json")):
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tf.addfile(info)
    work = tmp_path / "work"
    one_download(work, source.as_uri(), extract=["../../climb.json", "/abs/rooted.json", "inside/alias.json"])
    code, _, err = download(work, "bundle", capsys, monkeypatch)
    assert code == 0, err
    dest = work / "data/raw/bundle"
    assert sorted(p.name for p in dest.iterdir()) == ["alias.json", "bundle.tar.gz", "climb.json", "rooted.json"]
    assert not any(p.is_symlink() for p in dest.iterdir())
    assert (dest / "climb.json").read_bytes() == member_bytes("../../climb.json")
    assert (dest / "rooted.json").read_bytes() == member_bytes("/abs/rooted.json")
    assert (dest / "alias.json").read_bytes() == member_bytes("inside/real.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outside.json", "remote", "work"]  # nothing climbed out

    one_download(work, source.as_uri(), extract=["escape.json"])
    code, _, err = download(work, "bundle", capsys, monkeypatch)
    assert code == 2
    assert err.startswith("error: params.yaml: downloads.bundle.extract: data/raw/bundle/bundle.tar.gz has no regular "
                          "file 'escape.json'")
    assert not (dest / "escape.json").exists() and outside.read_text() == "not for the archive"


def test_pinned_sha256_is_checked_for_a_file_url(tmp_path, capsys, monkeypatch):
    source = tmp_path / "remote" / "dev.json"
    payload = stand_in(source, [])
    digest = hashlib.sha256(payload).hexdigest()
    one_download(tmp_path / "work", source.as_uri(), sha256="0" * 64)
    code, _, err = download(tmp_path / "work", "bundle", capsys, monkeypatch)
    assert code == 2
    part = "data/raw/bundle/dev.json.part"
    assert err.strip().splitlines()[-1] == (
        f"error: download of {source.as_uri()} does not match: expected sha256={'0' * 64}, got sha256={digest} "
        f"(deleted {part})")
    assert list((tmp_path / "work/data/raw/bundle").iterdir()) == []

    one_download(tmp_path / "work", source.as_uri(), sha256=digest)
    code, out, err = download(tmp_path / "work", "bundle", capsys, monkeypatch)
    assert code == 0, err
    assert out.strip() == f"download bundle: data/raw/bundle/dev.json sha256={digest} verified"


@pytest.mark.slow  # runs the adaptive_rag CLI in a subprocess: its real exit status and stderr
def test_missing_file_url_fails_at_once_with_an_error_line_and_status_2(tmp_path):
    url = (tmp_path / "remote" / "nope.json").as_uri()
    one_download(tmp_path, url)
    result = run([sys.executable, "-m", "adaptive_rag", "download", "--name", "bundle"], tmp_path, check=False,
                 timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == f"error: cannot download {url}: No such file or directory"
    assert not any((tmp_path / "data/raw/bundle").iterdir())


# ---- through the Snakemake rule ----

@pytest.mark.slow  # runs Snakemake
def test_snakemake_downloads_keeps_plain_files_and_extracts_archives(tmp_path):
    remote = tmp_path / "remote"
    plain = stand_in(remote / "hotpot_dev_distractor_v1.json", [])
    corpus = stand_in(remote / "psgs_w100.tsv.gz", [])
    archive = stand_in(remote / "iirc_train_dev.tgz", ["iirc_train_dev/dev.json"])
    repo = copy_workflow(tmp_path / "repo")

    def edit(data):
        data["downloads"] = {
            "hotpotqa-dev": {"url": (remote / "hotpot_dev_distractor_v1.json").as_uri(),
                             "sha256": hashlib.sha256(plain).hexdigest()},
            "dpr-wiki": {"url": (remote / "psgs_w100.tsv.gz").as_uri(), "sha256": None},
            "iirc": {"url": (remote / "iirc_train_dev.tgz").as_uri(), "sha256": None,
                     "extract": ["iirc_train_dev/dev.json"]},
        }

    edit_params(repo, edit)
    sm = [sys.executable, "-m", "snakemake", "--cores", "1"]
    run([*sm, "downloads"], repo)
    raw = repo / "data/raw"
    assert (raw / "hotpotqa-dev/hotpot_dev_distractor_v1.json").read_bytes() == plain
    assert (raw / "dpr-wiki/psgs_w100.tsv.gz").read_bytes() == corpus
    assert (raw / "iirc/iirc_train_dev.tgz").read_bytes() == archive
    assert (raw / "iirc/dev.json").read_bytes() == member_bytes("iirc_train_dev/dev.json")
    assert "verified" in (repo / "logs/download/hotpotqa-dev.log").read_text()

    dry = run([*sm, "-n", "downloads"], repo)
    assert "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout
    assert (raw / "hotpotqa-dev/hotpot_dev_distractor_v1.json").read_bytes() == plain


@pytest.mark.slow  # runs Snakemake
def test_a_wrong_archive_member_keeps_the_verified_archive(tmp_path):
    """Extraction is its own rule: when it fails (a wrong member path), Snakemake deletes only what
    that rule would have made, and the fixed rerun extracts without fetching the archive again."""
    remote = tmp_path / "remote"
    archive = stand_in(remote / "data_ids_april7.zip", ["dev.json"])
    repo = copy_workflow(tmp_path / "repo")
    entry = {"url": (remote / "data_ids_april7.zip").as_uri(), "sha256": hashlib.sha256(archive).hexdigest(),
             "extract": ["data/dev.json"]}
    edit_params(repo, lambda d: d.update(downloads={"2wiki": entry}))
    sm = [sys.executable, "-m", "snakemake", "--cores", "1"]
    failed = run([*sm, "downloads"], repo, check=False)
    assert failed.returncode != 0
    log = (repo / "logs/download/2wiki-extract.log").read_text()
    assert log.startswith("error: params.yaml: downloads.2wiki.extract: ") and "has no member 'data/dev.json'" in log
    kept = repo / "data/raw/2wiki/data_ids_april7.zip"
    assert kept.read_bytes() == archive

    (remote / "data_ids_april7.zip").unlink()  # a re-download would now fail
    edit_params(repo, lambda d: d["downloads"]["2wiki"].update(extract=["dev.json"]))
    run([*sm, "downloads"], repo)
    assert (repo / "data/raw/2wiki/dev.json").read_bytes() == member_bytes("dev.json")
