from casefold import to_snake


def test_camel_to_snake():
    assert to_snake("parseHttpResponse") == "parse_http_response"


def test_acronyms():
    assert to_snake("HTTPServerError") == "http_server_error"
    assert to_snake("parseXMLDocument") == "parse_xml_document"


def test_mixed_separators():
    assert to_snake("already-kebab_and snake") == "already_kebab_and_snake"
