"""Quantization back ends the `quantize` stage dispatches to."""
