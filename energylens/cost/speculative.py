"""Speculative decoding with a one-layer draft head (multi-token prediction, EAGLE).

Each decode step the draft head (one decoder layer over the shared LM head) proposes
``draft_tokens`` tokens one after another; the model then checks them all in one pass,
``draft_tokens + 1`` tokens per sequence, and keeps the accepted prefix plus its own next
token. With each draft accepted with probability ``acceptance`` once the ones before it
were, a sequence gains ``1 + a + a^2 + ... + a^k`` tokens per step on average.
:func:`energylens.cost.step.decode_step_cost` prices such a step per token gained.
"""

from __future__ import annotations

from dataclasses import dataclass

from energylens.errors import ConfigError

#: Conditional acceptance of a draft token. DeepSeek-V3 Technical Report (arXiv
#: 2412.19437, multi-token prediction evaluation): "the acceptance rate of the second token
#: prediction ranges between 85% and 90% across various generation topics" (one MTP
#: module, its first draft; kind: published). The lower end, taken for every further draft
#: of the same head too (kind: assumed; deeper drafts of a reused head are likely lower).
DEFAULT_ACCEPTANCE = 0.85


@dataclass(frozen=True, kw_only=True)
class Speculation:
    """``draft_tokens`` drafts per step, each kept with probability ``acceptance`` given
    that the drafts before it were kept."""

    draft_tokens: int
    acceptance: float = DEFAULT_ACCEPTANCE

    def __post_init__(self) -> None:
        if self.draft_tokens < 0:
            raise ConfigError(f"speculative tokens must be >= 0, got {self.draft_tokens}")
        if not 0.0 <= self.acceptance <= 1.0:
            raise ConfigError(f"draft acceptance must be within [0, 1], got {self.acceptance}")

    @property
    def draft_layers(self) -> int:
        """Decoder layers of the draft head (one; none without drafts)."""
        return 1 if self.draft_tokens else 0

    @property
    def tokens_per_step(self) -> float:
        """Mean tokens a sequence gains per step: 1 + a + ... + a^k."""
        return float(sum(self.acceptance ** i for i in range(self.draft_tokens + 1)))
