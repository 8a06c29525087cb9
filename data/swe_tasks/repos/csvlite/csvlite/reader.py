"""A CSV line parser: quoted fields, doubled quotes, custom delimiter."""


def parse_line(line: str, delimiter: str = ","):
    fields, field, i = [], [], 0
    quoted = False
    while i < len(line):
        ch = line[i]
        if quoted:
            if ch == '"':
                if i + 1 < len(line) and line[i + 1] == '"':
                    field.append('"')
                    i += 1
                else:
                    quoted = False
            else:
                field.append(ch)
        elif ch == '"':
            quoted = True
        elif ch == delimiter:
            fields.append("".join(field))
            field = []
        else:
            field.append(ch)
        i += 1
    if quoted:
        raise ValueError("unterminated quoted field")
    fields.append("".join(field))
    return fields


def read(text: str, delimiter: str = ","):
    """Rows as dicts keyed by the header line."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    header = parse_line(lines[0], delimiter)
    rows = []
    for ln in lines[1:]:
        values = parse_line(ln, delimiter)
        if len(values) != len(header):
            raise ValueError(f"expected {len(header)} fields, got {len(values)}")
        rows.append(dict(zip(header, values)))
    return rows
