from rlecodec import encode


def test_encode():
    assert encode("aaab") == "3a1b"
    assert encode("") == ""


def test_encode_long_run():
    assert encode("z" * 15) == "15z"
