"""Shared fixtures and fakes: a tiny random Llama with a tiny tokenizer, built in the test session; the
workflow-copy helpers; and hand-built continuations, a scripted LM and a recording retriever for the
method tests.

The model goes through exactly the code SmolLM2 uses (a Hugging Face directory loaded by `HFModel`),
so generation tests need neither a hub nor the 500 MB materialised SmolLM2.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from adaptive_rag.data.datasets import Example
from adaptive_rag.lm.base import NO_EXTRAS, Continuation
from adaptive_rag.lm.capabilities import WHITE_BOX
from adaptive_rag.prompts.fewshot import Exemplar
from adaptive_rag.retrieval import Hit
from adaptive_rag.settings import Section

REPO = Path(__file__).resolve().parents[1]
# The session's own file of remembered CPU-kernel choices (lm.cpu_kernels), inherited by every process the
# tests start: no test reads or writes the user's, and a choice made once holds for the whole session.
os.environ["ADAPTIVE_RAG_KERNEL_CHOICES"] = os.path.join(tempfile.mkdtemp(prefix="kernel-choices-"), "cpu-kernels.json")
SHARED_DATA = REPO.parent / "shared" / "data"
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tiny_bpe(special_tokens: list[str]):
    """A 600-token byte-level BPE trained on the demo passages, special tokens first (ids 0, 1, ...)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    text = (REPO / "data" / "demo" / "psgs_demo.tsv").read_text(encoding="utf-8").splitlines()[:200]
    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=special_tokens,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    bpe.train_from_iterator(text, trainer)
    return bpe


def build_tiny_llama(directory: Path, seed: int = 0) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tiny_bpe(["<|im_end|>", "<|im_start|>"]),
                                        eos_token="<|im_end|>", bos_token="<|im_start|>", pad_token="<|im_end|>")
    tokenizer.chat_template = CHATML
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=8192,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    model = LlamaForCausalLM(config)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def build_wide_llama(tiny_dir: Path, directory: Path) -> Path:
    """The tiny Llama's tokenizer on a model with wide attention and small weights: 2 layers x 16 heads (and 16
    KV heads) x 64 dimensions over a 32-wide stream, 16 KiB a cached position (SmolLM2-135M: 45 KiB), so 128 rows
    of a long prompt's cache, or one long prompt's attention scores, take gigabytes while the weights take a few
    MB."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tiny = json.loads((tiny_dir / "config.json").read_text())
    config = LlamaConfig(vocab_size=tiny["vocab_size"], hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=16, num_key_value_heads=16, head_dim=64, max_position_embeddings=8192,
                         eos_token_id=tiny["eos_token_id"], bos_token_id=tiny["bos_token_id"],
                         pad_token_id=tiny["pad_token_id"])
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(directory)
    for path in tiny_dir.iterdir():
        if path.name.startswith("tokenizer") or path.name.endswith(".jinja") or path.name == "special_tokens_map.json":
            shutil.copy(path, directory / path.name)
    return directory


def build_tiny_self_rag(directory: Path, seed: int = 0) -> Path:
    """The tiny Llama with Self-RAG's reflection tokens added as special tokens and its embeddings resized,
    as the reference's `finetune.py` does to Llama 2 (the weights of the new rows are random)."""
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    from adaptive_rag.methods.self_rag import REFLECTION_TOKENS

    build_tiny_llama(directory, seed)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.add_special_tokens({"additional_special_tokens": [*REFLECTION_TOKENS, "[Continue to Use Evidence]"]})
    torch.manual_seed(seed)
    model = LlamaForCausalLM.from_pretrained(directory)
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def build_tiny_t5(directory: Path, seed: int = 0) -> Path:
    """A randomly initialised T5 (the FLAN-T5 architecture) with the tiny BPE; `</s>` ends the encoder's
    input as a T5 tokenizer writes it, `<pad>` starts the decoder."""
    import torch
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration

    bpe = tiny_bpe(["<pad>", "</s>"])
    bpe.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="</s>", pad_token="<pad>",
                                        model_max_length=512)
    torch.manual_seed(seed)
    config = T5Config(vocab_size=len(tokenizer), d_model=32, d_ff=64, d_kv=16, num_layers=2, num_heads=2,
                      feed_forward_proj="gated-gelu", tie_word_embeddings=False, decoder_start_token_id=0,
                      pad_token_id=0, eos_token_id=1, initializer_factor=5.0)
    model = T5ForConditionalGeneration(config)
    with torch.no_grad():  # the default initialisation repeats one token with probability ~1 from the second
        model.lm_head.weight.mul_(0.03)  # step; a wider one with a damped head gives varied, uncertain tokens
        model.lm_head.weight[0].fill_(0.0)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def tiny_self_rag_dir(tmp_path_factory) -> Path:
    return build_tiny_self_rag(tmp_path_factory.mktemp("tiny-self-rag"))


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_llama_dir, tmp_path_factory) -> Path:
    """The tiny Llama after the workflow's `model` step (with its identity.json)."""
    from adaptive_rag.lm.models import materialise

    out = tmp_path_factory.mktemp("models") / "tiny"
    materialise(str(tiny_llama_dir), out)
    return out


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"reference data not found at {SHARED_DATA} (it lives beside the checkout as ../shared/data)")
    return SHARED_DATA


