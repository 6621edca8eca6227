"""Our one subclass of TRL's GRPOTrainer, and the glue that plugs a training step into it.

TRL owns the GRPO update: rewards -> group advantages -> clipped surrogate -> optimizer step.
We change the ratio's denominator: by default each token's behavior log-prob (the weights that
sampled it, as the engine reported it), so stale tokens look stale to the loss (spec, "Policy-
gradient ratio"); with train.ratio_denominator "recomputed" TRL's own pi_old (the batch scored
before the step's first update), as the peers' partial rollout. And we switch on TRL's
importance-sampling corrections for the peers' methods (rollverify/core/corrections.py), which TRL
applies only when it drives a vLLM itself.

TRL's dataloader still iterates a prompt dataset; the prompts it hands to `rollout_func` are
ignored, because under partial rollout the engine, not the sampler, decides which groups finish
in a step. Our task's prompt stream feeds the engine instead.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from datasets import Dataset
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from rollverify.config import RunConfig
from rollverify.core.corrections import changed_share, kept_tokens, m2po_mask, trl_settings
from rollverify.core.methods import Method
from rollverify.rollout.schedules import RolloutResult
from rollverify.rollout.trajectory import Trajectory
from rollverify.training.checkpoint.files import Checkpoint
from rollverify.training.checkpoint.run_state import load_optimizer_and_scheduler, restore_rng
from rollverify.training.distributed.sharding import FSDP_CONFIG

# TRL imports vLLM as it loads, for its own vLLM generation, which we do not use: our engines
# run vLLM in sidecar processes. Told that vLLM is absent, TRL does not load it in the trainer
# process, which makes `import rollverify.training.run` seconds faster on a CPU. This
# module is the one that imports TRL's trainer; the override comes before it.
importlib.import_module("trl.import_utils").is_vllm_available = lambda min_version=None: False

from trl import GRPOConfig, GRPOTrainer  # noqa: E402


class BehaviorRatioGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose importance ratio is pi_theta / mu_{v_t} for every token (denominator
    "behavior"), or TRL's pi_theta / pi_old ("recomputed"), with the peers' corrections.

    It also resumes from rollverify checkpoints: `train(resume_from_checkpoint=folder)` with
    `resume_from` set reads transformers' trainer_state.json from the folder, and the three
    hooks below restore the rest from safetensors + JSON instead of transformers' pickles.
    """

    resume_from: Checkpoint | None = None
    ratio_denominator: str = "behavior"  # or "recomputed" (train.ratio_denominator)
    m2po_tau: float | None = None  # M2PO's second-moment bound (method m2po)
    m2po_scope: str = "batch"  # or "micro_batch": each pass of the loss (correction.m2po_scope)
    masked_tokens_in_count: bool = True  # (correction.masked_tokens_in_count)

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        pass  # the weights were loaded before the trainer was built: the engine needed them

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        if checkpoint is not None:
            model = self.accelerator.unwrap_model(self.model)
            load_optimizer_and_scheduler(model, self.optimizer, self.lr_scheduler, self.resume_from)

    def _load_rng_state(self, checkpoint: str | None) -> None:
        if checkpoint is not None:
            restore_rng(self.resume_from, rank=self.accelerator.process_index)
            self.resume_from.tensors.clear()  # the last reader: free the checkpoint's memory

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        with self._mismatch_correction():  # TRL: pi_old recomputed, and its weight pi_old/mu
            output = super()._generate_and_score_completions(inputs)
        if self.m2po_tau is not None and self.m2po_scope == "batch":
            self._mask_m2po(output)  # on top of the decoupled weight, over the whole share
        if self.args.vllm_importance_sampling_correction:
            if self.m2po_scope == "batch":  # (else: each pass's, in the loss)
                self._log_changed_share(output)
            if not self.masked_tokens_in_count:  # dapo's count: the kept tokens of every rank
                kept = kept_tokens(output["importance_sampling_ratio"], _loss_mask(output))
                output["num_items_in_batch"] = self.accelerator.gather(kept.sum()).sum()
        if self.ratio_denominator == "behavior":
            # rollout_func's logprobs arrive as sampling_per_token_logps [B, T] (right-padded).
            output["old_per_token_logps"] = output["sampling_per_token_logps"]
        return output

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        if self.args.vllm_importance_sampling_correction:
            inputs = self._pass_corrections(inputs)
        with self._mismatch_correction():  # TRL multiplies the token losses by the weight
            return super()._compute_loss(model, inputs)

    def _mask_m2po(self, output: dict[str, Any]) -> torch.Tensor:
        """M2PO's mask over `output`'s tokens, applied to its weight; returns the weight."""
        keep = m2po_mask(
            output["sampling_per_token_logps"],
            output["old_per_token_logps"],
            _loss_mask(output),
            self.m2po_tau,
        )
        output["importance_sampling_ratio"] = output["importance_sampling_ratio"] * keep
        return output["importance_sampling_ratio"]

    def _pass_corrections(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """One pass's batch as the loss reads it (a copy: TRL keeps the buffered one): M2PO's
        mask over the pass's tokens (m2po_scope micro_batch); with masked_tokens_in_count false,
        the masked tokens out of TRL's mask, the count of every loss_type but dapo (whose count,
        the batch's, left them out before the step), and the pass weighted as AReaL weighs a
        micro-batch: as its tokens before M2PO's mask (dapo's count times kept / before)."""
        per_pass = self.m2po_tau is not None and self.m2po_scope == "micro_batch"
        if not per_pass and self.masked_tokens_in_count:
            return inputs
        inputs, mask = dict(inputs), _loss_mask(inputs)
        before = kept_tokens(inputs["importance_sampling_ratio"], mask).sum()
        if per_pass:
            weight = self._mask_m2po(inputs)
            self._record_share(*changed_share(weight, mask, None, None))
        if self.masked_tokens_in_count:
            return inputs
        kept = kept_tokens(inputs["importance_sampling_ratio"], mask)
        inputs["tool_mask"] = kept  # (completion_mask x kept = kept)
        if before > 0:
            inputs["num_items_in_batch"] = inputs["num_items_in_batch"] * kept.sum() / before
        return inputs

    @contextmanager
    def _mismatch_correction(self) -> Iterator[None]:
        """TRL 1.16 applies `vllm_importance_sampling_*` only when it drives a vLLM itself
        (use_vllm); our engines feed it through rollout_func, and their log-probs are mu all the
        same. The flag is on for the two calls that read it for the correction, and TRL's own
        weight sync to its (absent) vLLM is skipped: ours syncs the engines."""
        if not self.args.vllm_importance_sampling_correction:
            yield
            return
        self.use_vllm, self._last_loaded_step = True, self.state.global_step
        try:
            yield
        finally:
            self.use_vllm = False

    def get_off_policy_mask(self, advantages, per_token_logps, sampling_per_token_logps, mask,
                            off_policy_threshold):  # fmt: skip
        """TRL's OPSM mask (B, 1), and the share of the pass's tokens it masked."""
        keep = super().get_off_policy_mask(
            advantages, per_token_logps, sampling_per_token_logps, mask, off_policy_threshold
        )
        self._record_share(float((mask * (1 - keep)).sum()), float(mask.sum()))
        return keep

    def _log_changed_share(self, output: dict[str, Any]) -> None:
        """The share of tokens whose weight pi_old/mu TRL truncated or masked (M2PO's too)."""
        truncating = self.args.vllm_importance_sampling_mode.endswith("truncate")
        args = self.args
        bounds = (
            (args.vllm_importance_sampling_clip_min, args.vllm_importance_sampling_clip_max)
            if truncating
            else (None, None)
        )
        mask = _loss_mask(output)
        self._record_share(*changed_share(output["importance_sampling_ratio"], mask, *bounds))

    def _record_share(self, changed: float, tokens: float) -> None:
        """trl/correction/token_share: over every rank's tokens (a collective)."""
        device = self.accelerator.device
        totals = self.accelerator.reduce(torch.tensor([changed, tokens], device=device), "sum")
        mode = "train" if self.model.training else "eval"
        share = (totals[0] / totals[1].clamp(min=1.0)).item()
        self._metrics[mode]["correction/token_share"].append(share)

    @torch.no_grad()
    def current_logprobs(
        self, trajectories: list[Trajectory], batch_size: int | None = None
    ) -> torch.Tensor:
        """log pi_theta of each generated token under the current weights: float [B, T].

        Same layout and code path as the loss (left-padded prompts, right-padded completions,
        TRL's fused log-prob head), so the numbers are the loss's own.
        """
        prompts = [t.prompt_ids for t in trajectories]
        completions = [t.token_ids for t in trajectories]
        pad = self.processing_class.pad_token_id
        prompt_width = max(len(p) for p in prompts)
        width = max(len(c) for c in completions)
        input_ids = torch.full((len(trajectories), prompt_width + width), pad, dtype=torch.long)
        attention = torch.zeros_like(input_ids)
        for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
            input_ids[i, prompt_width - len(prompt) : prompt_width] = prompt
            input_ids[i, prompt_width : prompt_width + len(completion)] = completion
            attention[i, prompt_width - len(prompt) : prompt_width + len(completion)] = 1
        device = self.accelerator.device
        was_training = self.model.training
        self.model.eval()  # no dropout: verification must not be random
        try:
            logps, _, _ = self._get_per_token_logps_and_entropies(
                self.model,
                input_ids.to(device),
                attention.to(device),
                width,
                # in passes of the training's own micro-batch: what fits for the loss fits here
                batch_size=batch_size or self.args.per_device_train_batch_size,
            )
        finally:
            self.model.train(was_training)
        return logps.float().cpu()


def _loss_mask(output: dict[str, Any]) -> torch.Tensor:
    """The tokens in the loss, as TRL masks them: completion_mask x tool_mask (env_mask)."""
    mask = output["completion_mask"]
    return mask if "tool_mask" not in output else mask * output["tool_mask"]


def rollout_output(result: RolloutResult, keep: torch.Tensor, mask_dropped: bool) -> dict:
    """The batch as TRL's rollout_func returns it: token ids, behavior log-probs, and the
    columns our reward function reads (answer, keep). env_mask (TRL's tool mask) is 0 on the
    tokens out of the loss: a tool's output, and with mask_dropped every token of the samples a
    filter dropped (beside their reward None)."""
    trajectories = list(result.trajectories())
    answers = [a for a, group in zip(result.answers, result.groups, strict=True) for _ in group]
    output: dict[str, list] = {
        "prompt_ids": [t.prompt_ids.tolist() for t in trajectories],
        "completion_ids": [t.token_ids.tolist() for t in trajectories],
        "logprobs": [t.behavior_logprobs.tolist() for t in trajectories],
        "answer": answers,
        "keep": keep.tolist(),
    }
    tool_output = any(t.policy is not None for t in trajectories)
    if mask_dropped or tool_output:  # TRL's tool mask: 0 keeps a token out of the loss
        output["env_mask"] = [
            (t.policy_mask() & bool(k)).int().tolist()
            for k, t in zip(keep.tolist(), trajectories, strict=True)
        ]
    return output


def grpo_config(config: RunConfig, method: Method, output_dir: str) -> GRPOConfig:
    """TRL's config: what rvctl sets (grpo_arguments), with train.trl_args over it (checked at
    load to name none that rvctl must set itself: config/passthrough.py)."""
    return GRPOConfig(**(grpo_arguments(config, method, output_dir) | config.train.trl_args))


def grpo_arguments(config: RunConfig, method: Method, output_dir: str) -> dict[str, Any]:
    """GRPOConfig's arguments from our config: a rollout of B*G completions per
    train.updates_per_rollout optimizer steps, each step's sequences shared by train.processes
    processes, each share accumulated in passes of train.micro_batch_size."""
    train, rollout = config.train, config.rollout
    step_batch = rollout.batch_groups * rollout.group_size // train.updates_per_rollout
    share = step_batch // train.processes
    micro = train.micro_batch_size or share
    accumulated = share // micro
    settings: dict[str, Any] = {
        "loss_type": train.loss_type,
        "epsilon": train.epsilon,
        "epsilon_high": train.epsilon_high,
    }
    settings.update(method.trl_overrides)  # loss-level methods (gspo, sapo, vespo)
    settings.update(trl_settings(method.correction, config.correction))  # the peers' corrections
    checkpointing = train.gradient_checkpointing
    if train.sharding == "fsdp":  # parameters, gradients and AdamW state sharded
        # FSDP's own activation checkpointing (transformers refuses both; the Trainer's would
        # gather each layer's weights once more in the backward).
        fsdp_config = dict(FSDP_CONFIG, activation_checkpointing=checkpointing)
        settings.update(fsdp=True, fsdp_config=fsdp_config)
        checkpointing = False
    on_gpu = torch.cuda.is_available()
    return dict(
        output_dir=output_dir,
        max_steps=train.steps,
        # A rollout batch of B x G sequences per updates_per_rollout optimizer steps, each
        # process training its share in passes of micro_batch_size: TRL generates once per
        # steps_per_generation passes (per_device x processes x steps_per_generation = B x G).
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=accumulated,
        steps_per_generation=accumulated * train.updates_per_rollout,
        num_generations=rollout.group_size,
        max_completion_length=rollout.max_new_tokens,
        temperature=rollout.temperature,
        top_p=rollout.top_p,  # (TRL's generation settings: ours are the engines', these say so)
        top_k=rollout.top_k,
        learning_rate=train.learning_rate,
        lr_scheduler_type="constant_with_warmup",
        warmup_steps=train.warmup_steps,
        weight_decay=train.weight_decay,
        mask_truncated_completions=train.mask_truncated,
        max_grad_norm=train.max_grad_norm,
        beta=train.beta,
        seed=train.seed,
        logging_steps=1,
        save_strategy="no",
        report_to=list(config.tracking.report_to) or "none",  # beside rvctl's MLflow
        disable_tqdm=True,
        # bf16 compute over the weights' own dtype: accelerate runs the model's forward under
        # autocast (float32 masters with train.precision mixed, bfloat16 ones with pure).
        bf16=config.model.dtype == "bfloat16",
        use_cpu=not on_gpu,
        gradient_checkpointing=checkpointing,  # (TRL's default: on)
        dataloader_num_workers=0,
        ddp_find_unused_parameters=False,  # every parameter gets a gradient every step
        **settings,
    )


def build_trainer(
    config: RunConfig,
    method: Method,
    model: torch.nn.Module,
    tokenizer: Any,
    reward: Callable[..., list[float | None]],
    rollout_func: Callable[[list, Any], dict],
    callback: TrainerCallback,
    output_dir: str,
) -> BehaviorRatioGRPOTrainer:
    # Placeholder prompts only: TRL's sampler needs a dataset; see the module docstring.
    placeholder = Dataset.from_dict({"prompt": [""] * config.rollout.batch_groups})
    trainer = BehaviorRatioGRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=grpo_config(config, method, output_dir),
        train_dataset=placeholder,
        processing_class=tokenizer,
        rollout_func=rollout_func,
        callbacks=[callback],
    )
    for printer in (PrinterCallback, ProgressCallback):  # rvctl shows progress, not TRL
        trainer.remove_callback(printer)
    trainer.ratio_denominator = ratio_denominator(config, method)
    if method.correction == "m2po":
        trainer.m2po_tau = config.correction.m2po_tau
        trainer.m2po_scope = config.correction.m2po_scope
    trainer.masked_tokens_in_count = config.correction.masked_tokens_in_count
    return trainer


def ratio_denominator(config: RunConfig, method: Method) -> str:
    """train.ratio_denominator, else the method's own."""
    return config.train.ratio_denominator or method.denominator
