from prefixtree.trie import Trie

__all__ = ["Trie"]
