"""Adaptive-RAG (Jeong et al., NAACL 2024): the questions' complexity labels, the query-complexity classifier trained on them, and the method that routes each question by its predicted label."""
