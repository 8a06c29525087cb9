from semverlite import parse


def test_bump_major():
    assert str(parse("1.4.2").bump("major")) == "2.0.0"


def test_bump_minor_resets_patch():
    assert str(parse("1.4.2").bump("minor")) == "1.5.0"
    assert str(parse("3.0.7").bump("minor")) == "3.1.0"
    assert str(parse("0.9.9").bump("minor").bump("patch")) == "0.10.1"


def test_bump_patch():
    assert str(parse("1.4.2").bump("patch")) == "1.4.3"
