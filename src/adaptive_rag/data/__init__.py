"""Datasets, sampling and corpus preparation."""
