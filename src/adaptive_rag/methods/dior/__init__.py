"""DioR (Guo et al., 2025): the method, its detectors, keyword scoring, chunking and stepwise retrieval, and the code that makes and trains the detectors' data."""
