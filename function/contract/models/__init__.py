"""Pydantic models generated from apis/ by hack/gen_models.py."""
