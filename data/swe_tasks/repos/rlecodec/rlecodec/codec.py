"""Run-length encoding: "aaab" <-> "3a1b"."""


def encode(text: str) -> str:
    if any(c.isdigit() for c in text):
        raise ValueError("digits cannot be run-length encoded")
    out = []
    i = 0
    while i < len(text):
        j = i
        while j < len(text) and text[j] == text[i]:
            j += 1
        out.append(f"{j - i}{text[i]}")
        i = j
    return "".join(out)


def decode(code: str) -> str:
    out, count = [], ""
    for c in code:
        if c.isdigit():
            count += c
        else:
            if not count:
                raise ValueError(f"missing count before {c!r}")
            out.append(c * int(count))
            count = ""
    if count:
        raise ValueError("dangling count")
    return "".join(out)
