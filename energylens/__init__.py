"""EnergyLens: energy and latency of multi-GPU LLM inference, without a GPU."""

__version__ = "0.1.0"
