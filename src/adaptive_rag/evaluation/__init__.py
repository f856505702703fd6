"""Answer extraction, metrics and per-run scoring."""
