"""Small statistics helpers."""


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def median(values: list[float]) -> float:
    """Median of a non-empty list."""
    return values[len(values) // 2]
