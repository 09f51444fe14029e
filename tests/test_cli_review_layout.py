"""The predict command's layout messages and the configuration it reports (a review)."""

from __future__ import annotations

import json

import pytest

from energylens.cli import main


def test_tp_times_ep_over_the_gpus_names_the_flags_that_fit(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["predict", "--model", "qwen3-30b-a3b", "--gpu", "h100", "--tp", "4", "--ep", "4",
                 "--num-gpus", "4"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1
    assert "exceed num_gpus = 4" in err and "--tp 4 --ep 4 --moe-tp 1" in err
    assert "--enable-expert-parallel" in err
    # the flags named there run
    assert main(["predict", "--model", "qwen3-30b-a3b", "--gpu", "h100", "--tp", "4", "--ep", "4",
                 "--moe-tp", "1", "--num-gpus", "4", "--json"]) == 0


def test_configuration_reports_the_attention_split_the_prediction_used(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM's --ep 4 on 4 GPUs splits attention 4 ways (--tensor-parallel-size 4)."""
    assert main(["predict", "--model", "qwen3-30b-a3b", "--gpu", "h100", "--ep", "4",
                 "--num-gpus", "4", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)["configuration"]
    assert (found["tp"], found["attention_tp"], found["ep"], found["moe_tp"]) == (1, 4, 4, 1)


def test_configuration_reports_the_knobs_it_priced(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--model", "qwen3-30b-a3b", "--gpu", "h100", "--tp", "2",
                 "--overlap-sms", "8", "--moe-skew", "1.2", "--prefill-chunk-tokens", "256",
                 "--json"]) == 0
    found = json.loads(capsys.readouterr().out)["configuration"]
    assert (found["overlap_sms"], found["moe_skew"], found["prefill_chunk_tokens"],
            found["max_num_seqs"]) == (8, 1.2, 256, None)
