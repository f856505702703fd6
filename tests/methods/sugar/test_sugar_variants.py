"""SUGAR's named variants in every profile that has them differ from their base in the one setting the
paper's ablation varies (Table III, SUGAR §III-D), compared on the resolved settings (`read_settings`, so
defaults count) of every dataset the ablation runs them on; Time's baseline is SUGAR's own single step."""

from __future__ import annotations

import pytest

from adaptive_rag.config import load_params

from conftest import REPO

PROFILES = [REPO / "params.yaml", REPO / "params" / "shared.yaml", REPO / "params" / "sugar.yaml"]

# variant -> (its base, the one setting Table III varies between them)
#   SUGAR (mean rule) vs the main SUGAR: the thresholds' rule;
#   "PE (semantic θ)" vs SUGAR at its mean: the signal routed on (both at SE's thresholds);
#   "PE (average θ)" vs "PE (semantic θ)": whose average the thresholds are.
VARIANTS = {"sugar-mean": ("sugar", "thresholds"), "sugar-pe-se": ("sugar-mean", "signal"),
            "sugar-pe-mean": ("sugar-pe-se", "threshold_signal")}


def differing(a: dict, b: dict) -> set[str]:
    return {key for key in set(a) | set(b) if a.get(key) != b.get(key)}


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_each_table_three_variant_differs_from_its_base_in_one_setting(path):
    params = load_params(path)
    datasets = params.ablations["sugar-signal"].datasets
    for variant, (base, key) in VARIANTS.items():
        for dataset in datasets:
            mine, theirs = (params.method(n).settings_for(dataset) for n in (variant, base))
            assert differing(mine, theirs) == {key}, (path.name, variant, dataset)


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_the_time_baseline_is_sugars_own_single_step_branch(path):
    """`sugar-single-step` answers as the `sugar` run's single branch does: same prompt style, budget,
    passages and retriever, no sampling; every SUGAR table divides its wall times by it."""
    params = load_params(path)
    for name in ("sugar-table1", "sugar-table2", "sugar-signal"):
        ablation = params.ablations[name]
        assert ablation.time_baseline == "sugar-single-step", (path.name, name)
        for dataset in ablation.datasets:
            single = params.method("sugar-single-step").settings_for(dataset)
            sugar = params.method("sugar").settings_for(dataset)
            assert single["route"] == "single" and sugar["route"] == "entropy"
            assert {k: v for k, v in single.items() if k != "route"} == {k: sugar[k] for k in single if k != "route"}
