"""Sharing over SSH: the demo's outputs recorded with `adaptive-rag dvc-record`, pushed to a DVC remote on
a real sshd (Debian's openssh-server on 127.0.0.1, a free port, its own throwaway host and user keys and
sshd_config in a scratch folder), and pulled byte for byte into a `git clone`. DVC's SSH support is the
dvc-ssh package (the `ssh` extra, which `make setup` installs). The host key is checked: the client's
known_hosts (in a scratch HOME) holds it.

Needs sshd and ssh-keygen (`apt-get install openssh-server`; .ci/run installs it) and root, for sshd's
privilege separation; otherwise it skips, saying so.
"""

from __future__ import annotations

import getpass
import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import CLI, GIT_COMMIT, dvc_repository, run, snakemake
from local_daemons import Daemons, daemon_folder, free_port, missing_commands, wait_until

pytestmark = pytest.mark.slow

SSHD = "/usr/sbin/sshd"  # sshd re-executes itself, so it must be started by its absolute path
PRIVSEP_DIR = Path("/run/sshd")  # compiled into Debian's sshd; its service makes it at boot
# The stages recorded and pushed: the model, the split and one run of the demo (wo-rag: no index needed).
STAGES = ("model", "split_demo", "generate_demo_wo-rag")
SHARED = ("data/models/tiny", "data/splits/demo.jsonl", "data/splits/demo.meta.json",
          "data/runs/demo/wo-rag/predictions.jsonl", "data/runs/demo/wo-rag/trace.jsonl",
          "data/runs/demo/wo-rag/provenance.json")


def why_not_here() -> str | None:
    missing = missing_commands(["sshd", "ssh-keygen"])
    if missing:
        return f"OpenSSH server not installed (missing: {', '.join(missing)}): apt-get install openssh-server"
    if os.geteuid() != 0:
        return "the local sshd needs root (its privilege separation)"
    if importlib.util.find_spec("dvc_ssh") is None:
        return "dvc-ssh is not installed: `pip install -c constraints.txt -e \".[ssh]\"` (`make setup` installs it)"
    return None


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    """sshd on 127.0.0.1: (port, user key, a HOME whose .ssh/known_hosts holds its host key, sshd's log)."""
    folder = daemon_folder(tmp_path_factory, "sshd", why_not_here())
    for key in ("host_key", "user_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", key, "-f", folder / key], check=True)
    shutil.copy(folder / "user_key.pub", folder / "authorized_keys")
    port = free_port()
    (folder / "sshd_config").write_text(f"""\
Port {port}
ListenAddress 127.0.0.1
HostKey {folder}/host_key
AuthorizedKeysFile {folder}/authorized_keys
PidFile {folder}/sshd.pid
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
Subsystem sftp internal-sftp
""")
    home = folder / "home"
    (home / ".ssh").mkdir(parents=True)
    host_key = (folder / "host_key.pub").read_text().split()
    (home / ".ssh/known_hosts").write_text(f"[127.0.0.1]:{port} {host_key[0]} {host_key[1]}\n")
    PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
    daemons = Daemons(folder)
    try:
        log = daemons.start("sshd", SSHD, "-D", "-e", "-f", folder / "sshd_config")
        wait_until(lambda: "Server listening on 127.0.0.1" in log.read_text(errors="replace"), 30,
                   "sshd did not start", log)
        yield port, folder / "user_key", home, log
    finally:
        daemons.stop()


def test_recorded_outputs_go_through_an_ssh_remote_into_a_clone_byte_for_byte(sshd, tiny_llama_dir, tmp_path):
    port, user_key, home, log = sshd
    env = {**os.environ, "HOME": str(home)}  # known_hosts; no other SSH or DVC settings of this machine
    repo = dvc_repository(tmp_path / "repo", tiny_llama_dir)
    snakemake(repo, "data/runs/demo/wo-rag/predictions.jsonl")
    run([*CLI, "dvc-record", *STAGES], repo)

    remote = tmp_path / "remote"
    run(["dvc", "remote", "add", "-d", "cluster", f"ssh://127.0.0.1{remote}"], repo)
    run(["dvc", "remote", "modify", "cluster", "port", str(port)], repo)
    run(["dvc", "remote", "modify", "cluster", "user", getpass.getuser()], repo)
    run(["dvc", "remote", "modify", "--local", "cluster", "keyfile", str(user_key)], repo)  # not committed
    run(["git", "add", "-A"], repo)
    run([*GIT_COMMIT, "-m", "results"], repo)
    pushed = run(["dvc", "push", *STAGES], repo, env=env)
    assert "pushed" in pushed.stdout and remote.is_dir()
    assert f"Accepted publickey for {getpass.getuser()} from 127.0.0.1" in log.read_text()  # through sshd

    clone = tmp_path / "clone"
    run(["git", "clone", "-q", str(repo), str(clone)], tmp_path)
    assert not (clone / "data/runs").exists() and "keyfile" not in (clone / ".dvc/config").read_text()
    run(["dvc", "remote", "modify", "--local", "cluster", "keyfile", str(user_key)], clone)  # each user's own key
    run(["dvc", "pull", *STAGES], clone, env=env)
    for rel in SHARED:
        assert file_bytes(clone / rel) == file_bytes(repo / rel), rel
    assert "up to date" in run(["dvc", "status", *STAGES], clone).stdout


def file_bytes(path: Path) -> dict[str, bytes]:
    """Every file at or under `path`, by its path relative to `path`."""
    if path.is_file():
        return {"": path.read_bytes()}
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}
