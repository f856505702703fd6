"""Methods: one file per method type, each registering itself (see `registry`); the shared machinery
of the dynamic methods lives in `parts/`."""
