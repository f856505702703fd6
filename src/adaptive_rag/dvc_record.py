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
   Before that, no output of those stages may still be being written (`being_written`): Snakemake's
   lock names it as an output of a running build, Snakemake marks it incomplete (its job runs, or was
   killed), or it holds a generation's progress log or a writer's hidden temporary. An output being
   written exists in part (a run's directory exists from its first batch), so without this check
   `--no-dry-run` would record it half-made;
3. Snakemake has nothing left to do for those stages' targets (`snakemake -n`): outputs that exist but
   are stale (params.yaml edited since the build) or incomplete (a killed job) must not be recorded
   as if they matched the current settings.

Afterwards `dvc status` of the recorded stages must be clean, which is checked too.
"""

from __future__ import annotations

import base64
import contextlib
import os
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


SNAKEMAKE_STATE = Path(".snakemake")


def _inside(path: str, outs: dict[str, str]) -> str | None:
    """The stage one of whose outputs is `path` or holds it (`outs`: output -> stage), else None."""
    parts = Path(os.path.normpath(path)).parts
    return next((stage for out, stage in outs.items() if parts[:len(Path(out).parts)] == Path(out).parts), None)


def _locked_outputs() -> list[tuple[str, str]]:
    """(path, lock file) for each output a running Snakemake has locked in this directory (its
    `.snakemake/locks/N.output.lock` lists the build's outputs, one a line, until it ends)."""
    return [(line.strip(), str(lock)) for lock in sorted((SNAKEMAKE_STATE / "locks").glob("*.output.lock"))
            if lock.is_file() for line in lock.read_text(encoding="utf-8", errors="replace").splitlines()
            if line.strip()]


def _incomplete_outputs() -> list[str]:
    """The outputs Snakemake has marked incomplete: one file under `.snakemake/incomplete` per output of
    a job that started and has not finished (or was killed), named by the path's URL-safe base64, cut
    into directories named `@<part>` where the name is too long for one."""
    root = SNAKEMAKE_STATE / "incomplete"
    found = []
    for marker in root.rglob("*") if root.is_dir() else ():
        if not marker.is_file() or marker.name == "migration_underway":
            continue
        encoded = "".join(part.lstrip("@") for part in marker.relative_to(root).parts)
        with contextlib.suppress(ValueError):
            found.append(base64.urlsafe_b64decode(encoded).decode("utf-8"))
    return found


def _partial_files(out: str) -> list[str]:
    """What a writer leaves in or beside `out` until it is done: a generation's progress log
    (`<run>/.progress`, removed when the run's outputs are written) and the hidden temporaries outputs are
    written to before their rename (`io.atomic_write`, `io.staging_dir`)."""
    path = Path(out)
    found = [str(path / ".progress")] if (path / ".progress").exists() else []
    found += [str(p) for p in sorted(path.parent.glob(f".{path.name}.*.tmp"))]
    if path.is_dir():
        found += [str(p) for p in sorted(path.glob(".*.tmp"))]
    return found


def being_written(stages: dict, names: list[str]) -> list[tuple[str, str, str]]:
    """(stage, path, why) for each output of the chosen stages that a build is still writing, or that a
    killed one left part-written."""
    outs = {os.path.normpath(out): name for name in names for out in stages[name]["outs"]}
    found = []
    for path, lock in _locked_outputs():
        if (stage := _inside(os.path.relpath(path) if os.path.isabs(path) else path, outs)) is not None:
            found.append((stage, path, f"an output of the Snakemake build running here ({lock}; if none runs, "
                                       "a killed one left it: `snakemake --unlock`)"))
    for path in _incomplete_outputs():
        if (stage := _inside(os.path.relpath(path) if os.path.isabs(path) else path, outs)) is not None:
            found.append((stage, path, "marked incomplete by Snakemake (its job runs, or was killed)"))
    for out, stage in outs.items():
        for path in _partial_files(out):
            found.append((stage, path, "a writer's unfinished file (it runs, or was killed)"))
    return found


def refusal(stages: dict, rows: list[tuple[str, str]], why: str) -> InputError:
    """`nothing recorded: <why>:` and a line per (stage, problem), the first 20; `{build}` in `why` is the
    Snakemake command that builds those stages."""
    lines = [f"  stage {stage}: {problem}" for stage, problem in rows[:20]]
    more = [f"  ... and {len(rows) - 20} more"] if len(rows) > 20 else []
    build = " ".join([SNAKEMAKE, *dict.fromkeys(target(stages[stage]) for stage, _ in rows)])
    return InputError(f"nothing recorded: {why.format(build=build)}:\n" + "\n".join(lines + more))


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
    writing = being_written(stages, chosen)
    if writing:
        raise refusal(stages, [(stage, f"{path}: {why}") for stage, path, why in writing],
                      "these stages' outputs are still being written; wait for the build to finish, or if it was "
                      "killed, finish it with `{build}`")
    missing = missing_paths(stages, chosen)
    if missing:
        raise refusal(stages, [(stage, f"{what} {path} does not exist") for stage, what, path in missing],
                      "these stages' files are missing (build them first with `{build}`, or record only the "
                      "built stages by name)")
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
