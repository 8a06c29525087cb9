import pytest

from httpkit import StatusClass, is_retryable, status_class


@pytest.mark.parametrize("code, expected", [
    (100, StatusClass.INFORMATIONAL), (200, StatusClass.SUCCESS), (204, StatusClass.SUCCESS),
    (301, StatusClass.REDIRECT), (404, StatusClass.CLIENT_ERROR), (499, StatusClass.CLIENT_ERROR),
    (500, StatusClass.SERVER_ERROR), (599, StatusClass.SERVER_ERROR),
])
def test_status_class(code, expected):
    assert status_class(code) == expected


@pytest.mark.parametrize("code", [99, 600, -1])
def test_status_class_rejects(code):
    with pytest.raises(ValueError):
        status_class(code)


@pytest.mark.parametrize("code, expected", [(429, True), (503, True), (408, True), (404, False), (500, False),
                                            (200, False)])
def test_is_retryable(code, expected):
    assert is_retryable(code) == expected
