"""Small dense matrices over floats."""


class Matrix:
    def __init__(self, rows):
        rows = [list(map(float, r)) for r in rows]
        if not rows or any(len(r) != len(rows[0]) for r in rows):
            raise ValueError("rows must be non-empty and of equal length")
        self.rows = rows

    @property
    def shape(self):
        return len(self.rows), len(self.rows[0])

    @classmethod
    def identity(cls, n: int) -> "Matrix":
        return cls([[1 if i == j else 0 for j in range(n)] for i in range(n)])

    def transpose(self) -> "Matrix":
        return Matrix([list(col) for col in zip(*self.rows)])

    def __matmul__(self, other: "Matrix") -> "Matrix":
        n, m = self.shape
        m2, p = other.shape
        if m != m2:
            raise ValueError(f"cannot multiply {self.shape} by {other.shape}")
        cols = other.transpose().rows
        return Matrix([[sum(a * b for a, b in zip(row, col)) for col in cols] for row in self.rows])

    def __eq__(self, other) -> bool:
        return isinstance(other, Matrix) and self.rows == other.rows

    def determinant(self) -> float:
        n, m = self.shape
        if n != m:
            raise ValueError("determinant needs a square matrix")
        a = [row[:] for row in self.rows]
        det = 1.0
        for c in range(n):
            pivot = max(range(c, n), key=lambda r: abs(a[r][c]))
            if a[pivot][c] == 0:
                return 0.0
            if pivot != c:
                a[c], a[pivot] = a[pivot], a[c]
                det = -det
            det *= a[c][c]
            for r in range(c + 1, n):
                f = a[r][c] / a[c][c]
                for k in range(c, n):
                    a[r][k] -= f * a[c][k]
        return det
