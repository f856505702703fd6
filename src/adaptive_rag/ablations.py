"""Named ablation experiments: a base method configuration, settings to vary (their cartesian
product), the datasets to run them on, and how to report them.

Each combination becomes an ordinary method configuration named `<ablation>--<value>-<value>...`, so
Snakemake's generate/score rules run it like any other method and the call cache serves every call
the variants share (the first look-ahead of every question, whatever the threshold). An ablation
reports one long table (one row per dataset x variant, with its varied settings as columns) in
markdown, LaTeX and CSV, and a figure chosen by `plot`.

    ablations:
      scaar-grid:
        datasets: [demo-small]
        method: scaar                      # base: a configuration under `methods:`
        vary: {weighting: [origin, attn, scw], query: [curr-sent, real-words, pfq], theta: [0.9, 0.8, 0.7]}
        plot: grid                         # grid | lines | table
        x: theta                           # lines: the varied key on the x axis (hue: the others)

`vary` may include `method` (a list of base configurations) to compare methods under the same sweep.

`paper` (optional) names the paper whose table or figure the ablation reproduces (`SCAAR`, `SeaKR`,
...): the HTML report (`snakemake --report`) groups the ablation's files under it. It is a label, not a
setting, so no rule reads it and changing it reruns nothing.

`time_baseline` adds `time_rel` (SUGAR's Time: mean wall time per question relative to a single-step
run on the same questions). It defaults to `sr-rag` when one variant runs that configuration (the
variant is then the baseline, so its own `time_rel` is 1); `time_baseline: null` turns it off.

Every variant's EM, F1 and acc are also compared with one run by a paired test (`compare_to`): the
`baseline:` when declared, else the one variant made from a wo-rag configuration, else none.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any

from .errors import ConfigError
from .settings import VARIANT_NAME_MAX, check_length, check_name, check_rule_names

PLOTS = ("grid", "lines", "table", "significance", "uncertainty-sweep", "sugar-entropy")
SPECIAL = ("significance", "uncertainty-sweep", "sugar-entropy")  # kinds with their own rule, not variants
SEPARATOR = "--"
RULE_PREFIX = "ablation_"  # `snakemake ablation_<name>` (settings.rule_name), also the DVC stage's name
TIME_BASELINE = "sr-rag"  # SUGAR's Time is relative to single-step retrieval
BASELINE_TYPE = "wo-rag"  # what a table compares with when none is named: the run without retrieval


@dataclass(frozen=True)
class Variant:
    method: str  # the generated method configuration's name
    base: str  # the base configuration it derives from
    values: dict[str, Any]  # the varied settings (including `method` when varied)


@dataclass(frozen=True)
class Ablation:
    name: str
    datasets: list[str]
    variants: list[Variant]
    vary: dict[str, list]
    plot: str
    x: str | None
    baseline: str | None  # a method configuration scored on the same datasets, for S_eff
    question: str | None = None  # `significance`: the question whose first look-ahead sentence is shown
    similarity: str | None = None  # `significance`: SCW's encoder
    k_max: int | None = None  # `uncertainty-sweep`: samples per question (SeaKR Figure 3)
    base: str | None = None  # `uncertainty-sweep`: the configuration swept; `sugar-entropy`: whose runs are drawn;
    #                          `significance`: whose encoder and model are used
    time_baseline: str | None = None  # the run `time_rel` divides by (a variant's, or a configuration's own)
    compare_to: str | None = None  # the run every variant is tested against (paired test, intervals)
    paper: str | None = None  # the paper it reproduces: the HTML report's category for its files

    @property
    def runs(self) -> list[str]:
        """The method configurations whose runs (on every dataset of the ablation) it reads."""
        drawn = [self.base] if self.plot == "sugar-entropy" else []
        extra = [n for n in (self.baseline, self.time_baseline) if n and n not in drawn]
        return list(dict.fromkeys([v.method for v in self.variants] + drawn + extra))


def _slug(value: Any) -> str:
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return "".join(c if c.isalnum() or c in "._" else "-" for c in text)


def parse_ablations(section, methods_section_data: dict, datasets: dict, validate) -> tuple[dict, dict]:
    """(ablations by name, generated method configurations by name) from the `ablations:` section.

    `validate(name, type, data, path, per_dataset)` turns raw settings into a MethodConfig (the normal path)."""
    ablations, generated = {}, {}
    for name in section.data:
        check_name(section, name, "ablation")
    check_rule_names(section, section.data, RULE_PREFIX, "ablation")
    for name in section.data:
        s = section.section(name)
        names = s.str_list("datasets")
        for dataset in names:
            if dataset not in datasets:
                raise s.fail("datasets", f"names {dataset!r}, which is not under datasets: ({', '.join(datasets)})")
        paper = s.raw("paper", None)
        if paper is not None and (not isinstance(paper, str) or not paper.strip()):
            raise s.fail("paper", f"expected the name of a paper (a non-empty string), got {paper!r}")
        special = {"significance": _significance, "uncertainty-sweep": _uncertainty_sweep,
                   "sugar-entropy": _sugar_entropy}.get(s.data.get("plot"))
        if special is not None:
            ablations[name] = replace(special(name, s, names, methods_section_data, validate), paper=paper)
            continue
        vary = s.section("vary")
        axes: dict[str, list] = {}
        for key, values in vary.data.items():
            if not isinstance(values, list) or not values:
                raise vary.fail(key, f"expected a non-empty list of values, got {values!r}")
            if len({repr(v) for v in values}) != len(values):
                raise vary.fail(key, f"lists a value twice: {values}")
            axes[key] = values
            vary.used.add(key)
        if not axes:
            raise s.fail("vary", "vary at least one setting")
        bases = axes.get("method") or [s.str("method")]
        if "method" in axes:
            s.used.add("method")
        for base in bases:
            if base not in methods_section_data:
                raise s.fail("method", f"names {base!r}, which is not under methods: "
                                       f"({', '.join(methods_section_data)})")
        plot = s.str("plot", "table", PLOTS)
        x = s.raw("x", None)
        if x is not None and x not in axes:
            raise s.fail("x", f"must be one of the varied keys ({', '.join(axes)}); got {x!r}")
        if plot == "lines" and x is None:
            raise s.fail("x", "a `lines` plot needs the varied key for its x axis")
        if plot == "grid" and not {"weighting", "query"} <= set(axes):
            raise s.fail("plot", "a `grid` plot crosses `weighting` and `query`: vary both")
        baseline = s.raw("baseline", None)
        if baseline is not None and baseline not in methods_section_data:
            raise s.fail("baseline", f"names {baseline!r}, which is not under methods:")
        variants = []
        keys = list(axes)
        for combination in itertools.product(*(axes[k] for k in keys)):
            values = dict(zip(keys, combination))
            base = values.get("method", bases[0])
            method_name = name + SEPARATOR + "-".join(_slug(values[k]) for k in keys)
            check_length(s, "vary", f"the variant name {method_name!r}", method_name, VARIANT_NAME_MAX,
                         "shorten the ablation's name or the varied values")
            raw = methods_section_data[base] or {}
            varied = {k: v for k, v in values.items() if k != "method"}
            data = {k: v for k, v in raw.items() if k != "per_dataset"} | varied
            method_type = data.pop("type", base)
            # the base's per-dataset presets still apply to its variants; the varied values win over them
            presets = {d: {**(p or {}), **varied} for d, p in (raw.get("per_dataset") or {}).items()}
            path = f"ablations.{name}.vary ({', '.join(f'{k}={v}' for k, v in values.items())})"
            generated[method_name] = validate(method_name, method_type, data, path, presets)
            variants.append(Variant(method_name, base, values))
        time_baseline = _time_baseline(s, variants, methods_section_data)
        s.done()
        ablations[name] = Ablation(name, names, variants, axes, plot, x, baseline, time_baseline=time_baseline,
                                   compare_to=_compare_to(baseline, variants, methods_section_data), paper=paper)
    return ablations, generated


def _time_baseline(s, variants: list[Variant], methods_section_data: dict) -> str | None:
    """The run `time_rel` divides by: the one variant made from the baseline configuration (so both sit in
    the same table, and the baseline's own row reads 1), else that configuration's own run."""
    explicit = "time_baseline" in s.data
    name = s.raw("time_baseline", TIME_BASELINE)
    if explicit and name is not None and (not isinstance(name, str) or name not in methods_section_data):
        raise s.fail("time_baseline", f"names {name!r}, which is not under methods:")
    made = [v.method for v in variants if v.base == name]
    if len(made) == 1:
        return made[0]
    return name if explicit else None


def _compare_to(baseline: str | None, variants: list[Variant], methods_section_data: dict) -> str | None:
    """The run the tables' paired test compares each variant with: the declared `baseline:` (that
    configuration's own run), else the one variant made from a wo-rag configuration (SeaKR's and SUGAR's
    tables list the no-retrieval run among their rows), else none."""
    if baseline is not None:
        return baseline
    made = [v.method for v in variants if (methods_section_data[v.base] or {}).get("type", v.base) == BASELINE_TYPE]
    return made[0] if len(made) == 1 else None


def _significance(name, s, names, methods_section_data, validate) -> Ablation:
    """`plot: significance` (SCAAR Figure 3): one question, ATTN vs SCW weights of its words."""
    if len(names) != 1:
        raise s.fail("datasets", "a significance plot shows one question of one dataset")
    s.str("plot")
    question = s.raw("question", None)  # None: the split's first question
    if question is not None and (not isinstance(question, str) or not question):
        raise s.fail("question", f"expected a question id, got {question!r}")
    base, _, settings = _base(s, "scaar", methods_section_data, validate)
    if "similarity" not in settings:
        raise s.fail("method", f"{base!r} has no `similarity` encoder (use a scaar or weighted-threshold method)")
    s.done()
    return Ablation(name, names, [], {}, "significance", None, None, question, settings["similarity"], base=base)


def _uncertainty_sweep(name, s, names, methods_section_data, validate) -> Ablation:
    """`plot: uncertainty-sweep` (SeaKR Figure 3 b-d): one sampling pass at k_max with every layer's Gram."""
    if len(names) != 1:
        raise s.fail("datasets", "an uncertainty sweep runs on one (calibration) dataset")
    s.str("plot")
    base, _, settings = _base(s, "seakr", methods_section_data, validate)
    if settings.get("estimator") != "eigenscore":
        raise s.fail("method", f"{base!r} does not use SeaKR's EigenScore (type seakr, estimator: eigenscore)")
    k_max = s.int("k_max", 20, minimum=2)
    s.done()
    return Ablation(name, names, [], {}, "uncertainty-sweep", None, None, k_max=k_max, base=base)


