"""A one-node SLURM 22.05 cluster on localhost, all of it in one scratch folder: its own munge key and
munged socket, a MariaDB server and slurmdbd (so that `sacct` works: without slurmdbd, 22.05's sacct only
says "Slurm accounting storage is disabled"), slurmctld and slurmd on free ports, and `SLURM_CONF` in
`Cluster.env` pointing at the generated slurm.conf. Every daemon runs as a child of the test and is
stopped by its pid (tests/local_daemons.py).

Inside a job, snakemake-executor-plugin-slurm-jobstep (0.6.1) runs the rule through `srun` with every
`SLURM_*` variable but the job's ids removed from its environment, `SLURM_CONF` included, so that `srun`
finds slurm.conf only where a cluster node keeps it, /etc/slurm/slurm.conf. slurmd (and so every job)
therefore runs in a private mount namespace in which /etc/slurm is the cluster's own etc/ folder; the
machine's /etc/slurm is never touched.

Memory requests are enforced without cgroups: jobacct_gather/linux samples each step's memory every
second and `JobAcctGatherParams=OverMemoryKill` kills a step above its job's `--mem`, the slurm log
naming both numbers ("StepId=5.0 exceeded memory limit (328331264 > 52428800), being killed").

Needs root (slurmd starts jobs as their user) and the Debian packages in DEBIAN_PACKAGES.
"""

from __future__ import annotations

import getpass
import os
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from local_daemons import Daemons, free_port, missing_commands, wait_until

DEBIAN_PACKAGES = "slurmctld slurmd slurm-client slurmdbd munge mariadb-server-core mariadb-client-core"
COMMANDS = ("unshare", "mount", "munged", "mungekey", "mariadb-install-db", "mariadbd", "slurmdbd", "slurmctld",
            "slurmd", "sbatch", "squeue", "sacct", "sacctmgr", "scancel", "scontrol", "sinfo")
PARTITION = "cpu"
CLUSTER = "adaptive-rag-check"
ACCOUNTING_FIELDS = "JobIDRaw,JobName,Partition,State,ReqMem,Timelimit,AllocCPUS,ExitCode,Comment"


def why_not_here() -> str | None:
    """Why a cluster cannot start on this machine (a line for pytest.skip), or None."""
    missing = missing_commands(COMMANDS)
    if missing:
        return (f"SLURM or munge or MariaDB not installed (missing: {', '.join(missing)}): "
                f"apt-get install {DEBIAN_PACKAGES}; see docs/scale-out.md")
    if os.geteuid() != 0:
        return "a local SLURM cluster needs root (slurmd starts each job as its user); see docs/scale-out.md"
    if not Path("/etc/slurm").is_dir():
        return "/etc/slurm is missing (Debian's slurm-client makes it): slurmd's jobs see the cluster's config there"
    namespace = subprocess.run(["unshare", "--mount", "true"], capture_output=True, text=True)
    if namespace.returncode != 0:
        return f"cannot make a private mount namespace for slurmd: {namespace.stderr.strip()}"
    return None


def node_description() -> dict[str, str]:
    """This machine as `slurmd -C` reports it: NodeName, CPUs, Boards, ..., RealMemory."""
    first = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
    return dict(item.split("=", 1) for item in first.split())


@dataclass
class Cluster:
    folder: Path
    env: dict[str, str]  # os.environ with SLURM_CONF: for every SLURM command and Snakemake
    node: dict[str, str]

    def command(self, *args, check=True) -> subprocess.CompletedProcess:
        return subprocess.run([str(a) for a in args], capture_output=True, text=True, env=self.env, check=check,
                              timeout=60)

    def accounting(self, *job_ids) -> list[dict[str, str]]:
        """sacct's record of each job (no steps): ACCOUNTING_FIELDS by name."""
        out = self.command("sacct", "-X", "--parsable2", "--noheader", f"--format={ACCOUNTING_FIELDS}",
                           "--starttime", "now-1days", *(("-j", ",".join(job_ids)) if job_ids else ())).stdout
        return [dict(zip(ACCOUNTING_FIELDS.split(","), line.split("|"))) for line in out.splitlines() if line]

    def queued(self) -> list[str]:
        """Ids of the jobs pending or running."""
        return self.command("squeue", "--noheader", "--format=%i").stdout.split()


