"""Configuration: Koordinator-compatible DeschedulerConfiguration modelled with pydantic."""
