"""Language models: materialisation into a local directory, and generation backends."""
