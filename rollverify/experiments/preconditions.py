"""Does a setting meet the preconditions of the staleness study (docs/results.md, "A setting
where stale tokens can matter")? Measured, never assumed: what `rvctl preconditions` prints.

1. The starting policy (the config's base model, its sampler): on the held-out set, k samples
   per problem as the run evaluates them, the mean token entropy of the sampled responses
   (nats, the full distribution at each sampled position), the sampled accuracy (avg@k), and
   the response lengths (median, p95, p99, max; p95 / median).
2. With a store: from the study's runs in that MLflow store (finished runs of the config's
   task), per method and seed, the share of trained tokens at least 8 versions old
   (`stale_token_share_8`, mean over steps) and whether grpo stayed stable on every seed
   (the rule is written beside the table in docs/results.md: no evaluation falls more than
   0.10 below the best one before it, and the last is above the first).
3. The growing-length setting's (docs/results.md, "The paper's regime"), from the same runs:
   the median trained length of the last quarter over the first's (each the median over the
   quarter's steps of `response_length_median`), the 95th percentile over the median over the
   last 10% of steps, the versions-behind per trained token (`staleness_token_mean`) of the last
   quarter over the first's, and whether the evaluations still climbed at the end (the mean
   of the last three at least 0.01 above the three before) or plateaued by 80% of the run (the
   best after 80% within 0.01 of the best before).
"""

from __future__ import annotations

import statistics
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rollverify.config.load import with_overrides
from rollverify.infra.hub import model_folder
from rollverify.rollout.trajectory import Trajectory
from rollverify.tasks.base import score_all
from rollverify.training.parts import make_engine, make_task

STABLE_DROP = 0.10  # an evaluation this far below the best before it: grpo was not stable


def quantile(sorted_values: list[int], q: float) -> int:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


@torch.no_grad()
def token_entropies(model, trajectories: list[Trajectory], batch: int = 64) -> torch.Tensor:
    """Entropy (nats) of the model's next-token distribution at every sampled response
    position, concatenated over the trajectories: float [total response tokens]."""
    out = []
    for start in range(0, len(trajectories), batch):
        chunk = trajectories[start : start + batch]
        rows = [torch.cat([t.prompt_ids, t.token_ids]) for t in chunk]
        width = max(len(r) for r in rows)
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        attention = torch.zeros(len(rows), width, dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, : len(row)], attention[i, : len(row)] = row, 1
        logits = model(input_ids=ids, attention_mask=attention).logits.float()
        logp = torch.log_softmax(logits, dim=-1)
        entropy = -(logp.exp() * logp).sum(-1)  # [b, width]: position i predicts token i+1
        for i, t in enumerate(chunk):
            first = len(t.prompt_ids) - 1
            out.append(entropy[i, first : first + len(t.token_ids)])
    return torch.cat(out)


def starting_policy(config) -> dict:
    """Sample the held-out set as an evaluation does (k per problem, its seed) and measure."""
    folder = model_folder(config.model_path(), config.model.revision)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    task = make_task(config, tokenizer)
    problems = task.eval_problems()
    k = config.task.eval_samples
    trajectories = [
        Trajectory(p.prompt_ids, -1 - i, s) for i, p in enumerate(problems) for s in range(k)
    ]
    engine = make_engine(with_overrides(config, {"rollout.engine": "hf"}), model, tokenizer)
    engine.start()
    with engine.seeded(config.task.eval_seed):
        engine.submit(trajectories)
        while engine.has_work:
            engine.poll()
    engine.shutdown()
    rewards = score_all(
        task,
        task.reward_tokens,
        [t.token_ids.tolist() for t in trajectories],
        [problems[-1 - t.group_id].answer for t in trajectories],
    )
    lengths = sorted(len(t.token_ids) for t in trajectories)
    entropy = token_entropies(model, trajectories)
    median = statistics.median(lengths)
    return {
        "model": str(config.model.path),
        "problems": len(problems),
        "samples_per_problem": k,
        "sampled_accuracy": statistics.fmean(rewards),
        "token_entropy_mean": entropy.mean().item(),
        "response_entropy_mean": statistics.fmean(
            e.mean().item()
            for e in torch.split(entropy, [len(t.token_ids) for t in trajectories])
            if len(e)
        ),
        "length_median": median,
        "length_p95": quantile(lengths, 0.95),
        "length_p99": quantile(lengths, 0.99),
        "length_max": lengths[-1],
        "p95_over_median": quantile(lengths, 0.95) / median,
        "truncated_share": sum(n >= config.rollout.max_new_tokens for n in lengths) / len(lengths),
    }


def stable(evaluations: list[float]) -> bool:
    """No evaluation more than STABLE_DROP below the best before it; the last above the first."""
    best = evaluations[0]
    for value in evaluations[1:]:
        if value < best - STABLE_DROP:
            return False
        best = max(best, value)
    return evaluations[-1] > evaluations[0]


