"""Pricing."""


def calc_total(prices: list[float], tax: float = 0.2) -> float:
    return round(sum(prices) * (1 + tax), 2)
