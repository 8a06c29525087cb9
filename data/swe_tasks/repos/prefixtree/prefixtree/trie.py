"""A prefix tree for autocompletion."""


class _Node:
    __slots__ = ("children", "terminal", "count")

    def __init__(self):
        self.children = {}
        self.terminal = False
        self.count = 0


class Trie:
    def __init__(self, words=()):
        self.root = _Node()
        self.size = 0
        for w in words:
            self.insert(w)

    def insert(self, word: str) -> None:
        node = self.root
        for ch in word:
            node = node.children.setdefault(ch, _Node())
        if not node.terminal:
            node.terminal = True
            self.size += 1
        node.count += 1

    def __contains__(self, word: str) -> bool:
        node = self._find(word)
        return node is not None and node.terminal

    def _find(self, prefix: str):
        node = self.root
        for ch in prefix:
            node = node.children.get(ch)
            if node is None:
                return None
        return node

    def complete(self, prefix: str, limit: int = 10):
        """Words starting with prefix, most frequent first, then alphabetical."""
        node = self._find(prefix)
        if node is None:
            return []
        found = []
        stack = [(node, prefix)]
        while stack:
            n, word = stack.pop()
            if n.terminal:
                found.append((-n.count, word))
            for ch, child in n.children.items():
                stack.append((child, word + ch))
        return [w for _, w in sorted(found)[:limit]]
