"""RFC 6901 JSON Pointers."""


class PointerError(LookupError):
    pass


def split(pointer: str):
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PointerError(f"pointer must start with '/': {pointer!r}")
    # '~1' must be decoded before '~0', or '~01' would turn into '/'.
    return [p.replace("~1", "/").replace("~0", "~") for p in pointer[1:].split("/")]


def resolve(document, pointer: str):
    node = document
    for token in split(pointer):
        if isinstance(node, list):
            if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
                raise PointerError(f"bad array index {token!r}")
            index = int(token)
            if index >= len(node):
                raise PointerError(f"index {index} out of range")
            node = node[index]
        elif isinstance(node, dict):
            if token not in node:
                raise PointerError(f"no member {token!r}")
            node = node[token]
        else:
            raise PointerError(f"cannot descend into {type(node).__name__}")
    return node
