"""A small INI reader: sections, key = value, comments, and typed getters."""


class ParseError(ValueError):
    pass


class Config(dict):
    def get_int(self, section, key, default=None):
        value = self.get(section, {}).get(key)
        return default if value is None else int(value)

    def get_bool(self, section, key, default=False):
        value = self.get(section, {}).get(key)
        if value is None:
            return default
        return value.lower() in ("1", "yes", "true", "on")


def parse(text: str) -> Config:
    config = Config()
    section = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            config.setdefault(section, {})
            continue
        if "=" not in line:
            raise ParseError(f"line {lineno}: expected key = value")
        if section is None:
            raise ParseError(f"line {lineno}: key outside any section")
        key, value = line.split("=", 1)
        config[section][key.strip().lower()] = value.strip()
    return config
