"""function-model-serving: Crossplane composition functions for fleet-wide LLM serving."""
