"""Whether a request fits a model's context window (``ModelConfig.max_context_tokens``).

A request of ``input_tokens`` prompt tokens that generates ``output_tokens`` holds
``input_tokens + output_tokens`` positions at its last step; an engine refuses one longer
than the model's context (vLLM's default ``max_model_len`` is the config's
``max_position_embeddings``). A request exactly as long as the context runs.
"""

from __future__ import annotations

from energylens.model.config import ModelConfig


def _tokens(count: float) -> str:
    """``200,128``; a fractional (mean) length keeps one decimal."""
    return f"{count:,.0f}" if float(count).is_integer() else f"{count:,.1f}"


def context_shortfall(*, model: ModelConfig, input_tokens: float,
                      output_tokens: float) -> str | None:
    """Why a request of ``input_tokens`` + ``output_tokens`` does not fit ``model``'s
    context (one line), or None when it fits or the context is unknown (None).

    The load kind passes its longest request (prompt + output of the same request)."""
    limit = model.max_context_tokens
    total = input_tokens + output_tokens
    if limit is None or total <= limit:
        return None
    return (f"prompt + output {_tokens(total)} tokens exceed {model.name}'s context of "
            f"{limit:,} (max_position_embeddings)")