# Mistakes in params.yaml that once passed validation and broke a later step (argument parsing, a file
# name too long, Snakemake's own rule-name error, a seed overflow, too few exemplars, a probability
# above 1, an overwritten archive member): each is refused with one line naming the key, the same line
# from `check-params` (tests/test_config.py) and from a Snakemake dry run (tests/test_workflow.py).
ONE_VARIANT = {"datasets": ["demo"], "method": "sr-rag", "vary": {"top_k": [1]}}  # an ablation of one variant
REFUSED_PARAMS = [
    pytest.param(lambda d: d["methods"].update({"-dash": {"type": "sr-rag"}}),
                 "methods.-dash: method names may use ASCII letters, digits, '-', '_' and '.' only, and may not "
                 "start with '.' or '-'; got '-dash'", id="dash"),
    pytest.param(lambda d: d["datasets"].update({"x" * 300: d["datasets"]["demo"]}),
                 f"datasets.{'x' * 300}: the dataset name is 300 characters long; shorten it to at most 100, so that "
                 "the file names made from it (logs/benchmarks/generate-<dataset>-<method>.tsv) stay under the "
                 "255-byte limit of file systems", id="long-name"),
    pytest.param(lambda d: d["ablations"].update({"ab-x": ONE_VARIANT, "ab_x": ONE_VARIANT}),
                 "ablations.ab_x: ablation names 'ab-x' and 'ab_x' both make the Snakemake target ablation_ab_x ('-' "
                 "and '.' become '_'); rename one of them", id="rule-clash"),
    pytest.param(lambda d: d.update(seed=2**70),
                 f"seed: expected a seed, an integer from 0 to 9223372036854775807 (2**63 - 1), got {2**70}",
                 id="seed"),
    pytest.param(lambda d: d["datasets"]["demo"].update(num_exemplars=1000),
                 "datasets.demo.num_exemplars: is 1000, but data/demo/exemplars.json holds 8 exemplars; set it to 8 "
                 "or fewer", id="num-exemplars"),
    pytest.param(lambda d: d["methods"]["flare"].update(theta=1.5),
                 "methods.flare.theta: expected a finite number between 0.0 and 1.0, got 1.5", id="theta"),
    pytest.param(lambda d: d["methods"]["flare"].update(mask_theta=7),
                 "methods.flare.mask_theta: expected a finite number between 0.0 and 1.0, got 7", id="mask-theta"),
    pytest.param(lambda d: d.update(downloads={"b": {"url": "file:///x/b.zip",
                                                     "extract": ["train/data.json", "dev/data.json"]}}),
                 "downloads.b.extract: members 'train/data.json' and 'dev/data.json' would both be extracted to "
                 "data/raw/b/data.json (members land under their base name, so the second would overwrite the "
                 "first); extract one of them here and the other under a second `downloads:` entry with the same "
                 "url", id="extract-clash"),
    pytest.param(lambda d: d["datasets"]["demo"].update(path="/dev/zero"),
                 "datasets.demo.path: /dev/zero is not a regular file (a character device); name a regular file",
                 id="device"),
]


