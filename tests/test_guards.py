"""Non-finite log-probs or rewards stop the step before the loss sees them."""

import math

import pytest
import torch
from mlflow.tracking import MlflowClient

from rollverify.tasks.chain import ChainTask
from rollverify.training.guards import StepRefused, require_finite
from rollverify.training.run import train
from tests.runs import tiny


def test_finite_values_pass_and_padding_is_not_read():
    require_finite(
        "x", torch.tensor([[0.0, -1.0], [-2.0, math.nan]]), torch.tensor([[1, 1], [1, 0]]).bool()
    )


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_bad_value_names_what_and_where(bad):
    values = torch.zeros(4, 3)
    values[2, 1] = bad
    with pytest.raises(StepRefused, match=r"1 log-probs are (NaN|inf) \(rows \[2\]\)"):
        require_finite("log-probs", values, torch.ones(4, 3, dtype=torch.bool))


def test_a_nan_reward_refuses_the_step_and_fails_the_run(tmp_path, monkeypatch):
    calls = {"n": 0}
    reward = ChainTask.reward

    def sometimes_nan(self, response, answer):
        calls["n"] += 1
        # calls 1-8: the base-model eval (tiny(): task.eval_size 8); then step 1's rewards
        return math.nan if calls["n"] == 8 + 3 else reward(self, response, answer)

    monkeypatch.setattr(ChainTask, "reward", sometimes_nan)
    config = tiny(tmp_path, "rollverify")
    with pytest.raises(StepRefused, match="rewards are NaN"):
        train(config)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("rollverify").experiment_id])
    assert run.info.status == "FAILED"
    assert "train_seconds" not in run.data.metrics, "no step was trained"
