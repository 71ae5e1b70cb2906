from labkit.teach import plots


def test_wrapped_labels_break_into_lines_and_unwrapped_ones_stay() -> None:
    bars = {"  + seq. parallel, selective": {"parameters": 1e9}, "GPT-2, b=8, s=1024": {"activations": 2e9}}
    wrapped = plots.memory_bars(bars, wrap=14)
    labels = [t.get_text() for t in wrapped.axes[0].get_xticklabels()]
    assert labels == ["+ seq.\nparallel,\nselective", "GPT-2, b=8,\ns=1024"]
    assert all(len(line) <= 14 for label in labels for line in label.splitlines())
    plain = plots.memory_bars(bars)
    assert [t.get_text() for t in plain.axes[0].get_xticklabels()] == list(bars)
