"""Greedy word wrapping and full justification."""


def wrap(text: str, width: int):
    if width < 1:
        raise ValueError("width must be positive")
    lines, current = [], ""
    for word in text.split():
        while len(word) > width:  # hard-split words longer than a line
            if current:
                lines.append(current)
                current = ""
            lines.append(word[:width])
            word = word[width:]
        if not current:
            current = word
        elif len(current) + 1 + len(word) <= width:
            current += " " + word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines


def justify(text: str, width: int):
    lines = wrap(text, width)
    out = []
    for line in lines[:-1]:
        words = line.split()
        if len(words) == 1:
            out.append(line.ljust(width))
            continue
        gaps = len(words) - 1
        spaces = width - sum(len(w) for w in words)
        built = ""
        for i, w in enumerate(words[:-1]):
            built += w + " " * (spaces // gaps + (1 if i < spaces % gaps else 0))
        out.append(built + words[-1])
    if lines:
        out.append(lines[-1].ljust(width))
    return out
