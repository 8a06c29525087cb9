"""A recursive-descent calculator: + - * / ** parentheses and unary minus."""

import re

_TOKEN = re.compile(r"\s*(\d+\.\d*|\d+|\*\*|[-+*/()])")


def tokenize(text: str):
    pos, out = 0, []
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise SyntaxError(f"unexpected character at {pos}: {text[pos]!r}")
        out.append(m.group(1))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, tokens):
        self.tokens, self.i = tokens, 0

    def peek(self):
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self):
        tok = self.peek()
        self.i += 1
        return tok

    def expr(self):
        value = self.term()
        while self.peek() in ("+", "-"):
            if self.take() == "+":
                value += self.term()
            else:
                value -= self.term()
        return value

    def term(self):
        value = self.power()
        while self.peek() in ("*", "/"):
            if self.take() == "*":
                value *= self.power()
            else:
                value /= self.power()
        return value

    def power(self):
        base = self.unary()
        if self.peek() == "**":
            self.take()
            return base ** self.power()  # right-associative
        return base

    def unary(self):
        if self.peek() == "-":
            self.take()
            return -self.unary()
        return self.atom()

    def atom(self):
        tok = self.take()
        if tok == "(":
            value = self.expr()
            if self.take() != ")":
                raise SyntaxError("missing ')'")
            return value
        if tok is None or not tok[0].isdigit():
            raise SyntaxError(f"unexpected token {tok!r}")
        return float(tok) if "." in tok else int(tok)


def evaluate(text: str):
    parser = _Parser(tokenize(text))
    value = parser.expr()
    if parser.peek() is not None:
        raise SyntaxError(f"trailing input: {parser.peek()!r}")
    return value