def _sugar_entropy(name, s, names, methods_section_data, validate) -> Ablation:
    """`plot: sugar-entropy` (SUGAR Figure 2): per-question SE and PE of a SUGAR configuration's runs on
    each dataset, with its thresholds; the runs are ordinary generate jobs, read from their traces."""
    s.str("plot")
    base, method_type, _ = _base(s, "sugar", methods_section_data, validate)
    if method_type != "sugar":
        raise s.fail("method", f"{base!r} is a {method_type!r} configuration; the entropy levels are SUGAR's")
    s.done()
    return Ablation(name, names, [], {}, "sugar-entropy", None, None, base=base)


def _base(s, default: str, methods_section_data: dict, validate) -> tuple[str, str, dict]:
    """A special kind's `method:`: its name, type and validated settings (without per_dataset presets)."""
    base = s.str("method", default)
    if base not in methods_section_data:
        raise s.fail("method", f"names {base!r}, which is not under methods:")
    raw = {k: v for k, v in (methods_section_data[base] or {}).items() if k != "per_dataset"}
    method_type = raw.pop("type", base)
    return base, method_type, validate(base, method_type, raw, f"methods.{base}", {}).settings


def check_no_clash(generated: dict, methods: dict) -> None:
    for name in generated:
        if name in methods:
            raise ConfigError(f"ablation variant {name!r} has the name of a configuration under methods:")
