"""RaDIO (Zhu et al., AAAI 2025): DRAGIN's trigger and query with a token-level MLP detector and
TF-IDF/similarity-weighted query words (docs/radio.md)."""
