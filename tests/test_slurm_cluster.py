"""The SLURM profile (workflow/profiles/slurm) against a running one-node SLURM 22.05 cluster on localhost
(tests/slurm_cluster.py): every rule of the demo-small pipeline is one sbatch job with the resources the
profile gives it, as sacct records them; the predictions equal a local run's byte for byte; a generate job
cancelled with scancel fails the run naming the rule and the rerun resumes it; a job over its memory
request is killed and the messages name the rule and the limit.

Needs root and the Debian packages slurmctld slurmd slurm-client slurmdbd munge mariadb-server-core
mariadb-client-core (.ci/run installs them; otherwise the tests skip, saying so). `make slurm-check` runs
this file alone.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import BIN, REPO, copy_workflow, edit_params, read_jsonl, run, snakemake, tiny_params
from local_daemons import daemon_folder, wait_until
from slurm_cluster import DEBIAN_PACKAGES, PARTITION, one_node_cluster, why_not_here

pytestmark = pytest.mark.slow

# The demo-small pipeline for two methods: model, split, corpus, BM25 index, generate x 2, score x 2.
TARGETS = ("data/scores/demo-small/wo-rag.json", "data/scores/demo-small/sr-rag.json")
# The profile asks 32 GB for generate and model, 8 and 16 GB for corpus and index: more than a small node
# has (SLURM refuses a job no node can hold), so these rules ask for less here. Every other rule keeps the
# profile's default-resources (4000 MB, 60 min).
SMALL_NODE = {"model": (2000, 10), "corpus": (2000, 10), "index": (2000, 10), "generate": (2000, 20)}
PROFILE_DEFAULT = (4000, 60)


def set_resources(overrides: dict[str, tuple[int, int]]) -> list[str]:
    return ["--set-resources", *(f"{rule}:{key}={value}" for rule, (mem, minutes) in overrides.items()
                                 for key, value in (("mem_mb", mem), ("runtime", minutes)))]


# Status checks start 1 s after a submission instead of 40; outputs appear at once on a local disk.
OPTIONS = ["--slurm-init-seconds-before-status-checks", "1", "--latency-wait", "5"]


def slurm_command(*targets, resources=SMALL_NODE, extra=()) -> list[str]:
    return [sys.executable, "-m", "snakemake", "--profile", "workflow/profiles/slurm", *targets, *OPTIONS,
            *extra, *set_resources(resources)]


def tiny_demo(root, tiny_llama_dir):
    """The demo on the tiny model, one question per batch and 24 new tokens: slow enough to cancel mid-run."""
    copy_workflow(root)
    edit_params(root, tiny_params(tiny_llama_dir))
    edit_params(root, lambda d: d["generation"].update(batch_size=1, chunk_size=1, max_new_tokens=24))
    return root


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with one_node_cluster(daemon_folder(tmp_path_factory, "slurm", why_not_here())) as running:
        if int(running.node["RealMemory"]) < PROFILE_DEFAULT[0]:
            pytest.skip(f"this node has {running.node['RealMemory']} MB, less than the {PROFILE_DEFAULT[0]} MB the "
                        "profile's default-resources ask for a job")
        yield running


@pytest.fixture(scope="module")
def local(tiny_llama_dir, tmp_path_factory):
    """The same pipeline run by Snakemake on this machine: the reference outputs."""
    root = tiny_demo(tmp_path_factory.mktemp("local"), tiny_llama_dir)
    snakemake(root, *TARGETS)
    return root


@pytest.fixture(scope="module")
def on_cluster(cluster, tiny_llama_dir, tmp_path_factory):
    """The pipeline submitted through the profile: (workflow root, Snakemake's output); prints its time."""
    root = tiny_demo(tmp_path_factory.mktemp("cluster"), tiny_llama_dir)
    start = time.perf_counter()
    result = run(slurm_command(*TARGETS), root, env=cluster.env)
    print(f"demo-small pipeline (8 jobs) through SLURM in {time.perf_counter() - start:.1f} s")
    return root, result.stdout + result.stderr


def without_wall_times(value):
    """A run's trace or scores less what the clock measured (`wall_time_s`, `wall_time_s_mean`)."""
    if isinstance(value, dict):
        return {k: without_wall_times(v) for k, v in value.items() if not k.startswith("wall_time")}
    if isinstance(value, list):
        return [without_wall_times(v) for v in value]
    return value


def assert_same_results(root, reference, *methods):
    """The predictions byte for byte, the traces and scores but for their wall times."""
    for method in methods:
        rel = f"data/runs/demo-small/{method}/predictions.jsonl"
        assert (root / rel).read_bytes() == (reference / rel).read_bytes(), rel
        rel = f"data/runs/demo-small/{method}/trace.jsonl"
        assert ([without_wall_times(r) for r in read_jsonl(root / rel)] ==
                [without_wall_times(r) for r in read_jsonl(reference / rel)]), rel
        rel = f"data/scores/demo-small/{method}.json"
        assert (without_wall_times(json.loads((root / rel).read_text())) ==
                without_wall_times(json.loads((reference / rel).read_text()))), rel


def rule_of(record: dict[str, str]) -> str:
    """The rule of a job, from the comment the plugin gives it (`rule_<name>[_wildcards_<values>]`)."""
    return re.match(r"rule_(.+?)(_wildcards_|$)", record["Comment"]).group(1)


def test_every_rule_is_an_sbatch_job_with_its_resources_and_the_results_equal_a_local_run(cluster, on_cluster,
                                                                                         local):
    root, out = on_cluster
    submitted = re.findall(r"has been submitted with SLURM jobid (\d+)", out)
    records = cluster.accounting(*submitted)
    assert len(submitted) == len(records) == 8
    rules = sorted(rule_of(r) for r in records)
    assert rules == ["corpus", "generate", "generate", "index", "model", "score", "score", "split"]
    for record in records:
        mem, minutes = SMALL_NODE.get(rule_of(record), PROFILE_DEFAULT)
        assert record["State"] == "COMPLETED" and record["Partition"] == PARTITION, record
        assert (record["ReqMem"], record["Timelimit"]) == (f"{mem}M", f"{minutes // 60:02d}:{minutes % 60:02d}:00")
        # threads become CPUs: retrieval.threads (2) for the index, generation.threads (1) for generate
        assert record["AllocCPUS"] == ("2" if rule_of(record) == "index" else "1"), record
    assert_same_results(root, local, "wo-rag", "sr-rag")
    assert not list((root / ".snakemake/slurm_logs").rglob("*.log"))  # deleted for successful jobs


def test_a_cancelled_generate_job_fails_the_run_and_the_rerun_resumes_it(cluster, on_cluster, local):
    root, _ = on_cluster
    run_dir = root / "data/runs/demo-small/wo-rag"
    for path in [*run_dir.iterdir(), root / TARGETS[0]]:
        path.unlink()
    command = slurm_command(TARGETS[0], extra=["--retries", "0"])  # the profile's retries would resubmit it
    env = {**cluster.env, "PATH": f"{BIN}{os.pathsep}{cluster.env['PATH']}"}
    proc = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        progress = run_dir / ".progress/rank0.jsonl"

        def generating():
            assert proc.poll() is None, f"Snakemake ended before the job was cancelled:\n{proc.stdout.read()}"
            return progress.exists() and len(progress.read_bytes().splitlines()) >= 3
        wait_until(generating, 300, "the generate job wrote no progress")
        job = next(line.split()[0] for line in cluster.command("squeue", "--noheader", "--format=%i %k").stdout
                   .splitlines() if "rule_generate_wildcards_demo-small_wo-rag" in line)
        cluster.command("scancel", job)
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # Snakemake cancels its jobs
            proc.wait(timeout=60)
    finished = len(progress.read_bytes().splitlines()) - 1
    assert 1 <= finished < 16, "the job was not cancelled mid-way"
    assert proc.returncode != 0
    assert "Error in rule generate:" in out and f"SLURM-job '{job}' failed, SLURM status is: 'CANCELLED'" in out
    assert cluster.accounting(job)[0]["State"].startswith("CANCELLED")

    again = run(command, root, env=cluster.env)  # the same command
    assert "rule generate:" in again.stdout + again.stderr
    assert_same_results(root, local, "wo-rag")
    assert json.loads((run_dir / "provenance.json").read_text())["resumed_batches"] == finished
    log = (root / "logs/generate/demo-small/wo-rag.log").read_text()
    assert f"{finished} of 16 batches resumed from the progress log" in log


def test_a_job_over_its_memory_request_is_killed_and_the_messages_name_the_rule_and_the_limit(cluster, on_cluster):
    root, _ = on_cluster
    run_dir = root / "data/runs/demo-small/sr-rag"
    for path in run_dir.iterdir():
        path.unlink()
    limit = 400  # MB: the job's own Snakemake fits, the model loaded with torch does not
    result = run(slurm_command(f"{run_dir.relative_to(root)}/predictions.jsonl", extra=["--retries", "0"],
                               resources={**SMALL_NODE, "generate": (limit, 20)}), root, check=False, env=cluster.env)
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert "Error in rule generate:" in out, out[-3000:]
    job = re.search(r"SLURM-job '(\d+)' failed, SLURM status is: '(FAILED|OUT_OF_MEMORY)'", out).group(1)
    slurm_log = root / f".snakemake/slurm_logs/rule_generate/demo-small_sr-rag/{job}.log"
    killed = rf"StepId={job}\.\S+ exceeded memory limit \(\d+ > {limit * 1024 * 1024}\), being killed"
    assert re.search(killed, slurm_log.read_text()), slurm_log.read_text()[-3000:]
    # The profile's show-failed-logs prints that log after naming it, and the job's resources with it.
    assert str(slurm_log) in out and re.search(killed, out) and f"mem_mb={limit}," in out
    assert cluster.accounting(job)[0]["ReqMem"] == f"{limit}M"


def test_ci_and_the_docs_install_the_packages_the_cluster_needs():
    """.ci/run installs what tests/slurm_cluster.py needs (and openssh-server for tests/test_dvc_ssh.py,
    chromium for tests/test_explorer_browser.py), and the docs tell a person the same."""
    ci = (REPO / ".ci/run").read_text()
    assert f'DEBIAN_PACKAGES="{DEBIAN_PACKAGES} openssh-server chromium"' in ci
    assert f"apt-get install {DEBIAN_PACKAGES} openssh-server chromium" in (REPO / "docs/development.md").read_text()
    assert f"apt-get install {DEBIAN_PACKAGES}\n" in (REPO / "docs/scale-out.md").read_text()
