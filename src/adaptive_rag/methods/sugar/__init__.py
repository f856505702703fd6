"""SUGAR (Zubkova et al., 2025): the method, semantic entropy, the entailment judges and the routing thresholds."""
