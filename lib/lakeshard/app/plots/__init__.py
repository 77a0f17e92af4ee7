"""Figures saved as PNG, one module per domain: what a person would rather see than read."""

__all__: list[str] = []
