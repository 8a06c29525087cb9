"""URL query strings: percent-decoding, '+' as space, repeated keys."""

_SAFE = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def _unquote(s: str) -> str:
    s = s.replace("+", " ")
    out, i, buf = [], 0, bytearray()
    while i < len(s):
        if s[i] == "%" and len(s[i + 1:i + 3]) == 2:
            try:
                buf.append(int(s[i + 1:i + 3], 16))
                i += 3
                continue
            except ValueError:
                pass
        if buf:
            out.append(buf.decode("utf-8", "replace"))
            buf = bytearray()
        out.append(s[i])
        i += 1
    if buf:
        out.append(buf.decode("utf-8", "replace"))
    return "".join(out)


def _quote(s: str) -> str:
    return "".join(c if c in _SAFE else "".join(f"%{b:02X}" for b in c.encode()) for c in s)


def parse(query: str) -> dict:
    """'a=1&b=2&a=3' -> {'a': ['1', '3'], 'b': ['2']}"""
    result = {}
    for part in query.lstrip("?").split("&"):
        if not part:
            continue
        key, _, value = part.partition("=")
        result.setdefault(_unquote(key), []).append(_unquote(value))
    return result


def build(params: dict) -> str:
    parts = []
    for key, values in params.items():
        for v in values if isinstance(values, list) else [values]:
            parts.append(f"{_quote(str(key))}={_quote(str(v))}")
    return "&".join(parts)