def from_store(store: str) -> dict:
    """Per finished run: method, seed, mean stale_token_share_8, its evaluations, stable."""
    import mlflow

    client = mlflow.tracking.MlflowClient(tracking_uri=f"sqlite:///{Path(store).resolve()}")
    runs = []
    for experiment in client.search_experiments():
        for run in client.search_runs([experiment.experiment_id], "attributes.status = 'FINISHED'"):
            params = run.data.params
            if "train.method" not in params or "kind" in run.data.tags:  # a sweep's parent
                continue
            share = [
                m.value for m in client.get_metric_history(run.info.run_id, "stale_token_share_8")
            ]
            evals = sorted(
                (m.step, m.value)
                for m in client.get_metric_history(run.info.run_id, "eval_accuracy")
            )
            values = [v for _, v in evals]
            history = {
                name: {m.step: m.value for m in client.get_metric_history(run.info.run_id, name)}
                for name in GROWTH_METRICS
            }
            runs.append(
                {
                    "run_id": run.info.run_id,
                    "method": params["train.method"],
                    "seed": int(params.get("train.seed", 0)),
                    "learning_rate": float(params.get("train.learning_rate", "nan")),
                    "stale_token_share_8_mean": statistics.fmean(share) if share else None,
                    "stale_token_share_8_max": max(share) if share else None,
                    "evaluations": evals,
                    "stable": stable(values) if len(values) > 1 else None,
                }
                | growth(history, evals)
            )
    return {"runs": runs}


GROWTH_METRICS = ("response_length_median", "response_length_p95", "staleness_token_mean")
CLIMB = 0.01  # the evaluations' rise that counts as still improving, and a plateau's width


def quarter(values: dict[int, float], which: str) -> float | None:
    """The median over the first or last quarter of the steps of a per-step figure."""
    steps = sorted(values)
    if len(steps) < 4:
        return None
    chosen = steps[: len(steps) // 4] if which == "first" else steps[-(len(steps) // 4) :]
    return statistics.median(values[s] for s in chosen)


def ratio(top: float | None, bottom: float | None) -> float | None:
    return top / bottom if top is not None and bottom else None


def growth(history: dict[str, dict[int, float]], evals: list[tuple[int, float]]) -> dict:
    """A run's growth figures (the module's point 3)."""
    median, p95 = history["response_length_median"], history["response_length_p95"]
    stale = history["staleness_token_mean"]
    steps = sorted(set(median) & set(p95))
    end = steps[-max(1, len(steps) // 10) :] if steps else []
    tail = statistics.fmean(p95[s] / median[s] for s in end if median[s]) if end else None
    return {
        "length_growth": ratio(quarter(median, "last"), quarter(median, "first")),
        "p95_over_median_at_end": tail,
        "staleness_growth": ratio(quarter(stale, "last"), quarter(stale, "first")),
        "learning": learning(evals),
    }


def learning(evals: list[tuple[int, float]]) -> str | None:
    """'improving' (still climbing at the end), 'plateaued by 80%' or 'neither' (point 3)."""
    if len(evals) < 6:
        return None
    values = [v for _, v in evals]
    if statistics.fmean(values[-3:]) >= statistics.fmean(values[-6:-3]) + CLIMB:
        return "improving"
    last = evals[-1][0]
    before = [v for s, v in evals if s <= 0.8 * last]
    after = [v for s, v in evals if s > 0.8 * last]
    if before and after and max(after) <= max(before) + CLIMB:
        return "plateaued by 80%"
    return "neither"


def method_rows(runs: list[dict]) -> list[dict]:
    """Per method: seeds, the mean share of trained tokens 8+ versions old, grpo's stability."""
    methods: dict[str, list[dict]] = {}
    for run in runs:
        methods.setdefault(run["method"], []).append(run)
    out = []
    for method, group in sorted(methods.items()):
        shares = [
            r["stale_token_share_8_mean"]
            for r in group
            if r["stale_token_share_8_mean"] is not None
        ]
        stable_seeds = sorted(r["seed"] for r in group if r["stable"])
        out.append(
            {
                "method": method,
                "seeds": str(len(group)),
                "stale_token_share_8 (mean)": f"{statistics.fmean(shares):.4f}" if shares else "-",
                "stable seeds": f"{len(stable_seeds)} of {len(group)} {stable_seeds}",
                "length growth (last/first quarter)": _spread(group, "length_growth"),
                "p95/median at end": _spread(group, "p95_over_median_at_end"),
                "staleness growth": _spread(group, "staleness_growth"),
                "learning": ", ".join(str(r.get("learning")) for r in group),
            }
        )
    return out


def _spread(group: list[dict], key: str) -> str:
    """'mean (lowest-highest)' of a figure over a method's runs."""
    values = [r[key] for r in group if r.get(key) is not None]
    if not values:
        return "-"
    return f"{statistics.fmean(values):.2f} ({min(values):.2f}-{max(values):.2f})"
