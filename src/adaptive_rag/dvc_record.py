"""`adaptive-rag dvc-record`: record in dvc.lock the outputs Snakemake already built, without recomputing.

Building with `snakemake --cores all` is the fast path (parallel jobs, Snakemake's fine-grained reruns),
but it leaves no dvc.lock, so a following `dvc repro` would delete and rebuild every output (at paper
scale, a 21M-passage re-index). `dvc commit --force STAGE...` hashes the outputs that exist and writes
their lock entries, also for stages DVC never ran (`--force`: without it DVC asks for confirmation,
and answers no when there is no terminal). Before that we check, in order:

1. dvc.yaml is what params.yaml generates (a stale file would record the wrong stages);
2. every output and dependency of every stage to record exists, else we stop naming the stage and the
   path (and record nothing), since DVC would fail half-way through on the first one. Without stage
   names, a stage none of whose outputs exists was never built: `snakemake --cores all` builds the main
   experiment, not the ablations, the detectors or an index only they search, so those are left out
   and named (`Recorded.unbuilt`), to be recorded once built; a stage with some outputs missing is an
   incomplete build and stops everything, as does any missing file of a stage named explicitly;
3. Snakemake has nothing left to do for those stages' targets (`snakemake -n`): outputs that exist but
   are stale (params.yaml edited since the build) or incomplete (a killed job) must not be recorded
   as if they matched the current settings.

Afterwards `dvc status` of the recorded stages must be clean, which is checked too.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .dvc_stages import SNAKEMAKE, build_stages, check_current
from .errors import AdaptiveRagError, InputError


def select(stages: dict, names: list[str]) -> list[str]:
    """Stage names for the arguments: a stage's name, or a group (`generate`, `split`, `index`, `ablation`)
    meaning every stage whose name starts with it and `_`. None: every stage."""
    if not names:
        return list(stages)
    chosen: list[str] = []
    for arg in names:
        found = [arg] if arg in stages else [n for n in stages if n.startswith(arg + "_")]
        if not found:
            groups = sorted({n.split("_")[0] for n in stages})
            raise InputError(f"no DVC stage {arg!r} in dvc.yaml; stages: {', '.join(stages)} "
                             f"(groups: {', '.join(groups)})")
        chosen += [n for n in found if n not in chosen]
    return chosen


def missing_paths(stages: dict, names: list[str]) -> list[tuple[str, str, str]]:
    """(stage, what, path) for each output or dependency that does not exist."""
    missing = []
    for name in names:
        for what in ("outs", "deps"):
            for path in stages[name].get(what, []):
                if not Path(path).exists():
                    missing.append((name, "output" if what == "outs" else "dependency", path))
    return missing


def target(stage: dict) -> str:
    return stage["cmd"][len(SNAKEMAKE) + 1:]


def never_built(stages: dict, names: list[str]) -> list[str]:
    """The stages none of whose outputs exists."""
    return [name for name in names if not any(Path(path).exists() for path in stages[name]["outs"])]


@dataclass(frozen=True)
class Recorded:
    stages: list[str]  # recorded in dvc.lock
    unbuilt: list[str]  # left out (no stage named): none of their outputs exists
    unbuilt_targets: list[str]  # the Snakemake targets that build them

    def unbuilt_line(self) -> str | None:
        """What was left out and how to record it later, as one line; None when nothing was."""
        if not self.unbuilt:
            return None
        return (f"not recorded, never built ({len(self.unbuilt)} stage(s)): {', '.join(self.unbuilt)}; to record "
                f"them, build them with `{SNAKEMAKE} {' '.join(self.unbuilt_targets)}` and run "
                f"`adaptive-rag dvc-record` again")


def pending_jobs(targets: list[str]) -> dict[str, int]:
    """Jobs per rule that Snakemake would still run for `targets` ({} when everything is up to date)."""
    cmd = [sys.executable, "-m", "snakemake", "--cores", "1", *targets, "--dry-run", "--quiet", "rules"]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise AdaptiveRagError(f"`snakemake --dry-run` for the stages' targets failed:\n"
                               f"{(result.stderr or result.stdout).strip()[-3000:]}")
    jobs = {}
    for line in result.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and parts[0] not in ("total", "job"):
            jobs[parts[0]] = int(parts[1])
    return jobs


def _dvc(*args: str, quiet: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dvc", *args], text=True,
                          capture_output=quiet, stdin=subprocess.DEVNULL)


def record(params, names: list[str], dvc_yaml: str = "dvc.yaml", check_snakemake: bool = True) -> Recorded:
    """Record the chosen stages in dvc.lock; by default every stage that was built (see the module doc)."""
    if not Path(".dvc").is_dir():
        raise InputError(f"{Path.cwd()} is not a DVC repository (no .dvc/): run `dvc init` here, or run "
                         f"this from the repository root")
    check_current(params, dvc_yaml)
    stages = build_stages(params)
    chosen = select(stages, names)
    unbuilt = [] if names else never_built(stages, chosen)
    if unbuilt and len(unbuilt) == len(chosen):
        raise InputError(f"nothing recorded: no stage of {dvc_yaml} has been built yet; build with "
                         f"`{SNAKEMAKE}` first")
    chosen = [name for name in chosen if name not in unbuilt]
    missing = missing_paths(stages, chosen)
    if missing:
        lines = [f"  stage {stage}: {what} {path} does not exist" for stage, what, path in missing[:20]]
        more = [f"  ... and {len(missing) - 20} more"] if len(missing) > 20 else []
        targets = list(dict.fromkeys(target(stages[s]) for s, _, _ in missing))
        raise InputError("nothing recorded: these stages' files are missing (build them first with "
                         f"`{SNAKEMAKE} {' '.join(targets)}`, or record only the built stages by name):\n"
                         + "\n".join(lines + more))
    if check_snakemake:
        targets = [target(stages[name]) for name in chosen]
        jobs = pending_jobs(targets)
        if jobs:
            summary = ", ".join(f"{rule} {count}" for rule, count in sorted(jobs.items()))
            raise InputError(f"nothing recorded: Snakemake would still run jobs for these stages' targets "
                             f"({summary}): outputs are stale (params.yaml or code changed since the build) "
                             f"or incomplete. Build them first: `{SNAKEMAKE} {' '.join(targets)}`")
    committed = _dvc("commit", "--force", *chosen)
    if committed.returncode != 0:
        raise AdaptiveRagError(f"`dvc commit --force` failed (exit {committed.returncode}); see its message above")
    status = _dvc("status", "--quiet", *chosen, quiet=True)
    if status.returncode != 0:
        report = _dvc("status", *chosen, quiet=True)
        raise AdaptiveRagError(f"recorded, but `dvc status` still reports changes:\n{report.stdout.strip()}")
    return Recorded(chosen, unbuilt, list(dict.fromkeys(target(stages[name]) for name in unbuilt)))
