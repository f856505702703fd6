"""SeaKR (Yao et al., 2024): the method and its self-aware uncertainty parts."""
