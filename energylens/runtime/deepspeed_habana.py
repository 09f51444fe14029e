"""DeepSpeed inference on Habana Gaudi (Habana's fork, Optimum Habana's text-generation
example): static batches under HPU graphs, tensor parallelism through DeepSpeed AutoTP.

It is a batch benchmark script, not a server: its "launch command" runs one static batch
of the deployment's running sequences.
"""

from __future__ import annotations

from dataclasses import dataclass

from energylens.errors import ConfigError
from energylens.runtime.launch import LaunchCommand, LaunchSpec
from energylens.runtime.profile import RuntimeProfile, load_facts
from energylens.runtime.registry import register

#: What a replica spanning hosts needs: DeepSpeed's multi-node launch (a hostfile;
#: optimum-habana's gaudi_spawn.py, recalled), no flag among those energylens writes.
MULTI_NODE = ("DeepSpeed spans nodes through a hostfile (gaudi_spawn.py --hostfile, "
              "recalled), not among the flags energylens writes")


@dataclass(frozen=True, kw_only=True, eq=False)
class DeepSpeedHabana(RuntimeProfile):
    """``python gaudi_spawn.py --use_deepspeed --world_size TP run_generation.py ...``."""

    def launch(self, *, spec: LaunchSpec) -> LaunchCommand:
        """One static batch of ``max_num_seqs`` sequences on ``tp`` cards per replica, of
        the priced prompt and output lengths where every request has the same. FP8 weights
        or KV cache are refused: optimum-habana runs them through its quantisation toolkit
        (a measurement run, then the run, each with a ``QUANT_CONFIG`` JSON: examples/
        text-generation/README.md, recalled), which this command does not write."""
        d, f = spec.deployment, self.flag
        fp8 = [what for what, dtype in (("weights", spec.weight_dtype),
                                        ("KV cache", d.kv_dtype)) if dtype == "fp8"]
        if fp8:
            raise ConfigError(
                f"{self.display_name} runs FP8 {' and '.join(fp8)} through optimum-habana's "
                "quantisation (a QUANT_CONFIG measurement run, then a QUANT_CONFIG "
                "quantised run: examples/text-generation/README.md), which energylens does "
                "not write; its --bf16 command would run 16-bit")
        notes = ["a static-batch benchmark run (optimum-habana examples/text-generation), "
                 "not a server"]
        if spec.prompt_tokens is not None and spec.output_tokens is not None:
            prompt, output = spec.prompt_tokens, spec.output_tokens
        else:
            prompt = output = max(spec.max_model_len // 2, 1)
            notes[0] += ("; the requests' lengths vary: prompt and output split the longest "
                         "request evenly")
        argv = [*self.launch_program.split(), f("--use_deepspeed"), f("--world_size"), str(d.tp),
                f("run_generation.py"), f("--model_name_or_path"), spec.model_id,
                f("--use_hpu_graphs"), f("--use_kv_cache"), f("--bf16"),
                f("--batch_size"), str(spec.max_num_seqs or 1),
                f("--max_input_tokens"), str(prompt), f("--max_new_tokens"), str(output),
                f("--trim_logits")]
        return LaunchCommand(argv=tuple(argv), replicas=d.replicas, gpus_per_server=d.tp,
                             notes=tuple(notes), multi_node=MULTI_NODE)


register(DeepSpeedHabana(**load_facts("deepspeed-habana")))
