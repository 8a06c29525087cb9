"""Shell-style wildcard matching: *, ? and [abc] / [!abc] classes."""


def _class_end(pattern: str, i: int) -> int:
    j = i + 1
    if j < len(pattern) and pattern[j] == "!":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1
    while j < len(pattern) and pattern[j] != "]":
        j += 1
    return j


def _in_class(ch: str, body: str) -> bool:
    i = 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            if body[i] <= ch <= body[i + 2]:
                return True
            i += 3
        else:
            if body[i] == ch:
                return True
            i += 1
    return False


def match(name: str, pattern: str) -> bool:
    """Backtracking matcher over the whole name."""
    n, p = 0, 0
    star_p, star_n = -1, 0
    while n < len(name):
        if p < len(pattern) and pattern[p] == "*":
            star_p, star_n = p, n
            p += 1
            continue
        if p < len(pattern) and pattern[p] == "[":
            end = _class_end(pattern, p)
            if end < len(pattern):
                body = pattern[p + 1:end]
                negate = body.startswith("!")
                if negate:
                    body = body[1:]
                if _in_class(name[n], body) != negate:
                    n, p = n + 1, end + 1
                    continue
        elif p < len(pattern) and (pattern[p] == "?" or pattern[p] == name[n]):
            n, p = n + 1, p + 1
            continue
        if star_p >= 0:
            star_n += 1
            n, p = star_n, star_p + 1
            continue
        return False
    while p < len(pattern) and pattern[p] == "*":
        p += 1
    return p == len(pattern)


def filter_names(names, pattern: str):
    return [n for n in names if match(n, pattern)]
