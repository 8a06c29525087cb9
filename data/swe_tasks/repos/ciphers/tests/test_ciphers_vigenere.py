from ciphers import vigenere


def test_known_vector():
    assert vigenere("ATTACK AT DAWN", "LEMON") == "LXFOPV EF RNHR"
    assert vigenere("HOLD THE LINE", "QUEEN") == "XIPH GXY PMAU"


def test_roundtrip():
    msg = "Hello, World!"
    assert vigenere(vigenere(msg, "key"), "key", decrypt=True) == msg
