"""The methods compared in the paper, each as the switches it sets (docs/rules.md, section 8).

A method is data, not code: the training step reads these flags. Loss-level methods name the
TRL loss settings they need; everything else uses the config's loss (train.loss_type).

The ratio's denominator pi_old: "behavior" puts each token's engine log-prob mu there (ours: a
stale token looks stale to the clip); "recomputed" the batch scored by the weights before the
step's first update (verl's and slime's partial rollout: a stale token looks on-policy). The
peers' corrections (rollverify/core/corrections.py) run on the recomputed one and weight or mask
tokens by pi_old/mu; their bounds are the config's `correction` section. OPSM's mask compares mu
with pi_theta, not pi_old, so rollverify-opsm puts it on RollVerify's ratio over mu.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class Method:
    name: str
    partial: bool  # pause unfinished trajectories at B complete groups, resume them next step
    verify: bool = False  # two-stage verification of the cache after every update
    token_stage: bool = True  # with verify: the dt stage (False: dt = inf)
    switching: bool = False  # with verify: switch to on-policy when acceptance collapses
    sample_filter: Literal["staleness", "ops"] | None = None  # drop completed samples
    trl_overrides: dict[str, Any] = field(default_factory=dict)  # GRPOConfig fields
    denominator: Literal["behavior", "recomputed"] = "behavior"  # pi_old (train.ratio_denominator)
    correction: str | None = None  # one of corrections.CORRECTIONS
    summary: str = ""


METHODS: dict[str, Method] = {
    m.name: m
    for m in [
        Method("grpo", partial=False, summary="on-policy, synchronous rollout"),
        Method("partial", partial=True, summary="naive partial rollout: pause, resume, no checks"),
        Method(
            "partial-recomputed",
            partial=True,
            denominator="recomputed",
            summary="partial rollout as verl and slime run it: pi_old recomputed",
        ),
        Method(
            "rollverify",
            partial=True,
            verify=True,
            switching=True,
            summary="partial + two-stage verification + conditional switching",
        ),
        Method(
            "rollverify-seq",
            partial=True,
            verify=True,
            token_stage=False,
            summary="ablation: sequence stage only (dt = inf), no switching",
        ),
        Method(
            "rollverify-seq-token",
            partial=True,
            verify=True,
            summary="ablation: both stages, no switching",
        ),
        Method(
            "rollverify-opsm",
            partial=True,
            verify=True,
            switching=True,
            correction="opsm",
            summary="rollverify + OPSM's mask in the loss: both the sample and the loss level",
        ),
        Method(
            "staleness-filter",
            partial=True,
            sample_filter="staleness",
            summary="partial + drop samples staler than verify.staleness_bound versions",
        ),
        Method(
            "ops-filter",
            partial=True,
            sample_filter="ops",
            summary="partial + drop samples whose sequence OPS exceeds verify.ops_bound",
        ),
        # Loss-level reweighting on partial rollout (TRL implements each loss).
        Method(
            "gspo",
            partial=True,
            summary="partial + GSPO: sequence-level ratio and clip",
            trl_overrides={
                "importance_sampling_level": "sequence",
                "loss_type": "grpo",
                "epsilon": 3e-4,
                "epsilon_high": 4e-4,
            },
        ),
        Method(
            "sapo",
            partial=True,
            summary="partial + SAPO: soft adaptive gate on the ratio",
            trl_overrides={"loss_type": "sapo"},
        ),
        Method(
            "vespo",
            partial=True,
            summary="partial + VESPO: variance-reduced sequence weights",
            trl_overrides={"loss_type": "vespo"},
        ),
        # The peers' corrections on partial rollout, pi_old recomputed (corrections.py).
        *[
            Method(name, partial=True, denominator="recomputed", correction=name, summary=summary)
            for name, summary in [
                ("tis", "partial-recomputed + TIS: token weight min(pi_old/mu, 2)"),
                ("mis", "partial-recomputed + MIS: sequences outside [0.5, 2] masked"),
                ("icepop", "partial-recomputed + IcePop: tokens outside [0.5, 5] masked"),
                ("opsm", "partial-recomputed + OPSM: drifted negative sequences masked"),
                ("decoupled", "partial-recomputed + AReaL's decoupled PPO (weight cap 5)"),
                ("m2po", "decoupled + M2PO: second-moment token mask, tau 0.04"),
            ]
        ],
    ]
}
