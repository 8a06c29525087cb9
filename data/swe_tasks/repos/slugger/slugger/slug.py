"""URL slugs."""

import re
import unicodedata


def slugify(text: str, max_length: int = 50) -> str:
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^a-zA-Z0-9]+", "-", text).strip("-").lower()
    if len(text) > max_length:
        text = text[:max_length].rstrip("-")
    return text


def unique_slug(text: str, taken) -> str:
    base = slugify(text) or "item"
    slug, n = base, 2
    while slug in taken:
        slug = f"{base}-{n}"
        n += 1
    return slug