def slurm_conf(folder: Path, node: dict[str, str], ports: dict[str, int]) -> str:
    hardware = " ".join(f"{key}={node[key]}" for key in
                        ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory"))
    return f"""\
ClusterName={CLUSTER}
SlurmctldHost={node['NodeName']}(127.0.0.1)
SlurmctldPort={ports['slurmctld']}
SlurmdPort={ports['slurmd']}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={folder}/munge.socket
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd.log
MailProg=/bin/true
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
JobAcctGatherParams=OverMemoryKill
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={ports['slurmdbd']}
AccountingStoragePass={folder}/munge.socket
AccountingStoreFlags=job_comment
MinJobAge=600
NodeName={node['NodeName']} NodeAddr=127.0.0.1 {hardware} State=UNKNOWN
PartitionName={PARTITION} Nodes={node['NodeName']} Default=YES MaxTime=INFINITE State=UP
"""


def slurmdbd_conf(folder: Path, ports: dict[str, int]) -> str:
    return f"""\
AuthType=auth/munge
AuthInfo=socket={folder}/munge.socket
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={ports['slurmdbd']}
SlurmUser=root
PidFile={folder}/slurmdbd.pid
LogFile={folder}/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={ports['mariadb']}
StorageUser=root
StorageLoc=slurm_acct_db
"""


@contextmanager
def one_node_cluster(folder: Path):
    """Start the cluster in `folder` (an empty directory); yield a Cluster; stop every daemon on exit."""
    node = node_description()
    ports = {name: free_port() for name in ("slurmctld", "slurmd", "slurmdbd", "mariadb")}
    for sub in ("etc", "state", "spool", "db"):
        (folder / sub).mkdir()
    etc = folder / "etc"
    (etc / "slurm.conf").write_text(slurm_conf(folder, node, ports))
    (etc / "slurmdbd.conf").write_text(slurmdbd_conf(folder, ports))  # slurmdbd reads it beside slurm.conf
    (etc / "slurmdbd.conf").chmod(0o600)  # slurmdbd refuses a readable one (it may hold a password)
    env = {**os.environ, "SLURM_CONF": str(etc / "slurm.conf")}
    daemons = Daemons(folder, env)
    cluster = Cluster(folder, env, node)
    try:
        subprocess.run(["mungekey", "--create", f"--keyfile={folder}/munge.key"], check=True, capture_output=True)
        # --force: munged otherwise refuses a socket in a directory that not everybody may enter
        daemons.start("munged", "munged", "--foreground", "--force", f"--key-file={folder}/munge.key",
                      f"--socket={folder}/munge.socket", f"--pid-file={folder}/munged.pid",
                      f"--log-file={folder}/munged.log", f"--seed-file={folder}/munged.seed")
        subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={folder}/db", "--user=root",
                        "--auth-root-authentication-method=normal", "--skip-test-db"],
                       check=True, capture_output=True)
        mariadb = daemons.start("mariadb", "mariadbd", "--no-defaults", f"--datadir={folder}/db", "--user=root",
                                f"--socket={folder}/mariadb.socket", f"--port={ports['mariadb']}",
                                "--bind-address=127.0.0.1", "--skip-name-resolve", f"--pid-file={folder}/mariadb.pid",
                                "--innodb-buffer-pool-size=32M")
        wait_until(lambda: "ready for connections" in mariadb.read_text(errors="replace"), 60,
                   "MariaDB did not start", mariadb)
        daemons.start("slurmdbd", "slurmdbd", "-D")
        wait_until(lambda: "started" in _read(folder / "slurmdbd.log"), 60, "slurmdbd did not start",
                   folder / "slurmdbd.log")
        daemons.start("slurmctld", "slurmctld", "-D", "-i")
        daemons.start("slurmd", "unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                      'mount --bind "$0" /etc/slurm && exec slurmd -D', etc)
        wait_until(lambda: cluster.command("sinfo", "--noheader", "--format=%t", check=False).stdout.strip() == "idle",
                   60, "the node did not come up idle", folder / "slurmctld.log")
        wait_until(lambda: CLUSTER in cluster.command("sacctmgr", "--noheader", "list", "cluster", "format=cluster%60",
                                                      check=False).stdout,
                   60, "slurmctld did not register with slurmdbd", folder / "slurmctld.log")
        yield cluster
    finally:
        if daemons.alive("slurmctld"):  # no job may outlive the cluster
            cluster.command("scancel", "--user", getpass.getuser(), check=False)
            try:
                wait_until(lambda: not cluster.queued(), 30, "jobs still queued")
            except AssertionError:
                pass
        daemons.stop()


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""
