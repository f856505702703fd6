"""`fetch` against a real HTTP server on 127.0.0.1 that supports Range and can drop connections, and
against `file://` URLs (the CLI and the Snakemake rule on file:// stand-ins: test_profile_downloads.py)."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from adaptive_rag.data import download
from adaptive_rag.data.download import RemoteFile, fetch, fetch_with_sha256
from adaptive_rag.errors import InputError

PAYLOAD = os.urandom(300_000)
SHA = hashlib.sha256(PAYLOAD).hexdigest()


class Handler(BaseHTTPRequestHandler):
    """GET with `Range: bytes=N-` (206/416); the first len(cuts) responses stop after cuts[i] body bytes."""

    def do_GET(self):
        state = self.server.state
        with state["lock"]:
            state["requests"].append((self.path, self.headers.get("Range")))
            index = len(state["requests"]) - 1
        data = state["files"].get(self.path)
        if data is None:
            self.send_error(404)
            return
        start, ranged = 0, self.headers.get("Range")
        if ranged and not state["ignore_range"]:
            start = int(re.fullmatch(r"bytes=(\d+)-", ranged).group(1))
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        cuts = state["cuts"]
        self.wfile.write(body[:cuts[index]] if index < len(cuts) else body)  # then the connection closes

    def log_message(self, *args):
        pass


@pytest.fixture
def server(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(download, "BACKOFF_S", 0.0)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    httpd.state = {"files": {"/data.bin": PAYLOAD}, "requests": [], "cuts": [], "ignore_range": False,
                   "lock": threading.Lock()}
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    httpd.url = f"http://127.0.0.1:{httpd.server_address[1]}/data.bin"
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


def ranges(server) -> list[str | None]:
    return [rng for _, rng in server.state["requests"]]


def remote(server, sha256=SHA, size=len(PAYLOAD)) -> RemoteFile:
    return RemoteFile(url=server.url, filename="data.bin", sha256=sha256, size=size)


def test_checksum_ok_lands_file_and_leaves_no_part(server, tmp_path):
    path = fetch(remote(server), tmp_path / "dl", progress=True)
    assert path == tmp_path / "dl" / "data.bin" and not path.is_symlink()
    assert path.read_bytes() == PAYLOAD
    assert sorted(p.name for p in path.parent.iterdir()) == ["data.bin"]
    assert ranges(server) == [None]
    result = fetch_with_sha256(remote(server), tmp_path / "dl")
    assert result.verified and result.sha256 == SHA


def test_checksum_mismatch_names_url_and_both_digests_and_deletes_everything(server, tmp_path):
    wrong = "0" * 64
    with pytest.raises(InputError) as err:
        fetch(remote(server, sha256=wrong), tmp_path, progress=False)
    message = str(err.value)
    assert server.url in message and wrong in message and SHA in message
    assert list(tmp_path.iterdir()) == []


def test_size_mismatch_names_both_sizes(server, tmp_path):
    with pytest.raises(InputError, match=rf"expected {len(PAYLOAD) + 1} bytes, got {len(PAYLOAD)} bytes"):
        fetch(remote(server, size=len(PAYLOAD) + 1), tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_interrupted_transfer_resumes_with_range_from_the_cut(server, tmp_path):
    cut = 123_457
    server.state["cuts"] = [cut]
    path = fetch(remote(server), tmp_path, progress=False)
    assert ranges(server) == [None, f"bytes={cut}-"]
    assert path.read_bytes() == PAYLOAD
    assert not (tmp_path / "data.bin.part").exists()


def test_part_left_by_an_earlier_run_is_resumed(server, tmp_path):
    (tmp_path / "data.bin.part").write_bytes(PAYLOAD[:200_000])
    path = fetch(remote(server), tmp_path, progress=False)
    assert ranges(server) == ["bytes=200000-"]
    assert path.read_bytes() == PAYLOAD


def test_retries_exhausted_keeps_part_for_the_next_run(server, tmp_path):
    server.state["cuts"] = [1000] * 10
    with pytest.raises(InputError, match="failed after 3 attempts.*rerun to resume") as err:
        fetch(remote(server), tmp_path, retries=2, progress=False)
    assert server.url in str(err.value)
    assert ranges(server) == [None, "bytes=1000-", "bytes=2000-"]
    assert (tmp_path / "data.bin.part").read_bytes() == PAYLOAD[:3000]
    assert not (tmp_path / "data.bin").exists()
    server.state["cuts"] = []
    assert fetch(remote(server), tmp_path, progress=False).read_bytes() == PAYLOAD
    assert ranges(server)[-1] == "bytes=3000-"


def test_existing_verified_file_makes_no_request(server, tmp_path):
    (tmp_path / "data.bin").write_bytes(PAYLOAD)
    assert fetch(remote(server), tmp_path, progress=False) == tmp_path / "data.bin"
    assert server.state["requests"] == []


def test_existing_corrupt_file_is_replaced(server, tmp_path):
    (tmp_path / "data.bin").write_bytes(bytes(len(PAYLOAD)))
    assert fetch(remote(server), tmp_path, progress=False).read_bytes() == PAYLOAD
    assert ranges(server) == [None]


def test_verified_mirror_copy_is_symlinked_without_request(server, tmp_path):
    mirror = tmp_path / "shared"
    mirror.mkdir()
    (mirror / "data.bin").write_bytes(PAYLOAD)
    path = fetch(remote(server), tmp_path / "dl", mirrors=[tmp_path / "empty", mirror], progress=False)
    assert path.is_symlink()
    assert os.readlink(path) == str(mirror / "data.bin") and os.path.isabs(os.readlink(path))
    assert path.read_bytes() == PAYLOAD
    assert server.state["requests"] == []
    # a second call finds the link already in place and still makes no request
    assert fetch(remote(server), tmp_path / "dl", mirrors=[mirror], progress=False) == path
    assert server.state["requests"] == []


def test_mirror_copy_with_wrong_checksum_is_not_used(server, tmp_path, caplog):
    mirror = tmp_path / "shared"
    mirror.mkdir()
    bad = bytes(len(PAYLOAD))  # right size, wrong bytes
    (mirror / "data.bin").write_bytes(bad)
    with caplog.at_level(logging.WARNING, logger="adaptive_rag.data"):
        path = fetch(remote(server), tmp_path / "dl", mirrors=[mirror], progress=False)
    assert not path.is_symlink() and path.read_bytes() == PAYLOAD
    assert ranges(server) == [None]
    assert (mirror / "data.bin").read_bytes() == bad
    assert "ignoring mirror copy" in caplog.text


def test_server_ignoring_range_restarts_from_zero(server, tmp_path):
    server.state["ignore_range"] = True
    (tmp_path / "data.bin.part").write_bytes(os.urandom(50_000))  # bytes that must not survive
    path = fetch(remote(server), tmp_path, progress=False)
    assert ranges(server) == ["bytes=50000-"]
    assert path.read_bytes() == PAYLOAD


def test_complete_part_answered_416_is_verified_not_refetched(server, tmp_path):
    (tmp_path / "data.bin.part").write_bytes(PAYLOAD)
    path = fetch(remote(server, size=None), tmp_path, progress=False)
    assert ranges(server) == [f"bytes={len(PAYLOAD)}-"]
    assert path.read_bytes() == PAYLOAD and not (tmp_path / "data.bin.part").exists()


def test_oversized_part_answered_416_restarts_from_zero(server, tmp_path):
    (tmp_path / "data.bin.part").write_bytes(os.urandom(len(PAYLOAD) + 10))
    path = fetch(remote(server, size=None), tmp_path, progress=False)
    assert ranges(server) == [f"bytes={len(PAYLOAD) + 10}-", None]
    assert path.read_bytes() == PAYLOAD


def test_http_404_fails_at_once(server, tmp_path):
    missing = RemoteFile(url=server.url.replace("data.bin", "nope.bin"), filename="nope.bin")
    with pytest.raises(InputError, match=r"nope\.bin: HTTP 404"):
        fetch(missing, tmp_path, progress=False)
    assert len(server.state["requests"]) == 1


def test_unpinned_download_warns_and_returns_computed_sha256(server, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="adaptive_rag.data"):
        result = fetch_with_sha256(remote(server, sha256=None, size=None), tmp_path, progress=False)
    assert result.sha256 == SHA and result.verified is False
    assert result.path.read_bytes() == PAYLOAD
    assert f"no checksum pinned for {server.url}; got sha256={SHA}" in caplog.text


def test_filename_must_be_a_plain_name():
    with pytest.raises(InputError, match="plain file name"):
        RemoteFile(url="http://127.0.0.1/x", filename="../x")


# ---- file:// URLs ----

def local(tmp_path, sha256=SHA, size=len(PAYLOAD)) -> RemoteFile:
    source = tmp_path / "remote" / "data.bin"
    source.parent.mkdir(exist_ok=True)
    source.write_bytes(PAYLOAD)
    return RemoteFile(url=source.as_uri(), filename="data.bin", sha256=sha256, size=size)


def test_file_url_is_copied_and_verified(tmp_path):
    result = fetch_with_sha256(local(tmp_path), tmp_path / "dl", progress=False)
    assert result.verified and result.sha256 == SHA
    assert result.path.read_bytes() == PAYLOAD and not result.path.is_symlink()
    assert sorted(p.name for p in result.path.parent.iterdir()) == ["data.bin"]


@pytest.mark.parametrize("kept", [1000, len(PAYLOAD), len(PAYLOAD) + 10])
def test_file_url_rewrites_a_left_over_part_from_zero(tmp_path, kept, caplog):
    """A local file has no Range support: a `.part` (even one of the pinned size) is copied again, quietly."""
    (tmp_path / "dl").mkdir()
    (tmp_path / "dl" / "data.bin.part").write_bytes(os.urandom(kept))  # bytes that must not survive
    with caplog.at_level(logging.WARNING, logger="adaptive_rag.data"):
        path = fetch(local(tmp_path), tmp_path / "dl", progress=False)
    assert path.read_bytes() == PAYLOAD and not (tmp_path / "dl" / "data.bin.part").exists()
    assert caplog.records == []  # no "server ignored the Range request": there is no server


def test_file_url_with_wrong_sha256_names_both_digests(tmp_path):
    remote = local(tmp_path, sha256="0" * 64)
    with pytest.raises(InputError) as err:
        fetch(remote, tmp_path / "dl", progress=False)
    assert str(err.value) == (f"download of {remote.url} does not match: expected sha256={'0' * 64}, got sha256={SHA} "
                              f"(deleted {tmp_path / 'dl' / 'data.bin.part'})")
    assert list((tmp_path / "dl").iterdir()) == []


@pytest.mark.parametrize(("target", "why"), [("nope.bin", "No such file or directory"), ("", "Is a directory")])
def test_missing_file_url_fails_at_once(tmp_path, monkeypatch, target, why):
    calls = []
    transfer = download._transfer
    monkeypatch.setattr(download, "_transfer", lambda *a: calls.append(a) or transfer(*a))
    url = (tmp_path / target).as_uri()
    with pytest.raises(InputError) as err:
        fetch(RemoteFile(url=url, filename="x.bin"), tmp_path / "dl", progress=False)
    assert str(err.value) == f"cannot download {url}: {why}"
    assert len(calls) == 1 and list((tmp_path / "dl").iterdir()) == []
