"""When SeaKR retrieves: the paper's fixed delta in its profile, the calibration rule that gives every
Table 3 estimator its own threshold at one retrieval rate, the rate shown beside each ablation row,
and ablation rows and named variants that differ from their base in the paper's one setting."""

import json

import pytest

from adaptive_rag.config import load_params
from adaptive_rag.data.datasets import Example
from adaptive_rag.methods.base import Context
from adaptive_rag.methods.seakr.seakr import SeaKR
from adaptive_rag.reports.ablations import ablation_frame, write_ablation

from conftest import REPO, RecordingRetriever, cont, method_with, settings_of
from test_seakr import SCRIPT, SETTINGS, UncertainLM

# Six calibration questions, five answered wrongly without retrieval (EM 0), the third rightly.
U = [-6.6, -6.4, -6.2, -5.8, -5.5, -5.0]
EM = [0.0, 0.0, 1.0, 0.0, 0.0, 0.0]


def test_best_f1_retrieves_for_every_question_when_most_answers_are_wrong_and_rate_does_not():
    """"U > delta" predicting a wrong answer, by hand: below every U it flags all 6 (tp 5, fp 1:
    P 5/6, R 1, F1 10/11 = 0.909); at -6.6, 5 (tp 4, fp 1, fn 1: F1 0.8); at -6.4, 4 (tp 3, fp 1,
    fn 2: 0.667); at -6.2, 3 (tp 3, fn 2: 0.75); then 0.571, 0.333, 0. So best-f1 is the cut below
    every U (-7.6), which retrieves for every question. Rule `rate` at 0.5: round(0.5 * 6) = 3 of the
    6 above delta, so delta is the 3rd smallest U, -6.2 (-5.8, -5.5 and -5.0 retrieve)."""
    calibrating = method_with(SeaKR, SeaKR.calibration_settings({**SETTINGS}), UncertainLM(SCRIPT))
    record = calibrating.calibration_record([{"u": u, "em": em, "f1": em} for u, em in zip(U, EM)])
    best = max(record["grid"], key=lambda row: (row["f1"], row["delta"]))
    assert record["thresholds"]["best-f1"] == pytest.approx(-7.6)
    assert best["f1"] == pytest.approx(10 / 11) and best["retrieval_rate"] == 1.0
    assert [round(row["f1"], 3) for row in record["grid"]] == [0.909, 0.8, 0.667, 0.75, 0.571, 0.333, 0.0]
    assert record["thresholds"]["rate-0.5"] == -6.2


def test_a_calibrated_run_takes_the_rate_rule_by_default(tmp_path):
    """The default rule retrieves at `calibration_rate` (0.5) of the calibration questions; best-f1
    is the switch."""
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"estimator": "eigenscore", "ids": ["c1"], "u": U,
                                "thresholds": {"best-f1": -7.6}}))
    settings = settings_of(SeaKR, {**SETTINGS, "delta": "calibrated", "calibration_dataset": "calib"}, "m")
    assert (settings["calibration_rule"], settings["calibration_rate"]) == ("rate", 0.5)

    def delta(extra=None):
        ctx = Context(lm=UncertainLM(SCRIPT), exemplars=[], prompt_format="raw", max_new_tokens=50,
                      retriever=RecordingRetriever(), inputs={"calibration": path})
        return SeaKR({**settings, **(extra or {})}, ctx).delta

    assert delta() == -6.2 and sum(u > delta() for u in U) == 3
    assert delta({"calibration_rule": "best-f1"}) == -7.6


def test_the_fixed_delta_retrieves_exactly_above_it():
    """§3.1: retrieval "if U(c_r) > delta"; Tables 5 and 7: U = -4.4 and -4.84 retrieve, -6.11 and
    -6.03 do not, at the published delta -6 (README: `--eigen_threshold -6.0`); U = delta does not."""
    answer = cont([" So", " the", " answer", " is", " Lyon", "."])
    for u, retrieves in ((-4.4, True), (-4.84, True), (-6.0, False), (-6.03, False), (-6.11, False)):
        script = {((), ""): (answer, u), **{((f"passage 1.{i}",), ""): (answer, -6.5) for i in (1, 2, 3)}}
        lm, retriever = UncertainLM(script), RecordingRetriever()
        method = method_with(SeaKR, {**SETTINGS, "variant": "simple"}, lm, retriever)
        [result] = method.answer_batch([Example("q1", "Where was Inchcombe born?", ["Lyon"], "span")])
        assert method.delta == -6.0
        assert (result.detections, result.retrievals, len(retriever.queries)) == (retrieves,) * 3, u