def write_params(path: Path, **overrides) -> Path:
    """params.yaml from the repository's own file with some sections replaced."""
    import yaml

    data = yaml.safe_load((REPO / "params.yaml").read_text())
    for key, value in overrides.items():
        data[key] = value
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def own_label_strategies(data: dict) -> dict:
    """params data whose Adaptive-RAG classifier labels with copies of its three strategies
    (`<name>-labels`), so that a test may edit `wo-rag`, `sr-rag` or `ircot` without the check that the
    `adaptive-rag` branches equal the labels' strategies refusing the edit."""
    strategies = data["complexity_classifier"]["strategies"]
    for label, name in strategies.items():
        data["methods"][f"{name}-labels"] = {"type": name, **data["methods"][name]}
        strategies[label] = f"{name}-labels"
    return data


def copy_workflow(dest: Path) -> Path:
    """A runnable copy of the workflow (Snakefile, rules, params, demo data) in a scratch directory."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("Snakefile", "params.yaml", "dvc.yaml"):
        shutil.copy(REPO / name, dest / name)
    shutil.copytree(REPO / "workflow", dest / "workflow")
    shutil.copytree(REPO / "data" / "demo", dest / "data" / "demo")
    return dest


def tiny_params(model_source):
    """An edit of params.yaml (for `edit_params`) that runs the demo on the tiny model: `model_source` as
    `model.source`, 6 new tokens, one thread, no call cache (a rerun recomputes), 4 questions per demo
    dataset, no detectors (their targets and DVC stages have their own test, tests/methods/dior/test_detector_data.py)."""
    def edit(data):
        data.pop("detectors")
        data["model"].update(name="tiny", source=str(model_source))
        data["generation"].update(max_new_tokens=6, threads=1, cache=None)
        data["datasets"]["demo"]["sample"]["size"] = 4
        data["datasets"]["demo-single"]["sample"]["size"] = 4
    return edit


# A cheap ablation on the experiment's own dataset: one sr-rag variant against the experiment's wo-rag run,
# so its DVC stage depends on stages of the main experiment (and its variant's run belongs to no stage).
CHEAP_ABLATION = {"sr-topk": {"datasets": ["demo"], "method": "sr-rag", "vary": {"top_k": [1]}, "baseline": "wo-rag"}}
CLI = [sys.executable, "-m", "adaptive_rag"]
GIT_COMMIT = ["git", "-c", "user.name=test", "-c", "user.email=test@example.org", "commit", "-q"]


def dvc_repository(root, tiny_llama_dir):
    """A scratch copy with the tiny params and the cheap ablation, its dvc.yaml written for them, as a git
    and DVC repository (with src/: the stages depend on the package code)."""
    copy_workflow(root)

    def edit(data):
        tiny_params(tiny_llama_dir)(data)
        data["ablations"] = CHEAP_ABLATION
        data.pop("complexity_classifier")  # its stages have their own test (tests/methods/adaptive_rag/)
    edit_params(root, edit)
    shutil.copytree(REPO / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(REPO / ".gitignore", root / ".gitignore")
    run([*CLI, "dvc-yaml"], root)
    run(["git", "init", "-q"], root)
    run(["dvc", "init", "-q"], root)
    run(["dvc", "config", "core.analytics", "false"], root)
    return root


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ---- running the real workflow in a scratch copy (used by several test modules) ----

BIN = Path(sys.executable).parent


def run(args, cwd, check=True, timeout=900, env=None):
    """`args` in `cwd` with this venv's bin first on PATH, in `env` (default: this process's environment)."""
    env = env or os.environ
    env = {**env, "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}"}
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))} failed ({result.returncode}):\n{result.stdout[-3000:]}\n"
                             f"{result.stderr[-3000:]}")
    return result


def snakemake(cwd, *args, check=True):
    return run([sys.executable, "-m", "snakemake", "--cores", "2", *args], cwd, check)


def planned_jobs(cwd, *targets) -> dict[str, int]:
    """Job counts per rule of a dry run of `targets` (default: the default target), the targets' own rules
    left out ({} when nothing is to be done)."""
    out = snakemake(cwd, "-n", "--quiet", "rules", *(("--", *targets) if targets else ())).stdout
    jobs = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and parts[0] not in ("total", "job", *targets):
            jobs[parts[0]] = int(parts[1])
    return jobs


def edit_params(cwd, edit):
    import yaml

    path = Path(cwd) / "params.yaml"
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def build_html_report(cwd, *targets) -> tuple[dict, float]:
    """`snakemake --report report.html TARGETS` in a workflow copy: what the report holds, and its seconds."""
    import time

    start = time.perf_counter()
    snakemake(cwd, "--report", "report.html", *targets)
    return read_html_report(Path(cwd) / "report.html"), time.perf_counter() - start


# What Snakemake's report (9.x, html_reporter/template/components/abstract_view_manager.js) shows in the
# page itself; a result of any other type is only a download link.
INLINE_TYPES = ("image/svg+xml", "image/png", "image/jpeg", "text/html", "application/pdf")


def read_html_report(path: Path) -> dict:
    """What a self-contained Snakemake HTML report embeds, as its page's scripts hold it: `results` (path ->
    name, caption, data URI, mime type, the job that made it), `categories` (category -> subcategory ->
    paths), the front page (`front`, HTML), `inline` (path -> the decoded text of each HTML result, which
    the report shows in the page) and `configuration` (the front page's Configuration section as text)."""
    import base64
    import re

    html = path.read_text(encoding="utf-8")

    def script(element_id, name):
        match = re.search(rf'<script id="{element_id}">\s*var {name} = (.*?);\s*</script>', html, re.S)
        assert match, f"{path}: no {name} in the report"
        return json.loads(match.group(1))

    results, front = script("results", "results"), script("workflow-desc", "workflow_desc")
    inline = {p: base64.b64decode(r["data_uri"].partition(";base64,")[2]).decode("utf-8")
              for p, r in results.items() if r["mime_type"] == "text/html"}
    section = re.search(r'<div class="section" id="configuration">(.*?)</div>', front, re.S)
    configuration = re.sub(r"<[^>]+>", "", section.group(1)).replace("&quot;", '"') if section else None
    return {"results": results, "categories": script("categories", "categories"), "front": front,
            "inline": inline, "configuration": configuration}


def assert_report_shows_every_output(cwd, report: dict, categories: dict[str, set[str]]) -> None:
    """Every file under reports/ (every table and figure the workflow made) is in the report, byte for
    byte, with a caption, filed under `categories` (category -> its subcategories); every table the
    workflow wrote as markdown is shown in the page (its HTML twin), with the same header cells."""
    import base64

    root = Path(cwd)
    made = {str(p.relative_to(root)) for p in (root / "reports").rglob("*") if p.is_file() and p.name != "report.html"}
    assert set(report["results"]) == made
    for path, result in report["results"].items():
        header, _, data = result["data_uri"].partition(";base64,")
        assert header.startswith("data:") and base64.b64decode(data) == (root / path).read_bytes(), path
        assert "<p>" in result["caption"], f"{path} has no caption"
        if path.endswith(".md"):
            twin = path.removesuffix(".md") + ".html"
            assert report["results"][twin]["mime_type"] in INLINE_TYPES, path
            lines = (root / path).read_text().splitlines()
            headers = [line for line, below in zip(lines, lines[1:]) if below.startswith(("|:", "|-"))]
            assert headers, path
            for cell in (c.strip() for line in headers for c in line.strip("|").split("|")):
                assert f">{cell}</th>" in report["inline"][twin].replace("&amp;", "&"), (twin, cell)
    assert {cat: set(subs) for cat, subs in report["categories"].items()} == categories
    for category in categories:
        assert f"app.showCategory('{category.replace(' ', '%20')}')" in report["front"]  # the front page lists it


# ---- hand-built continuations and fakes for the method tests (tests/methods/) ----
#
# Continuations are built by hand (token texts that join to the text, log-probabilities of round
# probabilities, entropies and attention rows), so every expected number in those tests can be computed
# in a comment. The loop is driven by a scripted fake LM keyed on (prompt has passages, prompt prefix)
# and a fake retriever that records its queries.


def cont(tokens, probs=None, finish="length", **kw) -> Continuation:
    """A continuation whose text is the joined tokens; probabilities default to 0.9 each."""
    probs = [0.9] * len(tokens) if probs is None else probs
    assert len(probs) == len(tokens)
    return Continuation(text="".join(tokens), tokens=list(tokens), logprobs=[math.log(p) for p in probs],
                        finish_reason=finish, **kw)


def attention_rows(prompt_parts, generated_parts) -> list[np.ndarray]:
    """Row j = its prompt columns followed by its j + 1 generated columns."""
    rows = []
    for j, (p, g) in enumerate(zip(prompt_parts, generated_parts)):
        assert len(g) == j + 1
        rows.append(np.array(list(p) + list(g), dtype=np.float32))
    return rows


def settings_of(cls, data: dict, path: str) -> dict:
    """A method class's settings read from `data` as if it were the params.yaml entry at `path`."""
    section = Section(dict(data), path, "params.yaml")
    settings = cls.read_settings(section)
    section.done()
    return settings


# " Paris is one city."  tokens 0 Paris (real, not stop), 1 is (stop, AUX), 2 one (stop, but NUM: real),
# 3 city (real), 4 "." (in no word, so stop).  Two prompt tokens.
PIOC = [" Paris", " is", " one", " city", "."]
PIOC_PROMPT_PART = [[0.6, 0.2], [0.4, 0.2], [0.2, 0.2], [0.2, 0.0], [0.2, 0.2]]
PIOC_GENERATED_PART = [[0.2], [0.3, 0.1], [0.2, 0.2, 0.2], [0.1, 0.1, 0.0, 0.6], [0.1, 0.1, 0.2, 0.1, 0.1]]
PIOC_ENTROPIES = [1.0, 3.0, 3.0, 2.0, 5.0]


def pioc(meta=None, finish="length") -> Continuation:
    """The continuation " Paris is one city.": probabilities [.8, .6, .5, .4, .9], entropies, attention rows."""
    return cont(PIOC, [0.8, 0.6, 0.5, 0.4, 0.9], finish=finish, prompt_tokens=2, entropies=list(PIOC_ENTROPIES),
                attentions=attention_rows(PIOC_PROMPT_PART, PIOC_GENERATED_PART), meta=meta or {})


# A question and one answer sentence whose leave-one-out similarities we choose:
# dropping "Idris" changes the meaning most.
ROPE_QUESTION = "Who founded the rope walk?"
ROPE_SENTENCE = ["Idris", " founded", " the", " rope", " walk", "."]
SIMILARITY_WITHOUT = {"Idris": 0.5, "founded": 0.9, "the": 0.99, "rope": 0.8, "walk": 0.85}


def rope_lookahead(probs):
    """The look-ahead "Idris founded the rope walk." with the given token probabilities."""
    from adaptive_rag.methods.parts.lookahead import LookAhead

    return LookAhead(Continuation(text="".join(ROPE_SENTENCE), tokens=list(ROPE_SENTENCE),
                                  logprobs=[math.log(p) for p in probs], finish_reason="stop"))


class FakeSimilarity:
    """sim(anchor, anchor minus w) = SIMILARITY_WITHOUT[w]; records each call's batch."""

    name = "fake"

    def __init__(self):
        self.calls = []

    def similarities(self, anchor, variants):
        self.calls.append((anchor, list(variants)))
        out = []
        for variant in variants:
            kept = [w.strip(".") for w in variant.split()[len(ROPE_QUESTION.split()):]]
            missing = [w for w in SIMILARITY_WITHOUT if w not in kept]
            assert len(missing) == 1, (variant, missing)
            out.append(SIMILARITY_WITHOUT[missing[0]])
        return out


def has_passages(prompt) -> bool:
    text = prompt.text if prompt.text is not None else "".join(c for _, c in prompt.messages)
    return "Context:" in text


class ScriptedLM:
    """Answers each prompt from `script[(prompt has passages, prompt prefix)]`; records every prompt in
    `calls` and the size of every `generate` call in `batches`. An unscripted prompt fails the test."""

    capabilities = WHITE_BOX

    def __init__(self, script: dict):
        self.script, self.calls, self.batches = script, [], []

    def identity(self):
        return {"backend": "scripted"}

    def generate(self, prompts, max_new_tokens, stop=(), extras=NO_EXTRAS):
        from adaptive_rag.lm.base import row_limits

        self.batches.append(len(prompts))
        out = []
        for p, limit in zip(prompts, row_limits(max_new_tokens, len(prompts))):
            key = (has_passages(p), p.prefix)
            self.calls.append({"passages": key[0], "prefix": p.prefix, "max_new_tokens": limit,
                               "stop": tuple(stop), "extras": extras, "prompt": p})
            if key not in self.script:
                raise AssertionError(f"unscripted call {key!r}")
            out.append(self.script[key])
        return out


class RecordingRetriever:
    """Records (query, k); search number n returns hits d{n}.1 .. d{n}.k titled T{n}, "passage {n}.{i}"."""

    def __init__(self):
        self.queries = []

    def search(self, query, k):
        self.queries.append((query, k))
        n = len(self.queries)
        return [Hit(f"d{n}.{i}", f"T{n}", f"passage {n}.{i}", 1.0 / i) for i in range(1, k + 1)]

    def identity(self):
        return {"retriever": "recording"}


SCRIPTED_EXEMPLARS = [Exemplar("Who wrote Hamlet?", "Hamlet was written by Shakespeare.", "Shakespeare")]
SCRIPTED_QUESTION = "Where was Inchcombe born?"

# Continuations the loop tests script (raw prompts, so each generated text starts with a space).
BORN = " Inchcombe was born in Paris."
REGEN = cont([" He", " died", " in", " 1750", ".", " So", " the", " answer", " is", " Paris", "."], finish="stop")
ANSWER = cont([" So", " the", " answer", " is", " Paris", "."], finish="stop")


def method_with(cls, params, lm, retriever=None, max_new_tokens=50):
    """A method of class `cls`, its settings read from `params` as params.yaml's entry would be (unknown
    keys fail), over the given model and retriever: raw prompts, one exemplar, 5 fallback tokens."""
    from adaptive_rag.methods.base import Context

    ctx = Context(lm=lm, exemplars=SCRIPTED_EXEMPLARS, prompt_format="raw", max_new_tokens=max_new_tokens,
                  retriever=retriever, answer_fallback_tokens=5)
    return cls(settings_of(cls, params, f"methods.{getattr(cls, 'type_name', 'x')}"), ctx)


def run_batch(cls, params, script, questions, max_new_tokens=50):
    """Questions through a method class as one batch (see `method_with`), with a `ScriptedLM` of `script`
    and a `RecordingRetriever`; returns (answers, lm, retriever)."""
    lm, retriever = ScriptedLM(script), RecordingRetriever()
    method = method_with(cls, params, lm, retriever, max_new_tokens)
    answers = method.answer_batch([Example(f"q{i}", q, ["Paris"], "span") for i, q in enumerate(questions, 1)])
    return answers, lm, retriever


def run_method(cls, params, script, max_new_tokens=50, question=SCRIPTED_QUESTION):
    """One question through a method class (see `run_batch`); returns (answer, lm, retriever)."""
    [answer], lm, retriever = run_batch(cls, params, script, [question], max_new_tokens)
    return answer, lm, retriever


def tiny_detectors(tmp_path, model: str, width: int):
    """An early and a real-time detector trained in seconds on random data for `model` (their files), their
    feature sources recorded as the `dior` method computes them."""
    from adaptive_rag.methods.dior.detectors import (EarlyArchitecture, RealtimeArchitecture, Training,
                                                      train_early, train_realtime)
    from adaptive_rag.methods.dior.dior import detector_source

    rng = np.random.default_rng(0)
    sequences = [(lambda v: v / v.sum())(rng.random(int(n))) for n in rng.integers(3, 9, size=20)]
    early = train_early(sequences, [i % 2 for i in range(20)], model=model, source=detector_source("early"),
                        architecture=EarlyArchitecture(hidden=8, layers=1), training=Training(epochs=2, lr=1e-3))
    features = rng.normal(size=(40, width)).astype(np.float32)
    realtime = train_realtime(features, [(i // 4) % 2 for i in range(40)], [i // 4 for i in range(40)], model=model,
                              source=detector_source("realtime"), architecture=RealtimeArchitecture(sizes=(8,)), training=Training(epochs=2, lr=1e-3))
    return {"early_detector": early.save(tmp_path / "early.safetensors"),
            "realtime_detector": realtime.save(tmp_path / "realtime.safetensors")}
