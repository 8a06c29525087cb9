"""Edit distance and fuzzy lookup."""


def levenshtein(a: str, b: str) -> int:
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cost = 0 if ca == cb else 1
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost))
        prev = cur
    return prev[-1]


def closest(word: str, candidates, max_distance: int = 2):
    best, best_d = None, max_distance + 1
    for c in candidates:
        dist = levenshtein(word, c)
        if dist < best_d:
            best, best_d = c, dist
    return best
