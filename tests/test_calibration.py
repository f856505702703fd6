"""The one calibration step every method type with a threshold read from data uses (SeaKR, SUGAR): which
types it serves, what it refuses, and the checks on `calibration_dataset` made before any work starts.
The numbers each type computes are tested with the type (tests/methods/seakr/test_seakr.py, test_sugar.py,
parts/test_routing.py); the step end to end on the tiny model in tests/test_workflow.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from adaptive_rag.calibration import build, calibrating_types
from adaptive_rag.config import parse_params
from adaptive_rag.errors import ConfigError, InputError

from conftest import REPO


@pytest.fixture
def base():
    return yaml.safe_load((REPO / "params.yaml").read_text())


def test_the_step_serves_every_type_that_has_a_calibration_hook():
    assert calibrating_types() == ["adaptive-retrieval", "seakr", "sugar"]


def test_a_type_without_a_threshold_is_refused_before_anything_loads(base):
    params = parse_params(base)
    with pytest.raises(InputError, match=r"methods.sr-rag: type 'sr-rag' has no threshold to calibrate "
                                         r"\(types that have one: adaptive-retrieval, seakr, sugar\)"):
        build(params, "demo-calib", "sr-rag", Path("no-split.jsonl"), None)


def test_the_calibration_split_must_exist(base):
    base["methods"]["sugar"]["calibration_dataset"] = "demo-calibb"
    base["experiment"]["methods"].append("sugar")
    with pytest.raises(ConfigError, match=r"methods.sugar.calibration_dataset: on demo it names 'demo-calibb', "
                                          r"which is not under datasets"):
        parse_params(base)


def test_the_evaluated_split_is_never_its_own_calibration(base):
    base["ablations"]["sugar-entropy"]["datasets"] = ["demo-calib"]
    with pytest.raises(ConfigError, match=r"methods.sugar: calibration_dataset 'demo-calib' is the evaluated "
                                          r"dataset 'demo-calib'"):
        parse_params(base)


def test_a_dataset_field_calibrates_each_dataset_on_its_own_split(base):
    from adaptive_rag.methods.registry import method_class

    base["methods"]["sugar"]["calibration_dataset"] = "{dataset}-calib"
    base["ablations"] = {"sugar-table1": {**base["ablations"]["sugar-table1"], "datasets": ["demo", "demo-small"]}}
    with pytest.raises(ConfigError, match=r"methods.sugar-table1--sugar.calibration_dataset: on demo-small it "
                                          r"names 'demo-small-calib', which is not under datasets"):
        parse_params(base)
    base["datasets"]["demo-small-calib"] = {**base["datasets"]["demo-calib"]}
    params = parse_params(base)
    variant = params.method("sugar-table1--sugar")  # an ablation variant
    assert [method_class("sugar").inputs(variant.settings_for(d), d, variant.name)["calibration"]
            for d in ("demo", "demo-small")] == ["data/calibration/demo-calib/sugar-table1--sugar.json",
                                                 "data/calibration/demo-small-calib/sugar-table1--sugar.json"]


def test_ablation_variants_keep_the_per_dataset_presets_with_the_varied_value_on_top(base):
    """SUGAR's Table I variant calibrates single-hop questions on the single-hop split, as `sugar` does;
    a preset never overrides the value an ablation varies."""
    from adaptive_rag.methods.registry import method_class

    params = parse_params(base)
    variant, plain = params.method("sugar-table1--sugar"), params.method("sugar")
    for dataset in ("demo-single-small", "demo-small"):
        assert variant.settings_for(dataset)["calibration_dataset"] == plain.settings_for(dataset)["calibration_dataset"]
    assert method_class("sugar").inputs(variant.settings_for("demo-single-small"), "demo-single-small",
                                        variant.name)["calibration"] == \
        "data/calibration/demo-single-calib/sugar-table1--sugar.json"
    base["methods"]["sugar"]["per_dataset"]["demo-small"] = {"temperature": 0.5}
    base["ablations"]["sugar-temperature"] = {"datasets": ["demo-small"], "method": "sugar",
                                              "vary": {"temperature": [0.7, 1.0]}}
    params = parse_params(base)
    assert params.method("sugar").settings_for("demo-small")["temperature"] == 0.5
    assert [params.method(f"sugar-temperature--{t}").settings_for("demo-small")["temperature"]
            for t in ("0.7", "1.0")] == [0.7, 1.0]
