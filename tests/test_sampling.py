"""Deterministic samples: seeded, nested, and `skip` for splits disjoint from a smaller one; the split
command's errors when too few questions are left."""

import json

import pytest
import yaml

from adaptive_rag.data.sampling import sample
from conftest import REPO


def test_random_samples_are_seeded_and_nested():
    items = list(range(1000))
    s300, s500 = sample(items, 300, seed=7), sample(items, 500, seed=7)
    assert s500[:300] == s300
    assert sample(items, 300, seed=7) == s300
    assert sample(items, 300, seed=8) != s300
    assert len(set(s500)) == 500


def test_first_mode_keeps_file_order_and_none_takes_all():
    items = list("abcdef")
    assert sample(items, 3, seed=1, mode="first") == ["a", "b", "c"]
    assert sorted(sample(items, None, seed=1)) == items


def test_skip_takes_the_next_items_of_the_same_order():
    """A calibration split (`skip: 16, size: 8`) shares no question with the evaluation split (`size: 16`)."""
    items = list(range(100))
    whole = sample(items, None, seed=7)
    calibration, evaluation = sample(items, 8, seed=7, skip=16), sample(items, 16, seed=7)
    assert calibration == whole[16:24]
    assert not set(calibration) & set(evaluation)
    assert sample(items, 8, seed=7, mode="first", skip=16) == items[16:24]
    assert sample(items, None, seed=7, skip=90) == whole[90:]


def test_disjoint_from_leaves_out_another_seeds_sample_before_drawing():
    """A second split drawn with seed 1 shares no question with the seed-0 20-sample it names."""
    items = list(range(100))
    first = sample(items, 20, seed=0)
    second = sample(items, 20, seed=1, disjoint_from=(0, 20))
    assert not set(first) & set(second) and len(set(second)) == 20
    # the seed-1 order with the first sample's questions taken out: the same relative order
    assert second == [i for i in sample(items, None, seed=1) if i not in set(first)][:20]
    assert set(sample(items, 20, seed=1)) & set(first)  # without it the two seeds' samples overlap here


def test_disjoint_from_is_read_from_params_and_left_out_of_keys_while_unset():
    from adaptive_rag.config import dataset_settings, load_params, parse_params

    data = yaml.safe_load((REPO / "params.yaml").read_text())
    assert "disjoint_from" not in dataset_settings(load_params(REPO / "params.yaml").dataset("demo"))["sample"]
    data["datasets"]["demo"]["sample"] = {"mode": "random", "size": 8, "seed": 1,
                                          "disjoint_from": {"seed": 0, "size": 16}}
    params = parse_params(data)
    assert params.dataset("demo").sample.disjoint_from == (0, 16)
    assert dataset_settings(params.dataset("demo"))["sample"]["disjoint_from"] == (0, 16)
    data["datasets"]["demo"]["sample"]["mode"] = "first"
    with pytest.raises(Exception, match="disjoint_from: leaves out a random sample's questions"):
        parse_params(data)


def test_skip_beyond_the_items_gives_nothing():
    assert sample(list(range(10)), None, seed=7, skip=10) == []
    assert sample(list(range(10)), 5, seed=7, skip=12) == []


def split(tmp_path, monkeypatch, capsys, **sample_settings):
    """The split command over the demo dataset (48 questions) with these sample settings: (exit code, stderr)."""
    from adaptive_rag import cli

    data = yaml.safe_load((REPO / "params.yaml").read_text())
    data["datasets"]["demo"]["sample"] = {"mode": "random", "seed": 0, **sample_settings}
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(data, sort_keys=False))
    monkeypatch.chdir(REPO)  # the dataset path is relative to the repository
    code = cli.main(["--params", str(params), "split", "--dataset", "demo", "--out", str(tmp_path / "s.jsonl")])
    return code, capsys.readouterr().err


def test_split_that_skips_every_question_is_an_error(tmp_path, monkeypatch, capsys):
    assert split(tmp_path, monkeypatch, capsys, skip=48, size=None) == (2, (
        "error: datasets.demo.sample.skip is 48 but data/demo/hotpot_demo.json has only 48 questions: "
        "the split would be empty\n"))
    assert split(tmp_path, monkeypatch, capsys, skip=40, size=16) == (2, (
        "error: datasets.demo.sample.size is 16 but data/demo/hotpot_demo.json has only 48 questions, "
        "8 after sample.skip 40\n"))
    assert not (tmp_path / "s.jsonl").exists()


@pytest.mark.parametrize("skip, size, questions", [(40, 8, 8), (40, None, 8), (0, None, 48)])
def test_split_takes_what_is_left_after_skip(tmp_path, monkeypatch, capsys, skip, size, questions):
    assert split(tmp_path, monkeypatch, capsys, skip=skip, size=size) == (0, "")
    meta = json.loads((tmp_path / "s.meta.json").read_text())
    assert (meta["questions"], meta["sample"]) == (questions, {"mode": "random", "size": size, "seed": 0, "skip": skip})
