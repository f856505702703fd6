# Two rules per `downloads:` entry in params.yaml: `download_<name>` fetches the file, and for an
# archive `extract_<name>` unpacks its `extract` members. Their outputs are what other steps name as
# inputs (a dataset `path:` or `corpus.passages` under data/raw/<name>/), so Snakemake fetches on
# demand. Separate rules, because Snakemake deletes a failed job's outputs: a wrong member path must
# not cost the verified archive.
from adaptive_rag.settings import rule_name

for _download in P.downloads.values():
    _rule_name = rule_name("", _download.name)  # download_<this>, extract_<this>

    rule:
        name:
            f"download_{_rule_name}"
        output:
            _download.path,
        params:
            name=_download.name,
            settings=settings_key(_download.url, _download.filename, _download.sha256, _download.size),
        log:
            f"logs/download/{_download.name}.log",
        shell:
            "{CLI} download --no-extract --name {params.name:q} > {log:q} 2>&1"

    if _download.extract:

        rule:
            name:
                f"extract_{_rule_name}"
            input:
                _download.path,
            output:
                _download.extracted_paths(),
            params:
                name=_download.name,
                settings=settings_key(list(_download.extract)),
            log:
                f"logs/download/{_download.name}-extract.log",
            shell:
                "{CLI} extract --name {params.name:q} > {log:q} 2>&1"
