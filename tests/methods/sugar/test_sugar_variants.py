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
def test_the_time_baseline_is_the_tables_single_step_row_which_is_sugars_own_branch(path):
    """The Single-step row (`sr-rag-qa`) answers as the `sugar` run's single branch does: it is the branch's
    own configuration (same prompt style, budget, passages and retriever, no sampling); every SUGAR table
    divides its wall times by it and shows it as a row (Time 1.00)."""
    from adaptive_rag.methods.sugar.sugar import branch_settings

    params = load_params(path)
    for name in ("sugar-table1", "sugar-table2", "sugar-signal"):
        ablation = params.ablations[name]
        assert ablation.time_baseline == f"{name}--sr-rag-qa", (path.name, name)
        assert ablation.time_baseline in [v.method for v in ablation.variants]
        for dataset in ablation.datasets:
            single = params.method(ablation.time_baseline).settings_for(dataset)
            plain = params.method(f"{name}--wo-rag-qa").settings_for(dataset)
            sugar = params.method("sugar").settings_for(dataset)
            assert (plain, single) == branch_settings(sugar), (path.name, name, dataset)
