"""The SLURM profile (workflow/profiles/slurm): a dry run with it plans one GPU job per dataset x method
and small CPU jobs for everything else, with the GPUs params.yaml implies.

The dry run needs snakemake-executor-plugin-slurm (for `executor: slurm`), installed by `make setup`
(the `slurm` extra), but no cluster: Snakemake plans with its dry-run executor and submits nothing.
"""

from __future__ import annotations

import importlib.util

import pytest

from conftest import copy_workflow, edit_params, snakemake

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("snakemake_executor_plugin_slurm") is None,
                       reason="snakemake-executor-plugin-slurm is not installed: `pip install -e \".[slurm]\"` "
                              "(`make setup` installs it)"),
]


def planned(cwd, *targets) -> list[tuple[str, dict[str, str]]]:
    """(rule, resources) of every job a dry run with the SLURM profile plans."""
    result = snakemake(cwd, "-n", "--profile", "workflow/profiles/slurm", *targets)
    out = result.stdout + result.stderr
    assert "Using profile workflow/profiles/slurm" in out
    jobs, rule = [], None
    for line in out.splitlines():
        stripped = line.strip()
        if stripped.startswith(("rule ", "localrule ")) and stripped.endswith(":"):
            rule = stripped.split()[1].rstrip(":")
        elif stripped.startswith("resources: ") and rule is not None:
            jobs.append((rule, dict(item.split("=", 1) for item in stripped[len("resources: "):].split(", "))))
            rule = None
    return jobs


def test_generate_jobs_ask_for_their_gpus_and_cpu_jobs_stay_small(tmp_path):
    copy_workflow(tmp_path)
    edit_params(tmp_path, lambda d: (d["model"].update(device="cuda"), d["generation"].update(processes=2)))
    jobs = planned(tmp_path, "all", "ablation_seakr_sweep", "data/runs/demo-small/seakr/predictions.jsonl")
    rules = [rule for rule, _ in jobs]
    assert rules.count("generate") == 13  # one job per dataset x method: the experiment's 6 x 2, SeaKR on demo-small
    assert {"calibrate", "uncertainty_sweep", "split", "score", "report", "index", "corpus", "model"} <= set(rules)
    for rule, resources in jobs:
        if rule == "generate":  # generation.processes GPUs: one per Accelerate process
            assert (resources["gpu"], resources["mem_mb"], resources["runtime"]) == ("2", "32000", "1440")
        elif rule in ("calibrate", "uncertainty_sweep"):  # the model in one process
            assert resources["gpu"] == "1" and resources["mem_mb"] == "32000"
        else:
            assert resources.get("gpu", "0") == "0", rule
            assert int(resources["mem_mb"]) <= 32000 and int(resources["runtime"]) <= 600, rule
        if rule in ("split", "score", "report"):
            assert (resources["mem_mb"], resources["runtime"]) == ("4000", "60")

    # On the CPU, or with an API model (its server holds the GPUs), no job asks for one.
    edit_params(tmp_path, lambda d: d["model"].update(device="cpu"))
    jobs = planned(tmp_path, "all")
    assert [r for r, _ in jobs].count("generate") == 12 and all(res.get("gpu", "0") == "0" for _, res in jobs)

    def api(data):  # only methods that need nothing but log-probabilities
        data["model"].update(device="cuda", backend="api", api={"base_url": "http://127.0.0.1:8000/v1", "model": "m"})
        data["methods"] = {name: data["methods"][name] for name in ("wo-rag", "sr-rag", "flare")}
        data["experiment"]["methods"], data["ablations"] = ["wo-rag", "sr-rag", "flare"], {}
        data.pop("complexity_classifier")  # Adaptive-RAG's labels read IRCoT runs, which this API model cannot make
    edit_params(tmp_path, api)
    jobs = planned(tmp_path, "all")
    assert [r for r, _ in jobs].count("generate") == 6 and all(res.get("gpu", "0") == "0" for _, res in jobs)
