"""Runs built before prompt templates and loop rules existed keep their key (Snakemake reruns none of
them), and naming a template or a rule changes the key of exactly the runs it concerns."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from adaptive_rag.config import parse_params
from adaptive_rag.errors import ConfigError
from adaptive_rag.progress import digest

from conftest import REPO
from run_keys import PROFILES, run_keys

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize("profile", sorted(p.stem for p in (FIXTURES / "run_keys").glob("*.json")))
def test_every_planned_run_keeps_the_key_it_had_before_templates_and_rules(profile):
    """Every run the profile planned then and still plans has the same key. (A deliberate change to a
    profile's settings changes its runs' keys: then refresh this fixture with `tests/run_keys.py`.)"""
    before = json.loads((FIXTURES / "run_keys" / f"{profile}.json").read_text())
    now = run_keys(PROFILES[profile])
    kept = sorted(set(before) & set(now))
    assert len(kept) >= len(before) // 2, "most of the runs the fixture lists are no longer planned"
    assert {k: now[k] for k in kept} == {k: before[k] for k in kept}


@pytest.fixture
def base():
    return yaml.safe_load((REPO / "params.yaml").read_text())


def key(data, dataset="demo", method="flare"):
    return digest(parse_params(data).run_settings(dataset, method))


def test_a_rule_at_its_default_leaves_the_key_alone_and_any_other_value_changes_it(base):
    plain = key(base)
    for rule, default, other in [("stop", None, []), ("lookahead", "remaining", "full"),
                                 ("answer_check", "any-case", "exact-case"), ("end_of_turn", "strip", "keep")]:
        data = copy.deepcopy(base)
        data["methods"]["flare"][rule] = default
        assert key(data) == plain, rule
        data["methods"]["flare"][rule] = other
        assert key(data) != plain, rule
        assert key(data, method="sr-rag") == key(base, method="sr-rag")  # other methods' runs untouched


def test_dragin_reference_code_now_means_the_word_level_reencoded_scoring(base):
    params = parse_params(base)
    settings = params.method("dragin-code").settings
    assert (settings["rind_units"], settings["attention_pass"], settings["query_punctuation"],
            settings["query_duplicates"]) == ("word", "reencoded", "keep", "keep")
    # its earlier stand-in is four settings away, and then its key is what it was
    data = copy.deepcopy(base)
    data["methods"]["dragin-code"].update(rind_units="token", attention_pass="generation",
                                          query_punctuation="strip", query_duplicates="drop")
    stand_in = parse_params(data).run_settings("demo", "dragin-code")
    assert "rind_units" not in json.dumps(stand_in) and "attention_pass" not in json.dumps(stand_in)


def test_a_dataset_template_enters_the_key_with_its_content(base, tmp_path):
    template = tmp_path / "t.yaml"
    template.write_text('version: 1\ncot:\n  raw: {header: "", exemplar: "", question: "{question}"}\n'
                        '  chat: {system: null, user: "", assistant: "", question: "{question}"}\n')
    data = copy.deepcopy(base)
    data["datasets"]["demo"]["template"] = "builtin:default"  # naming the default is not naming another
    assert key(data) == key(base)
    data["datasets"]["demo"]["template"] = str(template)
    settings = parse_params(data).run_settings("demo", "flare")
    record = next(s for s in settings if isinstance(s, dict) and s.get("name") == "demo")
    assert record["template"]["spec"] == str(template)
    assert record["template"]["content"]["cot"]["raw"]["question"] == "{question}"
    first = key(data)
    assert first != key(base) and key(data, dataset="demo-small") == key(base, dataset="demo-small")
    template.write_text(template.read_text().replace('question: "{question}"}', 'question: "Q: {question}"}', 1))
    import os
    os.utime(template, ns=(1, 1))
    assert key(data) != first  # an edited template reruns what used it


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["datasets"]["demo"].update(template="builtin:dragin"),
     "datasets.demo.template: no built-in prompt template 'builtin:dragin'; available: builtin:default"),
    (lambda d: d["datasets"]["demo"].update(template=3), "datasets.demo.template: expected `builtin:<name>` or a file path"),
    (lambda d: d["datasets"]["demo"].update(template=str(FIXTURES / "prompts" / "dragin-hotpotqa.yaml")),
     "datasets.demo.template: .*dragin-hotpotqa.yaml: cot: no `chat` section, and model.prompt_format is chat"),
    (lambda d: d["methods"]["flare"].update(stop="\n"), r"methods.flare.stop: expected a list of non-empty strings \(\[\] for none\)"),
    (lambda d: d["methods"]["flare"].update(stop=["a", ""]), "methods.flare.stop: expected a list of non-empty strings"),
    (lambda d: d["methods"]["flare"].update(lookahead=0), "methods.flare.lookahead: must be remaining, full or an integer >= 1"),
    (lambda d: d["methods"]["flare"].update(answer_check="ignore-case"), "methods.flare.answer_check: must be one of any-case, exact-case"),
    (lambda d: d["methods"].update({"wo-rag": {"end_of_turn": "drop"}}),
     "methods.wo-rag.end_of_turn: must be one of strip, keep"),
    (lambda d: d["methods"]["sr-rag"].update(lookahead="full"), "methods.sr-rag.lookahead: unknown key"),
    (lambda d: d["methods"]["seakr"].update(stop=[]), "methods.seakr.stop: unknown key"),
    (lambda d: d["methods"]["dragin"].update(rind_units="sentence"), "methods.dragin.rind_units: must be one of token, word"),
])
def test_bad_template_and_rule_settings_name_the_key(base, mutate, message):
    mutate(base)
    with pytest.raises(ConfigError, match=message):
        parse_params(base)


def test_a_missing_template_file_is_a_missing_input(base, tmp_path):
    base["datasets"]["demo"]["template"] = str(tmp_path / "nowhere.yaml")
    with pytest.raises(ConfigError, match="datasets.demo.template: file not found"):
        parse_params(base).check_inputs()
