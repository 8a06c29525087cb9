from numkit.ints import clamp, digit_sum, gcd, is_prime, popcount, sign
from numkit.versions import compare_versions

__all__ = ["clamp", "compare_versions", "digit_sum", "gcd", "is_prime", "popcount", "sign"]
