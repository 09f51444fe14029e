"""The calibrated cost model: per-kernel roofline, collectives, MoE routing, power."""
