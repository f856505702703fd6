# One rule per `downloads:` entry in params.yaml; its outputs are what other steps name as inputs
# (a dataset `path:` or `corpus.passages` under data/raw/<name>/), so Snakemake fetches on demand.
for _download in P.downloads.values():

    rule:
        name:
            f"download_{_download.name.replace('-', '_')}"
        output:
            [_download.path, *_download.extracted_paths()],
        params:
            name=_download.name,
            settings=settings_key(_download),
        log:
            f"logs/download/{_download.name}.log",
        shell:
            "{CLI} download --name {params.name} > {log} 2>&1"
