"""DeepSpeed inference on Habana Gaudi (Habana's fork, Optimum Habana's text-generation
example): static batches under HPU graphs, tensor parallelism through DeepSpeed AutoTP.

It is a batch benchmark script, not a server: its "launch command" runs one static batch
of the deployment's running sequences.
"""

from __future__ import annotations

from dataclasses import dataclass

from energylens.runtime.launch import LaunchCommand, LaunchSpec
from energylens.runtime.profile import RuntimeProfile, load_facts
from energylens.runtime.registry import register


@dataclass(frozen=True, kw_only=True, eq=False)
class DeepSpeedHabana(RuntimeProfile):
    """``python gaudi_spawn.py --use_deepspeed --world_size TP run_generation.py ...``."""

    def launch(self, *, spec: LaunchSpec) -> LaunchCommand:
        """One static batch of ``max_num_seqs`` sequences on ``tp`` cards per replica."""
        d, f = spec.deployment, self.flag
        half = max(spec.max_model_len // 2, 1)
        argv = [*self.launch_program.split(), f("--use_deepspeed"), f("--world_size"), str(d.tp),
                f("run_generation.py"), f("--model_name_or_path"), spec.model_id,
                f("--use_hpu_graphs"), f("--use_kv_cache"), f("--bf16"),
                f("--batch_size"), str(spec.max_num_seqs or 1), f("--max_input_tokens"), str(half),
                f("--max_new_tokens"), str(half), f("--trim_logits")]
        return LaunchCommand(argv=tuple(argv), replicas=d.replicas, gpus_per_server=d.tp,
                             notes=("a static-batch benchmark run (optimum-habana "
                                    "examples/text-generation), not a server; prompt and "
                                    "output lengths split max_model_len evenly",))


register(DeepSpeedHabana(**load_facts("deepspeed-habana")))
