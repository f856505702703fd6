"""params.yaml validation: every mistake names the key and what was expected."""

import copy

import pytest
import yaml

from adaptive_rag.config import load_params, parse_params
from adaptive_rag.errors import ConfigError
from conftest import ONE_VARIANT, REFUSED_PARAMS, REPO


@pytest.fixture
def base():
    return yaml.safe_load((REPO / "params.yaml").read_text())


def test_repository_params_are_valid(base):
    params = parse_params(base)
    assert params.experiment_methods == ["wo-rag", "sr-rag", "fl-rag", "fs-rag", "flare", "dragin"]
    assert params.methods["sr-rag"].settings == {"top_k": 3, "retriever": None}
    assert params.generation.decoding == "greedy"


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["model"].pop("source"), "model.source: missing required key"),
        (lambda d: d["model"].update(dtype="fp8"), "model.dtype: must be one of float32, bfloat16, float16"),
        (lambda d: d["model"].update(device="tpu"), "model.device: must be cpu, cuda or cuda:N"),
        (lambda d: d["model"].update(prompt_fromat="raw"), "model.prompt_fromat: unknown key"),
        (lambda d: d["methods"]["sr-rag"].update(top_k="three"), "methods.sr-rag.top_k: expected an integer >= 1"),
        (lambda d: d["methods"]["sr-rag"].update(top_k=0), "methods.sr-rag.top_k: expected an integer >= 1"),
        (lambda d: d["methods"]["sr-rag"].update(topk=3), "methods.sr-rag.topk: unknown key"),
        (lambda d: d["methods"].update({"my-flare": {"type": "flair"}}), "unknown method type 'flair'"),
        (lambda d: d["experiment"].update(methods=["wo-rag", "self-rag"]), "experiment.methods: names 'self-rag'"),
        (lambda d: d["experiment"].update(datasets=["nq"]), "experiment.datasets: names 'nq'"),
        (lambda d: d["generation"].update(decoding="sample"), "generation.decoding: must be one of greedy"),
        (lambda d: d["generation"].update(max_new_tokens=-5), "generation.max_new_tokens: expected an integer >= 1"),
        (lambda d: d["retrieval"]["bm25"].update(b=1.5), "retrieval.bm25.b: must be between 0 and 1"),
        (lambda d: d["datasets"]["demo"]["sample"].update(mode="shuffle"), "datasets.demo.sample.mode: must be one of"),
        (lambda d: d["datasets"]["demo"]["sample"].update(skip=-1), "datasets.demo.sample.skip: expected an integer >= 0"),
        (lambda d: d["datasets"]["demo"]["sample"].update(skip="16"), "datasets.demo.sample.skip: expected an integer >= 0"),
        (lambda d: d["datasets"]["demo"]["sample"].update(skip=None), "datasets.demo.sample.skip: expected an integer >= 0"),
        (lambda d: d["datasets"]["demo"].update(format="csv"), "datasets.demo.format: must be one of hotpotqa"),
        (lambda d: d.pop("corpus"), "corpus: missing required key"),
        (lambda d: d.update(sede=1), "sede: unknown key"),
        (lambda d: d["methods"].update({"sr rag/2": {"type": "sr-rag"}}), "methods.sr rag/2: method names may use"),
        (lambda d: d["datasets"].update({"../x": d["datasets"]["demo"]}), "datasets.../x: dataset names may use"),
        # names become paths and words of Snakemake's shell commands
        (lambda d: d["corpus"].update(name="c;touch${IFS}PWNED;#"), "corpus.name: corpus names may use ASCII"),
        (lambda d: d["corpus"].update(name=".."), "corpus.name: corpus names may use"),
        (lambda d: d["model"].update(name="m$(touch PWNED)"), "model.name: model names may use"),
        (lambda d: d["model"].update(name="modèle"), "model.name: model names may use ASCII"),
        (lambda d: d.update(downloads={"a b": {"url": "file:///x"}}), "downloads.a b: download names may use"),
        # YAML's .nan and .inf are floats, and no threshold means anything at either
        (lambda d: d["methods"]["flare"].update(theta=float("nan")), "methods.flare.theta: expected a finite number"),
        (lambda d: d["methods"]["scaar"].update(theta=float("inf")), "methods.scaar.theta: expected a finite number"),
        (lambda d: d["retrieval"]["bm25"].update(k1=float("-inf")), "retrieval.bm25.k1: expected a finite number"),
        # the report's uncertainty settings (docs/statistics.md)
        (lambda d: d["report"].update(resampels=100), "report.resampels: unknown key"),
        (lambda d: d["report"].update(confidence=95), "report.confidence: expected a level between 0.5 and 1"),
        (lambda d: d["report"].update(confidence="high"), "report.confidence: expected a finite number"),
        (lambda d: d["report"].update(resamples=10), "report.resamples: expected an integer >= 100"),
        (lambda d: d["report"].update(seed=1.5), "report.seed: expected a seed, an integer"),
        (lambda d: d["experiment"].update(baseline="seakr"), "experiment.baseline: names 'seakr', which is not among"),
        # names that start like an option, too long for a file name, or two Snakemake targets in one (more in
        # conftest.REFUSED_PARAMS, checked through check-params below)
        (lambda d: d["datasets"].update({"-dash": d["datasets"]["demo"]}), "datasets.-dash: dataset names may use"),
        (lambda d: d["methods"].update({"m" * 101: None}), "the method name is 101 characters long; shorten it to at most 100"),
        (lambda d: d["ablations"].update({"ab.x": ONE_VARIANT, "ab_x": ONE_VARIANT}), "names 'ab.x' and 'ab_x' both make"),
        (lambda d: d["ablations"].update({"a" * 100: {**ONE_VARIANT, "vary": {"top_k": [10**20]}}}),
         f"ablations.{'a' * 100}.vary: the variant name '{'a' * 100}--{10**20}' is 123 characters long; shorten the "
         f"ablation's name or the varied values to at most 120"),
        (lambda d: d.update(downloads={"a-b": {"url": "file:///x"}, "a.b": {"url": "file:///y"}}),
         "downloads.a.b: download names 'a-b' and 'a.b' both make the Snakemake target download_a_b"),
        # an archive's members land under their base names: none may overwrite the archive, or name no file
        (lambda d: d.update(downloads={"b": {"url": "file:///x/b.zip", "extract": ["inner/b.zip"]}}),
         "downloads.b.extract: member 'inner/b.zip' would be extracted over the downloaded file data/raw/b/b.zip "
         "itself (members land under their base name): if it is an archive, give the download another `filename:`; "
         "if not, leave `extract` out to keep it as downloaded"),
        (lambda d: d.update(downloads={"b": {"url": "file:///x/b.zip", "extract": ["dir/.."]}}),
         "downloads.b.extract: member 'dir/..' names no file (its base name is '..')"),
        # seeds: torch, numpy and an API server all take 0 <= seed <= 2**63 - 1
        (lambda d: d.update(seed=-1), "seed: expected a seed, an integer from 0 to 9223372036854775807"),
        (lambda d: d["datasets"]["demo"]["sample"].update(seed=2**64), "datasets.demo.sample.seed: expected a seed"),
        (lambda d: d["report"].update(seed=-3), "report.seed: expected a seed"),
        (lambda d: d["detectors"]["early"].update(seed=2**63), "detectors.early.seed: expected a seed"),
        (lambda d: d["methods"]["seakr"].update(seed=2**63), "methods.seakr.seed: expected a seed"),
        (lambda d: d["methods"]["sugar"].update(seed=True),  # named at its first per-dataset preset
         "seed: expected a seed, an integer from 0 to 9223372036854775807 (2**63 - 1), got True"),
        # FLARE's thresholds are probabilities (paper: p; dragin-code: the mean of 1 - p)
        (lambda d: d["methods"]["flare-code"].update(theta=1.01), "methods.flare-code.theta: expected a finite number "
                                                                  "between 0.0 and 1.0, got 1.01"),
        (lambda d: d["methods"]["flare"].update(theta=-0.1), "methods.flare.theta: expected a finite number between"),
    ],
)
def test_invalid_params_name_the_key(base, mutate, message):
    data = copy.deepcopy(base)
    mutate(data)
    with pytest.raises(ConfigError) as err:
        parse_params(data, "params.yaml")
    assert message in str(err.value)
    assert str(err.value).startswith("params.yaml: ")


