"""adaptive-rag: a reproducible workflow for adaptive retrieval-augmented generation research."""

__version__ = "0.1.0"
