"""The main experiment's settings with every default filled in (`reports/params.yaml`), which the HTML
report's front page prints under "Configuration".

params.yaml leaves most keys to their defaults, and a reader of the tables should not have to know
them: this is what the runs actually read (the same values each run's `provenance.json` records), for
the experiment's datasets and methods only (the ablations' settings are in their own captions).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from ..io import atomic_write

HEADER = ("# The main experiment's settings as its runs read them: params.yaml with every default filled in\n"
          "# (written by `adaptive-rag report`; each run's provenance.json records the same values).\n")


def resolved_settings(params) -> dict:
    """Plain data (YAML- and JSON-ready) in params.yaml's layout: experiment, report, seed, model,
    corpus, retrieval, generation, then the experiment's datasets and methods. A method whose
    settings differ on some dataset (a per-dataset preset) lists them under `per_dataset`."""
    methods = {}
    for name in params.experiment_methods:
        cfg = params.method(name)
        entry = {"type": cfg.type, "settings": cfg.settings}
        differing = {d: cfg.settings_for(d) for d in params.experiment_datasets if cfg.settings_for(d) != cfg.settings}
        if differing:
            entry["per_dataset"] = differing
        methods[name] = entry
    data = {
        "experiment": {"datasets": list(params.experiment_datasets), "methods": list(params.experiment_methods),
                       "baseline": params.experiment_baseline},
        "report": asdict(params.report), "seed": params.seed, "model": asdict(params.model),
        "corpus": asdict(params.corpus), "retrieval": asdict(params.retrieval),
        "generation": asdict(params.generation),
        "datasets": {d: asdict(params.dataset(d)) for d in params.experiment_datasets},
        "methods": methods,
    }
    return json.loads(json.dumps(data))  # tuples as lists, nothing YAML cannot write


def settings_digest(params) -> str:
    """A short fingerprint of `resolved_settings`: the report rule reruns when it changes."""
    text = json.dumps(resolved_settings(params), sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def write_resolved(params, path: Path) -> None:
    import yaml

    with atomic_write(path) as handle:
        handle.write(HEADER + yaml.safe_dump(resolved_settings(params), sort_keys=False, allow_unicode=True,
                                             width=100))
