"""A tiny INI parser."""


class IniError(ValueError):
    """Raised for malformed input; the message contains `line N` (1-based)."""


def parse_ini(text: str) -> dict[str, dict[str, str]]:
    """Parse INI `text` into {section: {key: value}}.

    - `[name]` starts a section (name trimmed); keys before any section go to section "";
      the "" section is present only if it has keys;
    - `key = value` and `key: value` both assign (split at the first `=` or `:`,
      whichever comes first); key and value are trimmed; keys are lowercased;
    - blank lines and lines starting with `#` or `;` (after leading spaces) are ignored;
    - a repeated key in a section keeps the last value; a repeated section merges;
    - any other line raises IniError whose message contains `line N`.
    """
    raise NotImplementedError