def test_the_seakr_profile_runs_the_published_delta_and_rate_matched_estimator_rows():
    """params/seakr.yaml: SeaKR itself (Tables 1-2, the other Table 3 rows) at delta -6.0 (§5.3 and the
    reference README); the estimator rows, whose estimators have scales of their own, calibrated by
    rate; every call at the reference's 100 tokens."""
    params = load_params(REPO / "params" / "seakr.yaml")
    for name in ("seakr", "seakr-simple"):
        settings = params.method(name).settings
        assert settings["delta"] == -6.0 and settings["max_new_tokens"] == 100
    for name in ("seakr-estimator", "seakr-estimator-simple"):
        for variant in params.ablations[name].variants:
            settings = params.method(variant.method).settings
            assert (settings["delta"], settings["calibration_rule"]) == ("calibrated", "rate")


SEAKR_PROFILES = ("params.yaml", "params/demo.yaml", "params/seakr.yaml", "params/dior.yaml")
DELTA_KEYS = {"delta", "calibration_dataset", "calibration_rule", "calibration_rate"}


def _differences(a: dict, b: dict) -> set:
    return {key for key in set(a) | set(b) if a.get(key) != b.get(key)}


@pytest.mark.parametrize("profile", SEAKR_PROFILES)
def test_seakr_variants_differ_from_their_base_in_the_papers_one_setting(profile):
    """Table 3: each row changes one thing. Ablation rows differ from their base exactly in the varied
    key; `seakr-simple` is `seakr` with the simple-QA variant (what `seakr`'s per_dataset presets give
    on NQ, TriviaQA and SQuAD); the calibrated configurations differ in how delta is set only."""
    params = load_params(REPO / profile)
    seakr = params.methods["seakr"]
    for ablation in params.ablations.values():
        for variant in ablation.variants:
            if "method" in variant.values or params.method(variant.base).type != "seakr":
                continue
            changed = _differences(params.method(variant.method).settings, params.method(variant.base).settings)
            assert changed == {k for k, v in variant.values.items()
                               if params.method(variant.base).settings.get(k) != v}, (ablation.name, variant.method)
    if "seakr-simple" in params.methods:
        assert _differences(params.method("seakr-simple").settings, seakr.settings) == {"variant"}
        for dataset, settings in seakr.per_dataset.items():
            assert _differences(params.method("seakr-simple").settings, settings) == set(), dataset
    for name, base in (("seakr-calibrated", "seakr"), ("seakr-simple-calibrated", "seakr-simple")):
        if name in params.methods:
            assert _differences(params.method(name).settings, params.method(base).settings) <= DELTA_KEYS


def _score(path, dataset, method, histogram):
    questions = sum(histogram.values())
    retrievals = sum(int(k) * n for k, n in histogram.items()) / questions
    summary = {"em": 0.0, "f1": 0.5, "acc": 0.0, "N_R": retrievals, "Rc": retrievals, "Gc": 2.0, "Hc": 1.0,
               "Tc": 50.0, "Sc": 3.0, "questions": questions, "retrievals_histogram": histogram}
    per_question = [{"id": f"q{i}", "em": 0.0, "f1": 0.5, "precision": 0.5, "recall": 0.5, "acc": 0.0}
                    for i in range(questions)]
    path.write_text(json.dumps({"dataset": dataset, "method": method, "summary": summary,
                                "per_question": per_question}))
    return path


def test_each_estimator_row_shows_its_retrieval_rate_beside_its_scores(tmp_path):
    """N_R mixes how many questions retrieve with how often; the estimator rows differ in the first,
    so the quality table shows it: 1 - (questions with 0 retrievals) / questions."""
    params = load_params(REPO / "params.yaml")
    ablation = params.ablations["seakr-estimator"]
    histograms = [{"0": 3, "1": 1}, {"0": 1, "2": 2, "3": 1}, {"0": 0, "1": 4}, {"0": 4}, {"0": 2, "5": 2},
                  {"0": 1, "1": 3}]
    paths = [_score(tmp_path / "wo.json", "demo-small", "wo-rag", {"0": 4})]
    for k, (variant, histogram) in enumerate(zip(ablation.variants, histograms)):
        paths.append(_score(tmp_path / f"{k}.json", "demo-small", variant.method, histogram))
    frame = ablation_frame(ablation, paths, params)
    assert list(frame["retrieval_rate"]) == [0.25, 0.75, 1.0, 0.0, 0.5, 0.75]
    assert list(frame["N_R"]) == [0.25, 1.75, 1.0, 0.0, 2.5, 0.75]
    text = write_ablation(ablation, frame, tmp_path / "estimator")[0].read_text()
    quality = next(line for line in text.splitlines() if line.startswith("| dataset"))
    headers = [c.strip() for c in quality.split("|")]
    assert headers.index("retrieval rate") > headers.index("F1")
    assert "- **retrieval rate**: share of questions that retrieved at least once" in text
