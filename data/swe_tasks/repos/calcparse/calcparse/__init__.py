from calcparse.evaluate import evaluate, tokenize

__all__ = ["evaluate", "tokenize"]
