"""Every counted run's own figures, one row each: what `rvctl report --per-seed FILE` writes
beside a table, so that a reader can redo its means and intervals."""

from __future__ import annotations

from typing import Any

from rollverify.experiments.report import run_groups
from rollverify.experiments.run_figures import (
    counted,
    eval_area,
    finite_only,
    highest,
    lowest,
    mean_of_first,
    switch_step,
)
from rollverify.tracking import metric_names as m
from rollverify.tracking.run_records import Report


def seed_rows(report: Report) -> list[dict[str, Any]]:
    """Every counted run's own figures, one row each (what a table's means are means of):
    `rvctl report --per-seed FILE` writes them beside the table, so a reader can redo it."""
    rows = []
    for label, group in run_groups(report).items():
        for run in sorted(counted(group), key=lambda r: (r.seed is None, r.seed)):
            entropy = run.history.get(m.ENTROPY_MEAN, {})
            evals = run.history.get(m.EVAL_ACCURACY, {})
            # where a run collapses, how high it climbed first and when ("prosperity before
            # collapse", M2PO): the earliest step of its best evaluation
            # the switch is decided over the first full window: what the run drifted and
            # accepted then (the window's length is the run's own)
            window = int(run.params.get("verify.window", 8))
            peak_step = min(evals, key=lambda step: (-evals[step], step)) if evals else None
            rows.append(
                finite_only(
                    {
                        "group": label,
                        "method": run.method,
                        "seed": run.seed,
                        "run_id": run.run_id,
                        "eval_auc": eval_area(run),
                        "eval_accuracy_before": evals.get(0),
                        "eval_accuracy": run.last(m.EVAL_ACCURACY),
                        "eval_accuracy_peak": evals.get(peak_step),
                        "eval_peak_step": peak_step,
                        "entropy_first": entropy[min(entropy)] if entropy else None,
                        "entropy_last": run.last(m.ENTROPY_MEAN),
                        "entropy_max": max(entropy.values()) if entropy else None,
                        "staleness_mean": run.mean(m.STALENESS_MEAN),
                        "staleness_max": highest(run, m.STALENESS_MAX),
                        "staleness_token_mean": run.mean(m.STALENESS_TOKEN_MEAN),
                        "stale_token_share_8": run.mean(m.STALE_TOKEN_SHARE_8),
                        "mismatch_kl": run.mean(m.MISMATCH_KL),
                        "ops_mean": run.mean(m.OPS_MEAN),
                        "drift_ops": run.mean(m.DRIFT_OPS),  # per version (core/drift.py)
                        "drift_ops_first_window": mean_of_first(run, m.DRIFT_OPS, window),
                        "acceptance_window_min": lowest(run, m.ACCEPTANCE_WINDOW_MEAN),
                        "acceptance_first_window": mean_of_first(run, m.ACCEPTANCE_RATE, window),
                        "verify_ds_mean": run.mean(m.VERIFY_DS),  # verify.ds auto's threshold
                        "switch_step": switch_step(run),
                        "tokens_cut_sequence_stage": run.total(m.TOKENS_CUT_SEQUENCE_STAGE),
                        "tokens_cut_token_stage": run.total(m.TOKENS_CUT_TOKEN_STAGE),
                        "correction_token_share": run.mean(m.CORRECTION_TOKEN_SHARE),
                        # a ratio of 1 (pi_old recomputed, one update a rollout) is never
                        # clipped; the gradient norm is TRL's, before clipping
                        "clip_share_mean": run.mean(m.TRL_CLIP_SHARE),
                        "grad_norm_max": highest(run, m.TRL_GRAD_NORM),
                        "modeled_gpu_days": run.last(m.MODELED_GPU_DAYS),
                    }
                )
            )
    return rows
