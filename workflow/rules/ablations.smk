# Ablation experiments (`ablations:` in params.yaml): each variant is an ordinary method configuration,
# so generate/score run it; this rule turns the variants' scores into the ablation's tables and figure.
# Targets: `snakemake --cores all ablation_<name>` (dashes in the name become underscores), or
# `snakemake --cores all ablations` for every one.

ABLATION_PREFIX = "reports/ablations/{ablation}"
from adaptive_rag.ablations import SPECIAL as SPECIAL_PLOTS
from adaptive_rag.dvc_stages import ablation_rule


def ablation_paper(wildcards):
    """The HTML report's category for an ablation's files: its `paper:`, or "Ablations" without one."""
    return P.ablations[wildcards.ablation].paper or "Ablations"


def ablation_result(path, kind):
    """An ablation's output in the HTML report (`snakemake --report`): under its paper, one subcategory per
    ablation, captioned by workflow/report/<kind>.rst. A report flag is no rerun trigger."""
    return report(path, caption=f"../report/{kind}.rst", category=ablation_paper, subcategory="{ablation}")


def ablation_scores(wc):
    ablation = P.ablations[wc.ablation]
    return expand(SCORE, dataset=ablation.datasets, method=ablation.runs)


rule ablation:
    input:
        ablation_scores,
    output:
        md=ablation_result(f"{ABLATION_PREFIX}.md", "ablation"),
        csv=ablation_result(f"{ABLATION_PREFIX}.csv", "ablation"),
        tex=ablation_result(f"{ABLATION_PREFIX}.tex", "ablation"),
        png=ablation_result(f"{ABLATION_PREFIX}.png", "ablation"),
        html=ablation_result(f"{ABLATION_PREFIX}.html", "ablation"),  # the report shows HTML inline
    params:
        prefix=ABLATION_PREFIX,
        settings=settings_key(P.report),  # the intervals' settings: rerun when they change
    wildcard_constraints:
        ablation="|".join(re.escape(n) for n, a in P.ablations.items() if a.plot not in SPECIAL_PLOTS) or "(?!)",
    log:
        "logs/ablations/{ablation}.log",
    shell:
        "{CLI} ablation --name {wildcards.ablation:q} --scores {input:q} --out-prefix {params.prefix:q} > {log:q} 2>&1"


for _name in P.ablations:

    rule:
        name:
            ablation_rule(_name)
        input:
            expand(f"{ABLATION_PREFIX}.png", ablation=_name),


rule ablations:
    input:
        expand(f"{ABLATION_PREFIX}.png", ablation=list(P.ablations)),


rule significance:
    input:
        split=lambda wc: SPLIT.format(dataset=P.ablations[wc.ablation].datasets[0]),
        model=MODEL_DIR,
    output:
        csv=ablation_result(f"{ABLATION_PREFIX}.csv", "significance"),
        png=ablation_result(f"{ABLATION_PREFIX}.png", "significance"),
    params:
        dataset=lambda wc: P.ablations[wc.ablation].datasets[0],
        question=lambda wc: f"--question {shlex.quote(P.ablations[wc.ablation].question)}"
        if P.ablations[wc.ablation].question else "",
        similarity=lambda wc: P.ablations[wc.ablation].similarity,
    wildcard_constraints:
        ablation="|".join(re.escape(n) for n, a in P.ablations.items() if a.plot == "significance") or "(?!)",
    threads: P.generation.threads  # the model's torch threads
    resources:
        gpu=MODEL_GPUS,
    log:
        "logs/ablations/{ablation}.log",
    shell:
        "{CLI} significance --dataset {params.dataset:q} {params.question} --split {input.split:q} "
        "--model-dir {input.model:q} --similarity {params.similarity:q} --csv {output.csv:q} "
        "--figure {output.png:q} > {log:q} 2>&1"


rule uncertainty_sweep:
    input:
        split=lambda wc: SPLIT.format(dataset=P.ablations[wc.ablation].datasets[0]),
        model=MODEL_DIR,
    output:
        csv=ablation_result(f"{ABLATION_PREFIX}.csv", "uncertainty-sweep"),
        png=ablation_result(f"{ABLATION_PREFIX}.png", "uncertainty-sweep"),
    params:
        dataset=lambda wc: P.ablations[wc.ablation].datasets[0],
        method=lambda wc: P.ablations[wc.ablation].base,
        k_max=lambda wc: P.ablations[wc.ablation].k_max,
    wildcard_constraints:
        ablation="|".join(re.escape(n) for n, a in P.ablations.items() if a.plot == "uncertainty-sweep") or "(?!)",
    threads: P.generation.threads  # the model's torch threads
    resources:
        gpu=MODEL_GPUS,
    log:
        "logs/ablations/{ablation}.log",
    shell:
        "{CLI} seakr-sweep --dataset {params.dataset:q} --method {params.method:q} --split {input.split:q} "
        "--model-dir {input.model:q} --k-max {params.k_max} --csv {output.csv:q} --figure {output.png:q} > {log:q} 2>&1"


rule sugar_entropy_levels:
    input:
        traces=lambda wc: expand(f"{RUN_DIR}/trace.jsonl", dataset=P.ablations[wc.ablation].datasets,
                                 method=P.ablations[wc.ablation].base),
        provenance=lambda wc: expand(f"{RUN_DIR}/provenance.json", dataset=P.ablations[wc.ablation].datasets,
                                     method=P.ablations[wc.ablation].base),
    output:
        png=ablation_result(f"{ABLATION_PREFIX}.png", "sugar-entropy"),
        csv=ablation_result(f"{ABLATION_PREFIX}.csv", "sugar-entropy"),
        md=ablation_result(f"{ABLATION_PREFIX}.md", "sugar-entropy"),
        html=ablation_result(f"{ABLATION_PREFIX}.html", "sugar-entropy"),
    wildcard_constraints:
        ablation="|".join(re.escape(n) for n, a in P.ablations.items() if a.plot == "sugar-entropy") or "(?!)",
    log:
        "logs/ablations/{ablation}.log",
    shell:
        "{CLI} sugar-entropy --name {wildcards.ablation:q} --traces {input.traces:q} "
        "--out-prefix reports/ablations/{wildcards.ablation:q} > {log:q} 2>&1"
