"""The HTML report's captions (workflow/report/*.rst) render for every ablation of every profile and for
the main experiment, with no reStructuredText error and no undefined name, and name the settings that
made the file they describe.

A caption is rendered here as Snakemake renders one (Jinja with `trim_blocks` and `lstrip_blocks`, with
`snakemake.config` = params.yaml and the job's wildcards, then docutils to HTML), but with undefined
names as errors: Snakemake would print an empty string for a mistyped key. The slow workflow tests build
real reports (tests/test_workflow.py).
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import yaml

from adaptive_rag.ablations import PLOTS
from adaptive_rag.config import load_params

from conftest import REPO

CAPTIONS = REPO / "workflow" / "report"
# the caption each kind of ablation's rule gives its files (workflow/rules/ablations.smk)
CAPTION_OF_PLOT = {"grid": "ablation", "lines": "ablation", "table": "ablation", "significance": "significance",
                   "uncertainty-sweep": "uncertainty-sweep", "sugar-entropy": "sugar-entropy"}
PROFILES = sorted(p.stem for p in (REPO / "params").glob("*.yaml"))


def render(caption: str, config: dict, files=(), **wildcards) -> str:
    """The caption's text (HTML without tags), failing on an undefined name or a docutils message;
    `files`: the report's result records (`target`: the file name, `path`)."""
    from docutils.core import publish_parts
    from jinja2 import Environment, StrictUndefined

    env = Environment(trim_blocks=True, lstrip_blocks=True, undefined=StrictUndefined)
    snakemake = SimpleNamespace(config=config, wildcards=SimpleNamespace(**wildcards), params=SimpleNamespace())
    rst = env.from_string((CAPTIONS / f"{caption}.rst").read_text()).render(snakemake=snakemake, categories={},
                                                                            files=list(files))
    html = publish_parts(rst, writer="html", settings_overrides={"report_level": 1})["body"]
    assert "system-message" not in html, html
    return re.sub(r"<[^>]+>", "", html).replace("&quot;", '"')


def test_every_kind_of_ablation_has_a_caption():
    assert set(CAPTION_OF_PLOT) == set(PLOTS)
    for caption in {*CAPTION_OF_PLOT.values(), "scores", "retrievals", "configuration", "workflow"}:
        assert (CAPTIONS / f"{caption}.rst").is_file(), caption


@pytest.mark.parametrize("profile", PROFILES)
def test_captions_name_what_made_each_file(profile):
    path = REPO / "params" / f"{profile}.yaml"
    config, params = yaml.safe_load(path.read_text()), load_params(path)
    assert f"model {config['model']['name']} (" in render("workflow", config)  # the front page
    for caption in ("scores", "retrievals"):
        text = render(caption, config)
        for method in config["experiment"]["methods"]:
            assert f"{method}: " in text
        assert f"name: {config['model']['name']}" in text
    text = " ".join(render("configuration", config).split())
    assert f"methods ({', '.join(config['experiment']['methods'])})" in text
    for name, ablation in params.ablations.items():
        text = render(CAPTION_OF_PLOT[ablation.plot], config, ablation=name)
        assert text.startswith(f"{name} ({ablation.paper})") if ablation.paper else text.startswith(name)
        assert f"ablations.{name}: " in text
        for dataset in ablation.datasets:
            assert f"{dataset} (" in text
        for key in ablation.vary:
            assert f"{key} over [" in text
        if ablation.variants:
            assert f"an ablation of {len(ablation.variants)} variants" in text
            for base in {v.base for v in ablation.variants}:
                assert f"{base}: " in text  # the settings each variant starts from
        else:
            assert f"{ablation.base or config['ablations'][name]['method']} (the configuration" in text


def test_a_caption_without_optional_keys_still_renders():
    """An ablation with neither `paper` nor `baseline`, params without the optional sections."""
    config = yaml.safe_load((REPO / "params.yaml").read_text())
    for key in ("retrieval", "generation", "seed"):
        config.pop(key)
    config["ablations"] = {"k": {"datasets": ["demo"], "method": "sr-rag", "vary": {"top_k": [1, 2]}}}
    text = render("ablation", config, ablation="k")
    assert text.startswith("k: an ablation of 2 variants") and "(empty: no baseline is set)" in text
    assert "time_rel" not in text
    assert "sr-rag: {top_k: 3}" in text and "generation: {}" in text


def test_the_front_page_prints_the_resolved_settings_under_configuration(tmp_path, monkeypatch):
    """With `reports/params.yaml` among the report's results, the front page's Configuration section
    prints the file (docutils' include, relative to the directory Snakemake runs in); without it, the
    section says how to get it."""
    from adaptive_rag.reports.resolved import write_resolved

    config = yaml.safe_load((REPO / "params.yaml").read_text())
    text = render("workflow", config)
    assert "under Configuration below" in text
    assert "\nConfiguration\n" in text and "does not hold the main experiment's resolved settings" in text
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reports").mkdir()
    write_resolved(load_params(REPO / "params.yaml"), tmp_path / "reports" / "params.yaml")
    record = SimpleNamespace(target="params.yaml", path="reports/params.yaml")
    text = render("workflow", config, files=[record])
    section = text[text.index("\nConfiguration\n"):]
    assert "does not hold" not in section
    assert "  baseline: wo-rag\n" in section and "      attention_scope: full\n" in section  # a default filled in
    assert "dragin:\n    type: dragin\n    settings:\n" in section