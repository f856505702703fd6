"""The pieces dynamic methods share: the retrieval loop, token-word alignment, sentence and POS
splitting, attention signals, word weightings and queries, leave-one-out contributions.

Nothing here registers a method type; the registry only looks at the modules directly in `methods/`.
"""
