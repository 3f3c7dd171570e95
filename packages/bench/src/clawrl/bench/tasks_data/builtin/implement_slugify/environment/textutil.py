"""Text utilities."""


def slugify(text: str) -> str:
    """Turn `text` into a URL slug.

    - accents are removed (é -> e, ü -> u; use unicodedata NFKD and drop combining marks);
    - the result is lowercase;
    - every run of characters that are not ASCII letters or digits becomes one `-`;
    - there is no leading or trailing `-`;
    - an input with no letters or digits gives the empty string.

    >>> slugify("Hello, World!")
    'hello-world'
    """
    raise NotImplementedError
