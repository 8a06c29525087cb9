"""The trainer process (`python -m tandem.trainer`) and its backends (torch, megatron, sim)."""
