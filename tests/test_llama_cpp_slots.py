"""llama-server's slots (``--parallel`` N, each ``--ctx-size`` / N tokens of cache of its
own): a closed loop runs at most the slots the KV pool holds whole and never preempts,
and the launch command writes those slots without a note."""

from __future__ import annotations

from energylens.deployment import Deployment, Workload
from energylens.hardware import load_gpu
from energylens.model import get_model
from energylens.predict import predict
from energylens.runtime import get_runtime
from energylens.runtime.launch import launch_command
from energylens.workloads.load.kind import LoadPrediction

#: Qwen1.5-7B (multi-head attention, 0.5 MB of cache per token) on one 24 GB L4: the pool
#: holds about nine requests of 1,024 + 128 tokens.
CASE = {"model": "qwen1.5-7b", "gpu": "L4", "deployment": Deployment(runtime="llama.cpp")}


def _loop(clients: int) -> LoadPrediction:
    result = predict(**CASE, workload=Workload(kind="load", concurrency=clients,
                                                input_tokens=1024, output_tokens=128))
    assert isinstance(result, LoadPrediction)
    return result


def test_more_clients_than_slots_queue_and_nothing_is_preempted() -> None:
    workload = Workload(kind="load", concurrency=32, input_tokens=1024, output_tokens=128)
    command = launch_command(model=get_model("qwen1.5-7b"), deployment=CASE["deployment"],
                             workload=workload, gpu=load_gpu("L4"))
    argv = list(command.argv)
    slots = int(argv[argv.index("--parallel") + 1])
    assert int(argv[argv.index("--ctx-size") + 1]) == slots * (1024 + 128)
    assert not any("slots, not the" in note for note in command.notes)
    few, many = _loop(4), _loop(32)
    assert 4 <= slots < 32
    assert many.load["preemptions"] == 0
    assert slots - 1 < many.load["mean_running"] <= slots + 1e-9  # every slot busy
    assert many.output_tokens_per_s >= few.output_tokens_per_s  # throughput does not fall


def test_a_slot_is_the_longest_request_of_the_pool() -> None:
    cap = get_runtime("llama.cpp").running_cap_on
    gpu = load_gpu("L4")
    assert cap(gpu=gpu, kv_tokens=10_000, context_tokens=1_152) == 8
    assert cap(gpu=gpu, kv_tokens=500, context_tokens=1_152) == 1
