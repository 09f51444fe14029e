"""vLLM: the runtime every shipped serving constant was fitted on (ML.ENERGY, vLLM 0.11)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from energylens.cost.kernels import Collective
from energylens.model.spec import LayerSpec
from energylens.runtime.profile import RuntimeProfile, load_facts
from energylens.runtime.registry import register


@dataclass(frozen=True, kw_only=True, eq=False)
class VLLM(RuntimeProfile):
    """vLLM's expert-parallel layout (its custom all-reduce is the base class's)."""

    def collective_layout(self, collectives: tuple[Collective, ...], *, layer: LayerSpec,
                          degrees: dict[str, int]) -> list[Collective]:
        """Collectives as vLLM runs them when attention is tensor-parallel over the EP group.

        The spec derives all-to-all dispatch and combine for EP (right when each rank holds
        different tokens). Under ``--enable-expert-parallel`` with TP attention every rank
        of the group already holds every token after the attention all-reduce, so dispatch
        is a local selection (no communication) and combine is one all-reduce of the MoE
        output over the group, into which the shared expert's partial sums are folded.
        """
        ep = degrees.get("ep", 1)
        if ep <= 1 or degrees.get("tp", 1) % ep:
            return list(collectives)
        out: list[Collective] = []
        combined = False
        for c in collectives:
            if c.kind == "all_to_all" and c.dim == "ep":
                if "x" in layer.op(c.after_op).output.ranks:  # dispatch: tokens land on experts
                    continue
                out.append(replace(c, kind="all_reduce", tensor=layer.op(c.after_op).output))
                combined = True
            else:
                out.append(c)
        if combined:
            out = [c for c in out
                   if not (c.kind == "all_reduce" and c.after_op in self.fused_into_combine)]
        return out


register(VLLM(**load_facts("vllm")))
