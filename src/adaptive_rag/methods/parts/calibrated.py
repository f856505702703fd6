"""What every method with a threshold read from a calibration split shares (SeaKR's delta, SUGAR's
t1 and t2): where the calibration file lives, which split it is made on, how it is read, and the
refusal to evaluate on the questions it was made from.

A configuration with `calibration_dataset: D` reads `data/calibration/D/<method>.json`: the generate
rule makes that file an input of the run (`Method.inputs`), and the `calibrate` rule writes it. `D`
may hold `{dataset}`, replaced by the evaluated dataset (`{dataset}-calib`), so one configuration
calibrates per dataset even as an ablation variant, which carries no `per_dataset` presets.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

from ...errors import ConfigError, InputError
from ...evaluation.answer import predicted
from ...evaluation.metrics import score_answer

CALIBRATION_DIR = "data/calibration"
DATASET_FIELD = "{dataset}"


def calibration_path(dataset: str, method: str) -> str:
    return f"{CALIBRATION_DIR}/{dataset}/{method}.json"


def resolve_calibration_dataset(name: str, dataset: str) -> str:
    """The calibration split of a run on `dataset`; never the evaluated split itself, whose answers
    would then have chosen its own thresholds."""
    resolved = name.replace(DATASET_FIELD, dataset)
    if resolved == dataset:
        raise ConfigError(f"calibration_dataset {name!r} is the evaluated dataset {dataset!r}: calibrate on a "
                          f"split that shares no question with it (a dataset with `sample.skip`)")
    return resolved


def load_calibration(path: Path, what: str, read: Callable[[dict], Any]) -> Any:
    """`read` applied to the calibration JSON; a missing, broken or foreign file fails naming the step
    that makes it."""
    try:
        return read(json.loads(Path(path).read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{path}: not a readable {what} calibration ({exc}); run the calibrate step "
                         f"(snakemake --cores all {path})") from None


def refuse_other_settings(path: Path, recorded: dict, mine: dict) -> None:
    """A calibration made with other settings than the run's (a per_dataset preset, an edited method)
    would give a threshold for another configuration: refuse it, naming the first key that differs."""
    differ = sorted((k, recorded.get(k), v) for k, v in mine.items() if recorded.get(k) != v)
    if differ:
        key, theirs, ours = differ[0]
        raise InputError(f"{path}: calibrated with {key} {theirs!r}, but this run has {ours!r} (a per_dataset "
                         f"preset?); calibrate with the settings the run uses")


def refuse_calibration_questions(examples: Sequence, ids: frozenset, calibration_dataset: str) -> None:
    leaked = [e.id for e in examples if e.id in ids]
    if leaked:
        raise InputError(f"questions {', '.join(leaked[:5])} are in the calibration split of "
                         f"methods' calibration_dataset {calibration_dataset!r}: "
                         f"calibrate on questions the evaluation does not use (sample.skip)")


def score_answers(examples: Sequence, answers: Sequence) -> list[dict[str, float]]:
    """EM, F1 and Acc of each answer as the score step would compute them from its run's predictions."""
    return [score_answer(predicted(a.output, a.direct, a.extraction)[0], e.answers, e.answer_type)
            for e, a in zip(examples, answers)]
