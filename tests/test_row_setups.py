"""Every row of a paper's table runs under one set-up (row_setups.py): for each ablation with `paper:` in
every shipped profile, the prompt and template, exemplars, answer budget, index, passages per search,
search cap and passages kept of every row (per role: no retrieval, one search, searches while
generating) agree, except what the ablation varies and what a row's method fixes as its paper or code
does; and the Time baseline is a row."""

from __future__ import annotations

import copy

import pytest
import yaml

from adaptive_rag.config import load_params, parse_params
from adaptive_rag.methods.parts.setup import Own
from adaptive_rag.row_setups import differences, row_setup, setup_table

from conftest import REPO

PROFILES = [REPO / "params.yaml", *sorted((REPO / "params").glob("*.yaml"))]


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.name)
def test_the_rows_of_every_papers_table_differ_only_in_what_the_paper_varies(path):
    params = load_params(path)
    tables = [a for a in params.ablations.values() if a.paper and a.variants]
    problems = [line for a in tables for line in differences(params, a)]
    listing = "\n".join(f"{a.name} ({d}):\n{setup_table(params, a, d)}" for a in tables for d in a.datasets
                        if any(a.name + " " in line or a.name + ":" in line for line in problems))
    assert not problems, "\n".join(problems) + "\n\n" + listing


def demo(**changes):
    data = yaml.safe_load((REPO / "params.yaml").read_text())
    for key, value in changes.items():
        section, name = key.split("__")
        data[section][name.replace("_", "-")] = value
    return parse_params(copy.deepcopy(data))


def test_a_table_of_rows_under_different_prompts_is_named_field_by_field():
    """SUGAR's Table II as it stood: wo-rag and sr-rag in the chain-of-thought prompt (8 exemplars, the
    dataset's 100 tokens) beside SUGAR's one-shot branches (1 exemplar, 32 tokens), uncapped IRCoT beside
    SUGAR's 8-step IRCoT, and the Time baseline a run outside the table."""
    params = demo(methods__sugar_single_step={"type": "sugar", "route": "single"},
                  ablations__sugar_table2={"datasets": ["demo-small"], "vary": {"method": [
                      "wo-rag", "sr-rag", "ircot", "sugar"]}, "time_baseline": "sugar-single-step", "paper": "SUGAR"})
    lines = differences(params, params.ablations["sugar-table2"])
    assert lines[0].startswith("ablations.sugar-table2: the Time baseline sugar-single-step is not one of its rows")
    assert ("ablations.sugar-table2 (demo-small): rows that answer without retrieval differ in prompt: wo-rag cot, "
            "sugar qa-oneshot") in lines
    assert ("ablations.sugar-table2 (demo-small): rows that answer after one search differ in answer_tokens: "
            "sr-rag 100, sugar 32") in lines
    assert ("ablations.sugar-table2 (demo-small): rows that answer while searching differ in max_retrievals: "
            "ircot None, sugar 8") in lines
    assert any("differ in exemplars: wo-rag data/demo/exemplars.json (8), sugar data/demo/exemplars.json (1)" in line
               for line in lines)
    assert len(lines) == 8  # the baseline; prompt, exemplars, budget twice; the search cap


def test_what_the_ablation_varies_and_what_a_method_fixes_itself_are_not_differences():
    params = load_params(REPO / "params.yaml")
    # scaar-docs varies top_k; dior-table2 holds DioR's own prompt and cap, RaDIO's SBERT top-1, SeaKR's budget
    assert differences(params, params.ablations["scaar-docs"]) == []
    assert differences(params, params.ablations["dior-table2"]) == []
    dior = row_setup(params, "demo-small", "dior-table2--dior")["multi"]
    assert dior["prompt"] == Own("dior-paper", "DioR's prompt layout (App. F), part of the method")
    radio = row_setup(params, "demo-small", "dior-table2--radio")["multi"]
    assert isinstance(radio["top_k"], Own) and isinstance(radio["retriever"], Own)
    # DioR with DRAGIN's prompt is compared like any row: under another template it would differ
    changed = demo(methods__dior_dragin_prompt={"type": "dior", "prompt": "dragin", "template": "builtin:dragin-hotpotqa"})
    assert any("differ in template" in line for line in differences(changed, changed.ablations["dior-table2"]))


def test_check_params_warns_naming_the_table_and_the_field(tmp_path, capsys):
    from adaptive_rag import cli

    data = yaml.safe_load((REPO / "params.yaml").read_text())
    data["ablations"]["sugar-table2"]["vary"]["method"] = ["wo-rag", "sr-rag-qa", "ircot-8", "sugar"]
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert cli.main(["--params", str(path), "check-params"]) == 0
    err = capsys.readouterr().err
    assert ("warning: ablations.sugar-table2 (demo-small): rows that answer without retrieval differ in prompt: "
            "wo-rag cot, sugar qa-oneshot") in err