def test_the_bounds_themselves_are_accepted(base):
    base["seed"] = 2**63 - 1
    base["datasets"]["demo"]["sample"]["seed"] = 0
    base["methods"]["flare"].update(theta=1.0, mask_theta=0.0)
    base["methods"]["flare-code"]["theta"] = 1
    base["methods"]["m" * 100] = {"type": "sr-rag"}
    params = parse_params(base)
    assert params.seed == 2**63 - 1 and params.methods["flare"].settings["theta"] == 1.0
    assert params.methods["flare-code"].settings["theta"] == 1.0 and "m" * 100 in params.methods


def test_report_settings_and_the_experiment_baseline_have_defaults(base):
    params = parse_params(base)
    assert (params.report.confidence, params.report.resamples, params.report.seed) == (0.95, 10_000, 0)
    assert params.experiment_baseline == "wo-rag"
    del base["report"], base["experiment"]["baseline"]
    params = parse_params(base)
    assert params.report == type(params.report)() and params.experiment_baseline == "wo-rag"  # the wo-rag type
    base["experiment"]["methods"] = ["sr-rag", "flare"]
    assert parse_params(base).experiment_baseline is None  # no wo-rag run: nothing to compare with
    base["experiment"]["baseline"] = "sr-rag"
    assert parse_params(base).experiment_baseline == "sr-rag"
    base["experiment"]["baseline"] = None
    assert parse_params(base).experiment_baseline is None


