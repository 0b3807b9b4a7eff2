"""Configuration: the structured schema (schema.py) and Hydra composition + sweep expansion (compose.py)."""
