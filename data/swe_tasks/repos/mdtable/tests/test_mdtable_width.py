from mdtable import render


def test_widths_follow_longest_cell():
    out = render(["a", "b"], [["long value", 1]])
    assert out.splitlines() == [
        "| a          | b   |",
        "| ---------- | --- |",
        "| long value | 1   |",
    ]


def test_right_align():
    out = render(["n"], [[5], [123]], align=["right"])
    assert out.splitlines()[1:] == ["| --: |", "|   5 |", "| 123 |"]
