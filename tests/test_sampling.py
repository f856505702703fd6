from adaptive_rag.data.sampling import sample


def test_random_samples_are_seeded_and_nested():
    items = list(range(1000))
    s300, s500 = sample(items, 300, seed=7), sample(items, 500, seed=7)
    assert s500[:300] == s300
    assert sample(items, 300, seed=7) == s300
    assert sample(items, 300, seed=8) != s300
    assert len(set(s500)) == 500


def test_first_mode_keeps_file_order_and_none_takes_all():
    items = list("abcdef")
    assert sample(items, 3, seed=1, mode="first") == ["a", "b", "c"]
    assert sorted(sample(items, None, seed=1)) == items
