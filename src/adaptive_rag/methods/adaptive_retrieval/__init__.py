"""Adaptive Retrieval (Mallen et al., ACL 2023): the method, which retrieves for questions about less popular entities, and the offline corpus-frequency stand-in for their popularity."""