def test_method_entry_may_be_empty_and_type_defaults_to_name(base):
    base["methods"]["wo-rag"] = None
    base["methods"]["sr-rag-k5"] = {"type": "sr-rag", "top_k": 5}
    params = parse_params(base)
    assert params.methods["wo-rag"].type == "wo-rag"
    assert params.methods["sr-rag-k5"].settings == {"top_k": 5, "retriever": None}


def test_unreadable_files(tmp_path):
    with pytest.raises(ConfigError, match="params file not found"):
        load_params(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  name: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: line \d+: invalid YAML"):
        load_params(bad)


def test_duplicate_yaml_keys_are_an_error_naming_both_lines(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text((REPO / "params.yaml").read_text().replace("  dtype: float32", "  dtype: float32\n  dtype: float16", 1))
    with pytest.raises(ConfigError, match=r"params.yaml: line (\d+): invalid YAML \(duplicate key 'dtype' \(first on line"):
        load_params(path)


@pytest.mark.parametrize("key, edit", [
    ("datasets.demo.path", lambda d: d["datasets"]["demo"].update(path="data/demo/nope.json")),
    ("datasets.demo.exemplars", lambda d: d["datasets"]["demo"].update(exemplars="data/demo/nope.json")),
    ("corpus.passages", lambda d: d["corpus"].update(passages="data/demo/nope.tsv")),
])
def test_missing_input_files_fail_check_params_naming_key_and_file(base, key, edit, monkeypatch):
    monkeypatch.chdir(REPO)
    data = copy.deepcopy(base)
    edit(data)
    params = parse_params(data, "params.yaml")
    with pytest.raises(ConfigError, match=rf"^params.yaml: {key}: file not found: data/demo/nope\.(json|tsv); "
                                          "no `downloads:` entry produces it"):
        params.check_inputs()


def test_files_a_download_produces_need_not_exist_yet(base, monkeypatch, tmp_path):
    """The paper profiles name files under data/raw/ that only their download step creates."""
    monkeypatch.chdir(tmp_path)  # nothing exists here
    base["downloads"] = {"bundle": {"url": "file:///x/bundle.zip", "extract": ["bundle/dev.json"]},
                         "psgs": {"url": "file:///x/psgs.tsv"}}
    base["datasets"] = {"demo": {**base["datasets"]["demo"], "path": "data/raw/bundle/dev.json",
                                 "exemplars": "builtin:hotpotqa"}}
    base["datasets"]["demo"]["sample"] = {"mode": "random", "size": None, "seed": 0}
    base["corpus"]["passages"] = "data/raw/psgs/psgs.tsv"
    base["ablations"] = {}
    base.pop("detectors")  # its training set is a dataset this test removed
    base.pop("complexity_classifier")  # so are its labelled datasets
    for method in base["methods"].values():  # presets name datasets this test removed
        if isinstance(method, dict):
            method.pop("per_dataset", None)
    base["experiment"]["datasets"] = ["demo"]
    parse_params(base).check_inputs()


def test_check_params_exits_2_with_one_error_line(tmp_path, monkeypatch, capsys):
    from adaptive_rag import cli

    params = tmp_path / "params.yaml"
    params.write_text((REPO / "params.yaml").read_text().replace("data/demo/psgs_demo.tsv", "data/demo/gone.tsv"))
    monkeypatch.chdir(REPO)
    assert cli.main(["--params", str(params), "check-params"]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: {params}: corpus.passages: file not found: data/demo/gone.tsv; no `downloads:` entry "
                   f"produces it (and 2 more: detectors.realtime.passages, detectors.radio.passages)\n")


@pytest.mark.parametrize("exemplars, count, message", [
    ("data/demo/exemplars.json", 1000, "datasets.demo.num_exemplars: is 1000, but data/demo/exemplars.json holds 8 "
                                       "exemplars; set it to 8 or fewer"),
    ("builtin:hotpotqa", 9, "datasets.demo.num_exemplars: is 9, but builtin:hotpotqa holds 8 exemplars; set it to 8 "
                            "or fewer"),
])
def test_num_exemplars_is_checked_against_the_set_before_any_work(base, monkeypatch, exemplars, count, message):
    monkeypatch.chdir(REPO)
    base["datasets"]["demo"].update(exemplars=exemplars, num_exemplars=count)
    with pytest.raises(ConfigError) as err:
        parse_params(base, "params.yaml").check_inputs()
    assert str(err.value) == f"params.yaml: {message}"
    base["datasets"]["demo"]["num_exemplars"] = 8  # all of them: fine
    parse_params(base, "params.yaml").check_inputs()


def test_a_malformed_exemplar_file_is_named_at_check_params(base, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    bad = tmp_path / "exemplars.json"
    bad.write_text('[{"question": "q?", "reasoning": "r.", "answer": ""}]')
    base["datasets"]["demo"]["exemplars"] = str(bad)
    with pytest.raises(ConfigError, match=rf"^params.yaml: datasets.demo.exemplars: {bad}: record 0, field 'answer': "
                                          "missing or not a non-empty string$"):
        parse_params(base, "params.yaml").check_inputs()


def special_file(kind: str, tmp_path) -> str:
    import os

    if kind == "fifo":
        os.mkfifo(tmp_path / "fifo")
        return str(tmp_path / "fifo")
    if kind == "directory":
        return str(tmp_path)
    return "/dev/zero"


@pytest.mark.parametrize("kind, what", [("fifo", "not a regular file (a named pipe (FIFO))"),
                                        ("device", "not a regular file (a character device)"),
                                        ("directory", "a directory, not a file")])
def test_an_input_that_is_no_regular_file_is_named_for_what_it_is(base, tmp_path, monkeypatch, kind, what):
    """A FIFO would block the step reading it and /dev/zero feed it without end: refused for what they are."""
    monkeypatch.chdir(REPO)
    path = special_file(kind, tmp_path)
    base["datasets"]["demo-early"]["path"] = path
    with pytest.raises(ConfigError) as err:
        parse_params(base, "params.yaml").check_inputs()
    assert str(err.value) == f"params.yaml: datasets.demo-early.path: {path} is {what}; name a regular file"


@pytest.mark.parametrize("edit, line", REFUSED_PARAMS)
def test_check_params_refuses_bad_names_and_values_in_one_line(base, tmp_path, monkeypatch, capsys, edit, line):
    from adaptive_rag import cli

    edit(base)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(base, sort_keys=False))
    monkeypatch.chdir(REPO)
    assert cli.main(["--params", str(params), "check-params"]) == 2
    assert capsys.readouterr().err == f"error: {params}: {line}\n"


def test_a_params_file_that_is_a_pipe_is_refused_for_what_it_is(tmp_path, monkeypatch, capsys):
    """Not read once: Snakemake and every step read the params file again, and a second reader of a pipe
    would wait on it."""
    import os

    from adaptive_rag import cli

    os.mkfifo(tmp_path / "params.yaml")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["--params", "params.yaml", "check-params"]) == 2
    assert capsys.readouterr().err == "error: params file params.yaml: not a regular file (a named pipe (FIFO))\n"
    (tmp_path / "params.yaml").unlink()
    (tmp_path / "params.yaml").write_bytes(b"seed: 1 # caf\xe9\n")
    with pytest.raises(ConfigError, match=r"^params.yaml: line 1: not UTF-8 text \(invalid continuation byte\)$"):
        load_params("params.yaml")


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["methods"]["adaptive-retrieval"].pop("popularity_proxy"),  # page views: the user's file
     r"methods.adaptive-retrieval.popularity: file not found: data/popularity/demo-single-small.json \(read on demo-single-small\); "
     r"no rule of the workflow makes it: provide a JSON object mapping each question id to its entity's monthly "
     r"Wikipedia page views"),
    (lambda d: d["methods"]["radio"].update(detector="data/detectors/mine.safetensors"),
     r"methods.radio.detector: file not found: data/detectors/mine.safetensors \(read on demo-single-small\); no rule of the "
     r"workflow makes it; the workflow trains data/detectors/radio.safetensors \(when detectors.radio is "
     r"configured\): name that, or a file that exists"),
    (lambda d: d["detectors"].pop("radio"),
     r"methods.radio.detector: file not found: data/detectors/radio.safetensors \(read on demo-single-small\); no rule of the "
     r"workflow makes it while detectors.radio is not configured \(configuring it adds the rule that trains it\)"),
    (lambda d: d["methods"]["adaptive-rag"].update(classifier="classifier.safetensors"),
     r"methods.adaptive-rag.classifier: file not found: classifier.safetensors \(read on demo-single-small\); no rule of "
     r"the workflow makes it; the workflow trains data/complexity/classifier.safetensors \(when "
     r"complexity_classifier is configured\): name that, or a file that exists"),
])
def test_a_file_a_method_reads_that_no_rule_makes_fails_check_params(base, monkeypatch, edit, message):
    """Before, check-params said ok and Snakemake stopped at start-up with MissingInputException. The
    detectors and the classifier the workflow trains (detectors:, complexity_classifier:) are not built
    here, and are accepted at the paths their rules write."""
    monkeypatch.chdir(REPO)
    parse_params(copy.deepcopy(base), "params.yaml").check_runs()
    edit(base)
    parse_params(copy.deepcopy(base), "params.yaml").check_inputs()  # Snakemake's start-up: a build of other
    with pytest.raises(ConfigError, match=rf"^params.yaml: {message}$"):  # targets is not refused for them
        parse_params(base, "params.yaml").check_runs()
