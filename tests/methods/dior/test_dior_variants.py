"""DioR's named variants and ablation rows change exactly the one setting the paper varied (Table 3's w/o ED,
w/o RD, w/o Pre-R and w/o Post-R, §4.2.3; Table 1's TF-IDF source; Table 7's w/o ED per retriever), compared on
the settings `DioR.read_settings` resolves (defaults count), for every dataset's presets, in the demo params and
the `dior` profile."""

from __future__ import annotations

import pytest

from adaptive_rag.config import load_params

from conftest import REPO

# variant -> (its base configuration, the one setting it changes)
VARIANTS = {
    "dior-context": ("dior", "tfidf"),
    "dior-wo-ed": ("dior", "early"),
    "dior-wo-rd": ("dior", "realtime"),
    "dior-wo-pre": ("dior", "pre"),
    "dior-wo-post": ("dior", "post"),
    "dior-context-wo-ed": ("dior-context", "early"),
}
PROFILES = {"params.yaml": [*VARIANTS, "dior-dragin-prompt"], "params/dior.yaml": list(VARIANTS)}
EXTRA = {"dior-dragin-prompt": ("dior", "prompt")}


def differences(a: dict, b: dict) -> set[str]:
    return {key for key in a.keys() | b.keys() if a.get(key) != b.get(key)}


@pytest.mark.parametrize("profile", list(PROFILES))
def test_each_dior_variant_changes_one_setting_of_its_base(profile):
    params = load_params(REPO / profile)
    for name in PROFILES[profile]:
        base, key = {**VARIANTS, **EXTRA}[name]
        variant, original = params.methods[name], params.methods[base]
        for dataset in [None, *params.datasets]:
            resolved = (variant.settings, original.settings) if dataset is None else (
                variant.settings_for(dataset), original.settings_for(dataset))
            assert differences(*resolved) == {key}, (profile, name, dataset)


@pytest.mark.parametrize("profile", list(PROFILES))
def test_table7_compares_dior_with_and_without_early_detection_per_retriever(profile):
    """Table 7 (App. C.4): Gc and Hc of w/o ED and DioR under BM25, SBERT and SGPT; per retriever the two rows
    differ in `early` only."""
    params = load_params(REPO / profile)
    ablation = params.ablations["dior-table7"]
    rows = {}
    for variant in ablation.variants:
        rows.setdefault(variant.values["retriever"], []).append(params.methods[variant.method])
    assert sorted(rows) == ["bm25", "dense:sbert", "dense:sgpt"]
    for retriever, (first, second) in rows.items():
        assert {first.settings["early"], second.settings["early"]} == {"on", "off"}
        for dataset in ablation.datasets:
            assert differences(first.settings_for(dataset), second.settings_for(dataset)) == {"early"}
