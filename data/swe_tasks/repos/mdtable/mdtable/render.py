"""Render rows as a GitHub-flavoured markdown table with aligned columns."""


def _cell(value) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def render(headers, rows, align=None) -> str:
    headers = [_cell(h) for h in headers]
    rows = [[_cell(v) for v in row] for row in rows]
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"row has {len(row)} cells, expected {len(headers)}")
    align = align or ["left"] * len(headers)
    widths = [max([len(h), 3] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]

    def line(cells):
        padded = []
        for c, w, a in zip(cells, widths, align):
            padded.append(c.rjust(w) if a == "right" else c.center(w) if a == "center" else c.ljust(w))
        return "| " + " | ".join(padded) + " |"

    rule = []
    for w, a in zip(widths, align):
        if a == "right":
            rule.append("-" * (w - 1) + ":")
        elif a == "center":
            rule.append(":" + "-" * (w - 2) + ":")
        else:
            rule.append("-" * w)
    return "\n".join([line(headers), "| " + " | ".join(rule) + " |"] + [line(r) for r in rows])
