"""The named mutants: each breaks one mechanism of the paper (or a failure path the docs
promise), and the tests named with it must then fail (tests/mutants.py runs them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    name: str
    breaks: str  # the mechanism, in words
    path: str  # file, relative to the repository
    original: str  # exact text, found exactly once
    mutated: str
    tests: tuple[str, ...]  # pytest node ids that must fail


FAST_NODE_LOSS = (
    "tests/test_node_loss_fast.py::"
    "test_engines_on_a_lost_node_are_placed_again_or_stop_the_run_and_keep_their_tokens"
)

MUTANTS = [
    Mutant(
        "ratio-denominator",
        "the loss's ratio uses the behavior log-probs (pi/mu), not the current ones (ratio 1)",
        "rollverify/training/trl_adapter.py",
        'output["old_per_token_logps"] = output["sampling_per_token_logps"]',
        "pass",
        ("tests/test_loss_inputs.py::test_the_ratio_is_pi_over_the_behavior_policy_of_each_token",),
    ),
    Mutant(
        "switch-ignored",
        "after the switch the run stops pausing (on-policy for good)",
        "rollverify/training/sync_schedule.py",
        "return self.method.partial and not self.monitor.switched",
        "return self.method.partial",
        (
            "tests/test_switching.py::"
            "test_a_collapsing_acceptance_rate_switches_the_run_to_on_policy_for_good",
        ),
    ),
    Mutant(
        "switch-not-restored",
        "a resumed run keeps the acceptance monitor and its switch",
        "rollverify/training/loop.py",
        'self.monitor.load_state_dict(state["monitor"])',
        "pass",
        (
            "tests/test_switching.py::"
            "test_a_collapsing_acceptance_rate_switches_the_run_to_on_policy_for_good",
        ),
    ),
    Mutant(
        "trl-overrides-dropped",
        "gspo, sapo and vespo train with their own TRL loss",
        "rollverify/training/trl_adapter.py",
        "settings.update(method.trl_overrides)",
        "pass",
        (
            "tests/test_loss_inputs.py::test_the_loss_level_methods_set_their_trl_loss",
            "tests/test_loss_inputs.py::"
            "test_the_loss_level_methods_train_differently_from_partial_and_each_other",
        ),
    ),
    Mutant(
        "filter-env-mask",
        "a dropped sample's tokens are out of the loss (env_mask)",
        "rollverify/training/trl_adapter.py",
        "    if mask_dropped or tool_output:",
        "    if tool_output:",
        (
            "tests/test_loss_inputs.py::"
            "test_a_dropped_sample_gets_no_gradient_and_leaves_the_group_baseline",
        ),
    ),
    Mutant(
        "filter-none-rewards",
        "a dropped sample is out of its group's reward baseline (reward None)",
        "rollverify/training/loop.py",
        "return [r if k else None for r, k in zip(reward, keep, strict=True)]",
        "return reward",
        (
            "tests/test_loss_inputs.py::"
            "test_a_dropped_sample_gets_no_gradient_and_leaves_the_group_baseline",
        ),
    ),
    Mutant(
        "filter-staleness-inverted",
        "the staleness filter drops the stale samples, not the fresh ones",
        "rollverify/core/filters.py",
        "return staleness(versions, mask, current_version) <= bound",
        "return staleness(versions, mask, current_version) > bound",
        ("tests/test_train.py::test_filters_drop_stale_and_off_policy_samples",),
    ),
    Mutant(
        "staleness-cap-boundary",
        "the staleness cap keeps a cached trajectory exactly max_staleness versions old",
        "rollverify/rollout/staleness_cap.py",
        "if staleness_of(t, version) > max_staleness}",
        "if staleness_of(t, version) >= max_staleness}",
        (
            "tests/test_staleness_cap.py::"
            "test_a_trajectory_needing_more_rollouts_than_the_cap_allows_is_starved",
            "tests/test_staleness_cap.py::"
            "test_without_a_cap_or_within_it_every_cached_trajectory_resumes[4]",
        ),
    ),
    Mutant(
        "verify-skipped",
        "rollverify truncates the off-policy suffix of the cache",
        "rollverify/training/cache_check.py",
        "            trajectory.truncate(k)",
        "            pass",
        ("tests/test_train.py::test_rollverify_truncates_when_the_policy_moved",),
    ),
    Mutant(
        "sync-check-ignored",
        "a failed weight-sync check stops the run",
        "rollverify/training/weight_sync.py",
        "if not gap <= tolerance:",
        "if False:",
        ("tests/test_train.py::test_a_failed_weight_sync_check_stops_the_run",),
    ),
    Mutant(
        "second-signal-ignored",
        "a second SIGINT/SIGTERM stops at once",
        "rollverify/training/stopping.py",
        "raise KeyboardInterrupt  # asked twice (or the grace ran out): stop now",
        "return",
        ("tests/test_stopping.py",),
    ),
    Mutant(
        "shared-engine-not-reseeded",
        "compare's runs on a shared engine are the runs `rvctl train` would make",
        "rollverify/training/run.py",
        "with plan.engine.seeded(plan.config.train.seed):  # as if started for this run",
        "if True:",
        (
            "tests/test_orchestration.py::test_compare_runs_every_method_under_one_parent_and_reports_it",
        ),
    ),
    Mutant(
        "math-chat-template-skipped",
        "math prompts go through the model's chat template",
        "rollverify/tasks/math_task.py",
        'if getattr(self.tokenizer, "chat_template", None):',
        "if False:",
        ("tests/test_math_task.py::test_prompts_go_through_the_chat_template",),
    ),
    Mutant(
        "math-order-unseeded",
        "the math task's order depends on the run's seed",
        "rollverify/tasks/math_task.py",
        "random.Random(self.seed * 1_000_003 + epoch).shuffle(order)",
        "random.Random(epoch).shuffle(order)",
        (
            "tests/test_math_task.py::"
            "test_each_epoch_visits_every_problem_once_in_its_own_seeded_order",
        ),
    ),
    Mutant(
        "math-reward-reads-special-tokens",
        "rewards of token ids read the text without special tokens",
        "rollverify/tasks/math_task.py",
        "self.tokenizer.decode(token_ids, skip_special_tokens=True)",
        "self.tokenizer.decode(token_ids)",
        (
            "tests/test_math_task.py::test_rewards_of_token_ids_read_the_text_without_special_tokens",
        ),
    ),
    Mutant(
        "engine-change-refused",
        "a run may resume on another engine",
        "rollverify/training/checkpoint/run_state.py",
        '    "rollout.engine",\n',
        "",
        ("tests/test_vllm_engine.py::test_a_run_resumes_on_another_engine",),
    ),
    Mutant(
        "prepacking-check-ignored",
        "a vLLM sidecar with CPU weight prepacking on refuses to start",
        "rollverify/rollout/engines/vllm_engine.py",
        'refusal = packing_refusal(report["prepacking"], report["vllm_version"])',
        "refusal = None",
        ("tests/test_vllm_engine.py::test_a_sidecar_with_weight_prepacking_on_refuses_to_start",),
    ),
    Mutant(
        "packing-flag-old-home-only",
        "the CPU packing hooks look for vLLM's flag where vLLM 0.34 keeps it (vllm/_cpu_ops.py)",
        "rollverify/rollout/engines/vllm_plugin.py",
        '    "vllm._cpu_ops._supports_onednn",\n',
        "",
        (
            "tests/test_vllm_stack.py::"
            "test_the_hooks_turn_packing_off_where_the_running_vllm_keeps_its_flag",
        ),
    ),
    Mutant(
        "packing-hooks-off-cpu",
        "off a CPU the packing hooks touch nothing",
        "rollverify/rollout/engines/vllm_plugin.py",
        'if os.environ.get(DISABLE_ENV) == "1" or not on_cpu():',
        'if os.environ.get(DISABLE_ENV) == "1":',
        ("tests/test_vllm_stack.py::test_off_a_cpu_the_hooks_touch_nothing",),
    ),
    Mutant(
        "untested-vllm-runs",
        "a vLLM release nobody checked stops the run at preflight",
        "rollverify/training/preflight.py",
        'problem = untested_problem(found) if config.engine() == "vllm" else None',
        "problem = None",
        (
            "tests/test_vllm_stack.py::"
            "test_a_vllm_nobody_checked_stops_the_run_at_preflight_unless_allowed",
        ),
    ),
    Mutant(
        "compat-ignores-keywords",
        "the vLLM compatibility check reports a keyword the release's callable does not take",
        "benchmarks/vllm_compat.py",
        "if unknown and not taken.variadic_keyword:",
        "if False:",
        ("tests/test_vllm_compat.py::test_a_release_that_lacks_a_used_name_is_reported",),
    ),
    Mutant(
        "compat-finds-no-uses-in-annotations",
        "the names used are found through the code's annotations of vLLM types",
        "benchmarks/vllm_uses.py",
        "                self.scope.types[argument.arg] = typed\n",
        "                pass\n",
        ("tests/test_vllm_compat.py::test_the_uses_of_the_code_are_found_in_it",),
    ),
    Mutant(
        "report-output-folder-unread",
        "rvctl report reads a train --output folder: the run folders in it",
        "rollverify/tracking/run_records.py",
        "    if inside:\n        return inside\n",
        "",
        (
            "tests/test_report_folders.py::test_a_train_output_folder_and_its_run_folders_are_reports",
        ),
    ),
    Mutant(
        "frontier-without-baseline-prints-dashes",
        "a frontier or --vs table where nothing pairs stops, naming the runs to make",
        "rvctl/commands/report_study.py",
        "    if len(missing) == len(groups) and not any(paired for _, _, paired, _ in missing):",
        "    if False:",
        (
            "tests/test_report_folders.py::test_a_frontier_without_its_baseline_names_the_runs_to_make",
        ),
    ),
    Mutant(
        "pareto-under-three-pairs",
        "no Pareto mark for a point of fewer than 3 pairs (n<3)",
        "rollverify/experiments/frontier.py",
        '        enough = point["pairs"] >= FEWEST_PAIRS\n',
        '        enough = point["pairs"] >= 1\n',
        (
            "tests/test_report_folders.py::"
            "test_under_three_pairs_no_interval_and_no_pareto_mark_is_claimed",
        ),
    ),
    Mutant(
        "weight-sync-loss-stops-the-run",
        "an engine lost during a collective weight sync is placed again and the sync sent again",
        "rollverify/rollout/engines/vllm_weight_sync.py",
        "            if not lost or tries <= 1:",
        "            if True:",
        (FAST_NODE_LOSS,),
    ),
    Mutant(
        "mixed-weights-stop-without-checkpoint",
        "engines left with mixed weights stop the run after the step's checkpoint",
        "rollverify/training/checkpoint_client.py",
        "            if self.checkpointed_step != step and self.schedule.checkpointed != step:\n"
        "                self.save()\n",
        "",
        (
            "tests/test_resume.py::"
            "test_engines_left_with_mixed_weights_stop_the_run_after_the_steps_checkpoint",
        ),
    ),
    Mutant(
        "engine-lost-rollout-not-paused",
        "an engine lost mid-rollout (vllm.node_lost: stop) leaves its tokens in a checkpoint",
        "rollverify/rollout/schedules.py",
        "    except (StopRequested, EngineLost) as stopped:",
        "    except StopRequested as stopped:",
        (
            "tests/test_resume.py::"
            "test_an_engine_lost_mid_rollout_stops_the_run_with_its_tokens_checkpointed",
        ),
    ),
    Mutant(
        "async-engine-lost-not-paused",
        "asynchronous training in lock-step: an engine lost for good pauses its work into the "
        "checkpoint before the run stops",
        "rollverify/rollout/async_rollout.py",
        "    except (StopRequested, EngineLost) as stopped:",
        "    except StopRequested as stopped:",
        (
            "tests/test_resume.py::"
            "test_an_engine_lost_mid_rollout_stops_the_run_with_its_tokens_checkpointed",
        ),
    ),
    Mutant(
        "engine-thread-lost-raised-at-a-hold",
        "the engine lost in its own thread: a hold (an evaluation's, a checkpoint's) that meets "
        "it pauses the engine's work and goes on, the next batch stops the run",
        "rollverify/rollout/engine_thread.py",
        "        self._pause_lost_engine()  # (an evaluation or a checkpoint met it: "
        "theirs to go on)",
        "",
        (
            "tests/test_engine_thread.py::"
            "test_an_engine_lost_in_its_thread_is_paused_for_the_checkpoint_whatever_call_meets_it",
        ),
    ),
    Mutant(
        "stdout-not-kept-for-results",
        "while a command works, what anything prints to stdout goes to stderr: -f json leaves "
        "one document on stdout (Ray's driver prints a lost node's raylet dump there)",
        "rvctl/output.py",
        "    with contextlib.redirect_stdout(sys.stderr):",
        "    with contextlib.nullcontext():",
        (
            "tests/test_cli.py::test_while_a_command_works_stdout_keeps_only_its_result",
            "tests/test_sweep_node_loss.py::"
            "test_a_sweep_on_the_cluster_survives_losing_a_worker_node",
        ),
    ),
    Mutant(
        "resumed-run-logs-steps-twice",
        "a resumed run trains again the steps after its checkpoint; those the killed process "
        "logged already are not logged again (every metric at every step once)",
        "rollverify/training/run_tracking.py",
        "spool=spool, log_once=True",
        "spool=spool, log_once=False",
        (
            "tests/test_resume.py::"
            "test_killed_at_three_points_and_resumed_ends_like_an_uninterrupted_run",
            "tests/test_sweep_node_loss.py::"
            "test_a_sweep_on_the_cluster_survives_losing_a_worker_node",
        ),
    ),
    Mutant(
        "moved-engine-keeps-two-bundles",
        "an engine placed anywhere after its node's loss moves back to its own bundle once Ray "
        "places that again, and gives back the group it ran in",
        "rollverify/rollout/engines/vllm_engine.py",
        "        self._move_home()  # a sidecar placed anywhere",
        "        pass  # a sidecar placed anywhere",
        (
            "tests/test_node_loss_fast.py::"
            "test_engines_on_a_lost_node_are_placed_again_or_stop_the_run_and_keep_their_tokens",
        ),
    ),
    Mutant(
        "threshold-grid-logs-the-runs-own",
        "each grid point's acceptance is verify() with that point's thresholds, not the run's",
        "rollverify/core/threshold_grid.py",
        '        ds, dt = check_positive_threshold("ds", ds), check_positive_threshold("dt", dt)',
        '        ds, dt = check_positive_threshold("ds", 0.01), '
        'check_positive_threshold("dt", run_dt)',
        (
            "tests/test_threshold_grid.py::test_each_point_keeps_what_verify_with_its_thresholds_keeps",
        ),
    ),
    Mutant(
        "thresholds-regenerated-unweighted",
        "rvctl report --thresholds: the share a point would cut, weighted by the tokens checked",
        "rollverify/experiments/thresholds.py",
        "        cut, total = cut + (1 - rate) * tokens, total + tokens",
        "        cut, total = cut + (1 - rate), total + 1",
        ("tests/test_thresholds_report.py::test_each_point_is_replayed_as_switching_counts_it",),
    ),
    Mutant(
        "margin-two-sided-bound",
        "non-inferiority at a margin: the one-sided 95% bound, not the two-sided interval's end",
        "rollverify/experiments/margin.py",
        "    return float(stdtrit(dof, 0.95))",
        "    return float(stdtrit(dof, 0.975))",
        ("tests/test_margin.py::test_the_bound_is_one_sided_not_the_two_sided_intervals_end",),
    ),
    Mutant(
        "margin-wrong-sign",
        "within the margin means above -M, not above +M",
        "rollverify/experiments/margin.py",
        "    if lower > -margin:",
        "    if lower > margin:",
        ("tests/test_margin.py::test_a_difference_whose_lower_bound_clears_the_margin_is_shown",),
    ),
    Mutant(
        "hang-not-detected",
        "a sidecar that stops answering is taken for dead",
        "rollverify/rollout/engines/vllm_replacement.py",
        "except (RayActorError, GetTimeoutError) as error:",
        "except RayActorError as error:",
        (
            "tests/test_vllm_engine.py::"
            "test_a_dead_or_hung_sidecar_is_replaced_and_its_trajectories_finish[frozen]",
        ),
    ),
    Mutant(
        "restart-cap-removed",
        "a sidecar that keeps dying stops the run after MAX_RESTARTS",
        "rollverify/rollout/engines/vllm_replacement.py",
        "if self.restarts >= MAX_RESTARTS:",
        "if False:",
        ("tests/test_vllm_engine.py::test_the_restart_cap_stops_the_run_with_one_line",),
    ),
    Mutant(
        "engines-ignore-node-resource",
        "each engine's bundle asks for vllm.node_resource, so the engines run on those nodes",
        "rollverify/rollout/engines/ray_runtime.py",
        "if settings.node_resource and not anywhere:",
        "if False:",
        (FAST_NODE_LOSS,),
    ),
    Mutant(
        "node-lost-trajectories-dropped",
        "the trajectories in flight on a dead sidecar wait for its replacement",
        "rollverify/rollout/engines/vllm_replacement.py",
        "self._waiting += [self._inflight.pop(rid)[0] for rid in lost]",
        "self._waiting += [self._inflight.pop(rid)[0] for rid in lost][:0]",
        (FAST_NODE_LOSS,),
    ),
    Mutant(
        "node-loss-replacement-not-retried",
        "a replacement Ray put on the lost node before it knew is tried again once it knows",
        "rollverify/rollout/engines/vllm_replacement.py",
        "if lost is None or node_alive(lost):",
        "if True:",
        ("tests/test_node_loss.py::test_a_lost_engine_node_costs_the_run_nothing[partial]",),
    ),
    Mutant(
        "sweep-lost-trial-not-rerun",
        "a sweep's trial lost with its worker node runs again from its run's checkpoint",
        "rollverify/experiments/lost_trials.py",
        "for _ in range(ROUNDS):",
        "for _ in range(0):",
        (
            "tests/test_sweep_node_loss.py::test_a_sweep_on_the_cluster_survives_losing_a_worker_node",
        ),
    ),
    Mutant(
        "weight-sync-plugin-off",
        "vLLM's CPU weight prepacking is turned off, so synced weights take effect (caught "
        "by the engine's refusal to start: the module's engine fixture errors)",
        "rollverify/rollout/engines/vllm_plugin.py",
        'if os.environ.get(DISABLE_ENV) == "1" or not on_cpu():\n        return',
        "return",
        ("tests/test_vllm_engine.py::test_weight_sync_makes_the_engine_score_like_the_trainer",),
    ),
    Mutant(
        "measurement-as-cost",
        "scoring done only for the logs is booked as the method's verification cost",
        "rollverify/training/booking.py",
        "        ledger.add_measurement(scoring.measure_seconds)",
        '        ledger.add_phase("verify", scoring.measure_seconds)',
        ("tests/test_train.py::test_every_method_trains_end_to_end[partial]",),
    ),
    Mutant(
        "decode-roofline-summed",
        "a decode step costs the larger of its memory and compute times, not their sum",
        "rollverify/cost/costmodel/roofline.py",
        "    return max(memory, compute) + overhead",
        "    return memory + compute + overhead",
        ("tests/test_costmodel.py",),
    ),
    Mutant(
        "sketch-no-regeneration",
        "the simulator counts tokens generated again after a truncation",
        "rollverify/rollout/engines/sketch.py",
        "            self.oldest_version = version\n        return self._regenerated(start)",
        "            self.oldest_version = version\n        return 0",
        (
            "tests/test_simulate.py::"
            "test_acceptance_one_and_zero_bound_rollverify_between_partial_and_grpo",
        ),
    ),
    Mutant(
        "simulate-acceptance-constant",
        "rvctl simulate follows an acceptance curve step by step (--acceptance-from)",
        "rollverify/experiments/simulate_trainer.py",
        "acceptance = settings.acceptance[min(step, len(settings.acceptance)) - 1]",
        "acceptance = settings.acceptance[-1]",
        (
            "tests/test_simulate.py::"
            "test_acceptance_can_follow_a_runs_curve_and_switches_where_the_run_did",
        ),
    ),
    Mutant(
        "simulate-median-constant",
        "rvctl simulate's median response length moves from --lengths' to --end-median",
        "rollverify/experiments/simulate_settings.py",
        "        if self.end_median is None:\n            return self.median",
        "        if True:\n            return self.median",
        (
            "tests/test_simulate.py::"
            "test_each_steps_draws_have_that_steps_median_and_keep_their_length",
        ),
    ),
    Mutant(
        "eval-sets-pooled",
        "eval_accuracy is the mean over eval sets, each weighing the same (not pooled samples)",
        "rollverify/tasks/evaluation.py",
        "return statistics.fmean(score.avg_at_k for score in self.sets.values())",
        "return statistics.fmean(\n"
        "            s.avg_at_k for s in self.sets.values() for _ in range(s.problems)\n"
        "        )",
        (
            "tests/test_evaluation.py::"
            "test_avg_and_pass_at_k_per_set_with_every_sample_in_one_batch",
        ),
    ),
    Mutant(
        "custom-reward-ignored",
        "task.reward replaces the task's reward in training and evaluation",
        "rollverify/tasks/custom_reward.py",
        "    return CustomRewardTask(task, load_reward(spec))",
        "    load_reward(spec)\n    return task",
        (
            "tests/test_custom_reward.py::"
            "test_a_plain_reward_replaces_the_task_reward_in_training_and_evaluation",
        ),
    ),
    Mutant(
        "list-answer-first-only",
        "an answer given as a list accepts any of its answers",
        "rollverify/tasks/rewards/math_answer.py",
        "    answers = [answer] if isinstance(answer, str) else list(answer)",
        "    answers = [answer] if isinstance(answer, str) else list(answer)[:1]",
        (
            "tests/test_data_formats.py::"
            "test_the_reward_reads_the_answer_line_and_any_of_several_answers",
        ),
    ),
    Mutant(
        "killed-at-start-new-mlflow-run",
        "a run killed before its first checkpoint resumes in its own MLflow run",
        "rollverify/training/run_tracking.py",
        "    return json.loads(path.read_text()) if path.is_file() else None",
        "    return None",
        (
            "tests/test_resume.py::"
            "test_killed_at_three_points_and_resumed_ends_like_an_uninterrupted_run",
        ),
    ),
    Mutant(
        "ranks-train-the-whole-batch",
        "each process trains its own slice of the rollout batch",
        "rollverify/training/distributed/world.py",
        "        mine = slice(self.rank * share, (self.rank + 1) * share)",
        "        mine = slice(None)",
        ("tests/test_distributed.py::test_two_processes_with_half_the_batch_each_train_as_one",),
    ),
    Mutant(
        "scoring-not-split",
        "every rank scores an equal part of rank 0's trajectories",
        "rollverify/training/distributed/world.py",
        "        mine = items[self.rank * part : (self.rank + 1) * part]",
        "        mine = items",
        ("tests/test_sharding.py::test_rank_0s_items_are_scored_in_equal_parts_by_every_rank",),
    ),
    Mutant(
        "ranks-write-whole-tensors",
        "each rank of a sharded run writes its own part of each tensor, nothing gathered",
        "rollverify/training/checkpoint/sharded.py",
        '    _write(weights, temporary / f"model{SHARDS}")',
        "    _write({k: v.full_tensor() for k, v in weights.items()},"
        ' temporary / f"model{SHARDS}")',
        (
            "tests/test_sharding.py::"
            "test_each_rank_writes_its_part_and_a_reader_gets_the_state_whole",
        ),
    ),
    Mutant(
        "resume-reads-whole-moments",
        "a sharded run's resume reads each rank's part of AdamW's moments, not the whole",
        "rollverify/training/checkpoint/run_state.py",
        "    parts = isinstance(tensors, ShardedGroup) and is_sharded(model)",
        "    parts = False",
        (
            "tests/test_sharding.py::"
            "test_each_rank_writes_its_part_and_a_reader_gets_the_state_whole",
        ),
    ),
    Mutant(
        "shard-parts-unchecked",
        "rvctl export checks every rank's part of the weights against the manifest",
        "rollverify/training/checkpoint/export.py",
        '    for name in group_files(folder, "model"):',
        '    for name in group_files(folder, "model")[:1]:',
        ("tests/test_sharding.py::test_rvctl_export_puts_a_sharded_checkpoint_together",),
    ),
    Mutant(
        "dead-rank-misnamed",
        "the rank named when a run of several processes fails is the one killed",
        "rollverify/training/launch.py",
        "    return min(killed or candidates, key=lambda item: item[1].timestamp)",
        "    return min(candidates, key=lambda item: item[1].timestamp)",
        ("tests/test_distributed.py::test_the_rank_named_is_the_one_that_failed_first_of_its_own",),
    ),
    Mutant(
        "no-master-weights",
        "with model.dtype bfloat16 the trainer keeps float32 master weights (train.precision)",
        "rollverify/config/run_config.py",
        'return "float32" if self.train.precision == "mixed" else self.model.dtype',
        "return self.model.dtype",
        ("tests/test_precision.py::test_mixed_precision_moves_weights_that_pure_bfloat16_cannot",),
    ),
    Mutant(
        "engine-in-master-dtype",
        "the engines get the compute dtype's weights, not the float32 masters",
        "rollverify/training/weight_sync.py",
        "        yield name, tensor.to(wanted) if tensor.is_floating_point() else tensor",
        "        yield name, tensor",
        ("tests/test_precision.py::test_the_in_process_engine_serves_the_compute_dtype",),
    ),
    Mutant(
        "hf-engine-needs-vllm",
        "a laptop without vLLM trains with the hf engine (nothing imports vllm on its path)",
        "rollverify/training/parts.py",
        "from rollverify.rollout.engines.hf_engine import HFEngine\n",
        "import vllm  # noqa: F401\n\nfrom rollverify.rollout.engines.hf_engine import HFEngine\n",
        ("tests/test_compare_resume.py::test_a_killed_comparison_goes_on_where_it_stopped",),
    ),
    Mutant(
        "grace-ignored",
        "train.stop_grace_seconds: a checkpoint the grace cannot cover is skipped",
        "rollverify/training/checkpoint_client.py",
        "self.stop.seconds_left() > 1.5 * self.checkpoint_seconds + 1",
        "True",
        (
            "tests/test_stopping.py::"
            "test_a_checkpoint_the_grace_cannot_cover_is_skipped_and_the_last_one_resumes",
        ),
    ),
    Mutant(
        "set-null-dropped",
        "--set key=null sets the field to null (not: keep the file's value)",
        "rollverify/config/load.py",
        "        settings[key] = NULL if value is None else value",
        "        settings[key] = value",
        ("tests/test_config_cli.py::test_set_reads_yaml_values_and_null_sets_a_field_to_null",),
    ),
    Mutant(
        "background-checkpoint-not-a-copy",
        "a checkpoint written in the background is a copy the next steps cannot touch",
        "rollverify/training/checkpoint/background_write.py",
        "    return Checkpoint(\n        checkpoint.step,",
        "    return checkpoint\n    return Checkpoint(\n        checkpoint.step,",
        (
            "tests/test_async_checkpoint.py::"
            "test_a_background_checkpoint_holds_its_steps_state_while_training_moves_on",
        ),
    ),
    Mutant(
        "top-k-ignored",
        "rollout.top_k narrows what an engine samples",
        "rollverify/core/sampling.py",
        "        if self.top_k > 0:",
        "        if False:",
        (
            "tests/test_hf_engine.py::"
            "test_truncated_sampling_draws_kept_tokens_with_their_untruncated_logprobs",
        ),
    ),
    Mutant(
        "truncated-logprobs",
        "with truncation, vLLM reports the untruncated softmax's log-probs (raw at temperature 1)",
        "rollverify/core/sampling.py",
        'return "raw_logprobs" if self.temperature == 1 else "processed_logprobs"',
        'return "processed_logprobs"',
        (
            "tests/test_vllm_engine.py::"
            "test_top_k_sampling_draws_kept_tokens_with_their_untruncated_logprobs",
        ),
    ),
    Mutant(
        "tied-groups-kept",
        "dynamic sampling drops the groups whose rewards all tie",
        "rollverify/rollout/dynamic_sampling.py",
        "    return max(rewards) == min(rewards)",
        "    return False",
        ("tests/test_dapo_options.py::test_dynamic_sampling_trains_no_group_of_tied_rewards",),
    ),
    Mutant(
        "ray-on-every-interface",
        "a local Ray listens on loopback only (Ray's single-machine mode)",
        "rollverify/rollout/engines/ray_runtime.py",
        "    constants.ENABLE_RAY_CLUSTER = False  # this process read it when it imported Ray",
        "    pass",
        (
            "tests/test_orchestration.py::test_sweep_on_ray_resumes_without_rerunning_finished_trials",
        ),
    ),
    Mutant(
        "ray-token-in-a-file",
        "a local Ray's token is passed in the environment, not in Ray's world-readable file",
        "rollverify/rollout/engines/ray_runtime.py",
        "        _set_token(_OWN_TOKEN)",
        "        pass",
        (
            "tests/test_orchestration.py::test_sweep_on_ray_resumes_without_rerunning_finished_trials",
        ),
    ),
    Mutant(
        "output-not-probed",
        "a run's output folder is tried (a folder made and removed), not judged by os.access",
        "rollverify/training/preflight.py",
        '        os.rmdir(tempfile.mkdtemp(prefix=".rvctl-check-", dir=existing))',
        "        os.access(existing, os.W_OK)",
        (
            "tests/test_bad_input.py::test_an_output_folder_that_cannot_be_written_is_named",
            "tests/test_cli_fuzz.py::"
            "test_any_wrong_command_line_is_one_line_per_problem_exit_2_nothing_started",
        ),
    ),
    Mutant(
        "usage-errors-boxed",
        "click's usage errors (an unknown option, a wrong type) are one line like the rest",
        "rvctl/app.py",
        "        code = app(standalone_mode=False)",
        "        code = app()",
        (
            "tests/test_cli_fuzz.py::"
            "test_any_wrong_command_line_is_one_line_per_problem_exit_2_nothing_started",
        ),
    ),
    Mutant(
        "grid-points-unchecked",
        "every grid point of a sweep is checked before Ray starts",
        "rollverify/experiments/sweep.py",
        '    points = {f"grid point {point_name(p)}": p for p in grid_points(grid)}',
        "    points = {}",
        ("tests/test_bad_input.py::test_a_sweep_names_each_bad_grid_point_before_ray_starts",),
    ),
    Mutant(
        "pair-failure-unnamed",
        "a run that fails inside a comparison is told as that pair's one line",
        "rollverify/experiments/compare.py",
        "                raise failed from error",
        "                raise",
        ("tests/test_bad_input.py::test_a_run_that_fails_inside_a_comparison_is_its_one_line",),
    ),
    Mutant(
        "trial-failure-unnamed",
        "a failed sweep trial is told by its grid point in one line",
        "rollverify/experiments/sweep.py",
        "        raise failed",
        "        pass",
        (
            "tests/test_orchestration.py::"
            "test_compare_and_sweep_on_a_ray_cluster_run_there_side_by_side",
        ),
    ),
    Mutant(
        "token-mode-left-on",
        "a stopped local Ray gives its process back Ray's usual authentication mode",
        "rollverify/rollout/engines/ray_runtime.py",
        "    if _AUTH_MODE_OURS and os.environ.pop(_AUTH_MODE, None) is not None:",
        "    if False:",
        (
            "tests/test_orchestration.py::"
            "test_a_stopped_local_ray_leaves_the_process_as_a_users_shell",
        ),
    ),
    Mutant(
        "stores-on-every-interface",
        "torchrun's stores of a launched multi-process run listen on loopback only",
        "rollverify/training/launch.py",
        "        with loopback_stores():",
        "        with open(os.devnull):",
        (
            "tests/test_distributed.py::"
            "test_a_stopped_then_killed_run_resumes_to_the_uninterrupted_weights",
        ),
    ),
    Mutant(
        "collective-sync-not-loaded",
        "over the collective, each engine worker loads the tensors it receives",
        "rollverify/rollout/engines/vllm_plugin.py",
        "        model.load_weights(arriving())",
        "        list(arriving())",
        (
            "tests/test_vllm_engine.py::"
            "test_collective_weight_sync_broadcasts_each_tensor_to_the_workers",
            "tests/test_vllm_engine.py::test_each_method_trains_on_the_shared_engine[rollverify]",
        ),
    ),
    Mutant(
        "replacement-without-synced-weights",
        "a replaced sidecar takes the last synced weights, not the base model's",
        "rollverify/rollout/engines/vllm_replacement.py",
        "weights = None if weights_coming else self._restart_weights()",
        "weights = None",
        (
            "tests/test_vllm_engine.py::"
            "test_a_dead_or_hung_sidecar_is_replaced_and_its_trajectories_finish[frozen]",
        ),
    ),
    Mutant(
        "collective-restart-copy-dropped",
        "over the collective, rank 0 can give a replaced sidecar the synced weights again",
        "rollverify/rollout/engines/vllm_weight_sync.py",
        '        if self._source is not None and getattr(self._source, "restartable", True):',
        "        if False:",
        (
            "tests/test_vllm_engine.py::"
            "test_collective_weight_sync_broadcasts_each_tensor_to_the_workers",
        ),
    ),
    Mutant(
        "stream-specs-of-shards",
        "a sharded weight stream announces whole shapes, not its rank's shard's",
        "rollverify/rollout/engines/weight_group.py",
        "tuple(tensor.shape)",
        'tuple(getattr(tensor, "_local_tensor", tensor).shape)',
        (
            "tests/test_sharding.py::"
            "test_the_weight_stream_of_shards_announces_whole_tensors_before_gathering_them",
        ),
    ),
    Mutant(
        "sharded-stream-restartable",
        "rank 0 alone does not claim it can send sharded weights again",
        "rollverify/training/weight_sync.py",
        "        return model is not None and not is_sharded(model)",
        "        return model is not None",
        (
            "tests/test_sharding.py::"
            "test_the_weight_stream_of_shards_announces_whole_tensors_before_gathering_them",
        ),
    ),
    Mutant(
        "weight-group-kept-after-a-replacement",
        "a replaced sidecar joins a new weight group before the next collective sync",
        "rollverify/rollout/engines/vllm_weight_sync.py",
        "        if self._weight_group is not None and self._members == members:",
        "        if self._weight_group is not None:",
        (
            "tests/test_vllm_engine.py::"
            "test_a_dead_or_hung_sidecar_is_replaced_and_its_trajectories_finish[frozen]",
        ),
    ),
    Mutant(
        "stream-keeps-its-model",
        "the stream an engine keeps for a replacement does not keep a finished run's model",
        "rollverify/training/weight_sync.py",
        "self._model, self.dtype = weakref.ref(model), dtype",
        "self._model, self.dtype = (lambda: model), dtype",
        ("tests/test_sharding.py::test_a_weight_stream_does_not_keep_its_model_alive",),
    ),
    Mutant(
        "report-pairs-by-order",
        "rvctl report pairs a method's runs with grpo's by seed, not by their order",
        "rollverify/experiments/report.py",
        "    return _group((r for r in runs if r.finished and r.seed is not None), "
        "lambda r: r.seed)",
        "    return dict(enumerate([r] for r in runs if r.finished and r.seed is not None))",
        ("tests/test_report_pairs.py::test_runs_pair_by_seed_not_by_order",),
    ),
    Mutant(
        "study-pairs-by-order",
        "the study's tables (rvctl report --vs/--table) pair runs by seed, not by their order",
        "rollverify/experiments/run_figures.py",
        "        twin = base.get(run.seed)",
        "        twin = dict(enumerate(base.values())).get(len(diffs))",
        (
            "tests/test_study_tables.py::test_the_dose_response_pairs_each_eta_with_eta_0_seed_by_seed",
            "tests/test_study_tables.py::test_each_method_pairs_with_its_own_run_at_the_baselines_values",
        ),
    ),
    Mutant(
        "study-baseline-any-method",
        "rvctl report --vs verify.dt=2 pairs each method with its own run at dt 2",
        "rollverify/experiments/vs_baseline.py",
        "        wanted = {METHOD: method} | {k: every[k] for k in by} | vs",
        "        wanted = {k: every[k] for k in by} | vs",
        (
            "tests/test_study_tables.py::test_each_method_pairs_with_its_own_run_at_the_baselines_values",
        ),
    ),
    Mutant(
        "frontier-cost-inverted",
        "the frontier's cost axis is the run's modeled GPU-days over its baseline twin's",
        "rollverify/experiments/frontier.py",
        "            ratios.append(mine / theirs)",
        "            ratios.append(theirs / mine)",
        ("tests/test_frontier.py::test_cost_and_gain_pair_each_run_with_its_seeds_baseline_run",),
    ),
    Mutant(
        "frontier-cost-unpaired",
        "the frontier pairs each run's cost with its own seed's baseline run, not by order",
        "rollverify/experiments/frontier.py",
        "        twin = base.get(run.seed)",
        "        twin = list(base.values())[len(ratios) % len(base)]",
        ("tests/test_frontier.py::test_cost_and_gain_pair_each_run_with_its_seeds_baseline_run",),
    ),
    Mutant(
        "groups-merge-settings",
        "runs of one method that differ in a setting set beside a sweep are two groups",
        "rollverify/experiments/vs_baseline.py",
        "    settings = setting_keys(runs, keys)",
        "    settings = []",
        ("tests/test_frontier.py::test_a_setting_set_beside_a_sweep_makes_its_own_point",),
    ),
    Mutant(
        "seed-rows-template-only-from-the-baseline",
        "committed rows' stand-ins take a stored run's config whatever the baseline",
        "benchmarks/frontier_seed_rows.py",
        "    ours = [r for r in stored if r.method == baseline] or stored",
        "    ours = [r for r in stored if r.method == baseline]",
        (
            "tests/test_frontier.py::"
            "test_committed_rows_beside_stored_runs_differ_only_in_what_their_labels_say",
        ),
    ),
    Mutant(
        "pareto-across-baselines",
        "a point is on the Pareto set against the points of its own baseline only",
        "rollverify/experiments/frontier.py",
        'alike = [p for p in placed if p["baseline"] == point["baseline"]]',
        "alike = placed",
        ("tests/test_frontier.py::test_the_pareto_set_is_drawn_against_each_points_own_baseline",),
    ),
    Mutant(
        "baseline-twin-unlike-the-group",
        "where the baseline's runs differ in a setting, a group pairs with the ones like it",
        "rollverify/experiments/vs_baseline.py",
        "        wanted |= {k: every[k] for k in like}",
        "        wanted |= {}",
        (
            "tests/test_frontier.py::test_the_command_prints_writes_and_draws_the_frontier",
            "tests/test_step_size.py",
        ),
    ),
    Mutant(
        "step-size-late-acceptance-after-switch",
        "the window mean at 85% of training counts only runs still verifying then",
        "rollverify/experiments/step_size.py",
        "    if not history or (switched is not None and switched <= target):",
        "    if not history:",
        ("tests/test_step_size.py",),
    ),
    Mutant(
        "judge-ignores-shadowed-builtins",
        "a problem's function named like a builtin (MBPP 126's sum) is the program's in the tests",
        "rollverify/tasks/rewards/judge.py",
        "        self._bind(namespace, (_names_read(tests) | set(shadows)) - trusted)",
        "        self._bind(namespace, _names_read(tests) - trusted)",
        (
            "tests/test_reward_hacks_judge.py::test_a_problems_function_named_like_a_builtin_is_the_programs",
            "tests/test_code_task.py::test_mbpp_names_are_read_and_each_reference_solution_is_run",
        ),
    ),
    Mutant(
        "mbpp-shadows-not-read",
        "the builtins' names a problem takes are read from its reference solution",
        "rollverify/tasks/data/code_problems.py",
        "    unit_tests = dataclasses.replace(unit_tests, shadows=shadows)",
        "    unit_tests = dataclasses.replace(unit_tests, shadows=())",
        ("tests/test_code_task.py::test_mbpp_names_are_read_and_each_reference_solution_is_run",),
    ),
    Mutant(
        "step-size-lowest-counts-partial-windows",
        "the lowest window mean the step-size table reports is over full windows only",
        "rollverify/experiments/step_size.py",
        "    return min((v for s, v in means.items() if s >= full_from), default=None)",
        "    return min(means.values(), default=None)",
        ("tests/test_step_size.py",),
    ),
    Mutant(
        "frontier-pareto-ignores-baseline",
        "a point that costs more than the baseline and gains less is off the Pareto set",
        "rollverify/experiments/frontier.py",
        '        point["pareto"] = on_pareto(point, [baseline, *alike])',
        '        point["pareto"] = on_pareto(point, alike)',
        ("tests/test_frontier.py::test_the_pareto_set_is_what_nothing_beats_on_both_axes",),
    ),
    Mutant(
        "tis-cap-trl-default",
        "tis truncates pi_old/mu at the configured C (2), not TRL's default 3",
        "rollverify/core/corrections.py",
        '"tis": ("token_truncate", None, cfg.tis_cap),',
        '"tis": ("token_truncate", None, 3.0),',
        (
            "tests/test_corrections.py::test_each_token_weight_is_the_published_rule_and_the_loss_applies_it"
            "[tis]",
        ),
    ),
    Mutant(
        "mis-per-token",
        "mis masks whole sequences by their ratio, not single tokens",
        "rollverify/core/corrections.py",
        '"mis": ("sequence_mask", cfg.mis_low, cfg.mis_high),',
        '"mis": ("token_mask", cfg.mis_low, cfg.mis_high),',
        (
            "tests/test_corrections.py::test_each_token_weight_is_the_published_rule_and_the_loss_applies_it"
            "[mis]",
        ),
    ),
    Mutant(
        "icepop-no-lower-bound",
        "icepop masks tokens below its lower bound too",
        "rollverify/core/corrections.py",
        '"icepop": ("token_mask", cfg.icepop_low, cfg.icepop_high),',
        '"icepop": ("token_mask", None, cfg.icepop_high),',
        (
            "tests/test_corrections.py::test_each_token_weight_is_the_published_rule_and_the_loss_applies_it"
            "[icepop]",
        ),
    ),
    Mutant(
        "decoupled-truncates",
        "AReaL's decoupled weight masks a token above the cap (rejection), not truncates it",
        "rollverify/core/corrections.py",
        '"decoupled": ("token_mask", None, cfg.decoupled_cap),',
        '"decoupled": ("token_truncate", None, cfg.decoupled_cap),',
        (
            "tests/test_corrections.py::test_each_token_weight_is_the_published_rule_and_the_loss_applies_it"
            "[decoupled]",
        ),
    ),
    Mutant(
        "opsm-off",
        "opsm sets TRL's off-policy sequence mask",
        "rollverify/core/corrections.py",
        'return off | {"off_policy_mask_threshold": cfg.opsm_delta}',
        "return off",
        ("tests/test_corrections.py::test_opsm_masks_the_drifted_sequence_of_negative_advantage",),
    ),
    Mutant(
        "m2po-mask-dropped",
        "m2po's second-moment mask reaches the token weights",
        "rollverify/training/trl_adapter.py",
        'output["importance_sampling_ratio"] = output["importance_sampling_ratio"] * keep',
        "pass",
        (
            "tests/test_corrections.py::test_each_token_weight_is_the_published_rule_and_the_loss_applies_it"
            "[m2po]",
        ),
    ),
    Mutant(
        "correction-not-in-the-loss",
        "the loss multiplies each token's loss by its correction weight",
        "rollverify/training/trl_adapter.py",
        "with self._mismatch_correction():  # TRL multiplies the token losses by the weight",
        "if True:",
        (
            "tests/test_corrections.py::test_each_token_weight_is_the_published_rule_and_the_loss_applies_it"
            "[tis]",
            "tests/test_corrections.py::test_each_token_weight_is_the_published_rule_and_the_loss_applies_it"
            "[icepop]",
        ),
    ),
    Mutant(
        "recomputed-denominator-ignored",
        "with the recomputed denominator the ratio is pi_theta / pi_old, not pi_theta / mu",
        "rollverify/training/trl_adapter.py",
        'if self.ratio_denominator == "behavior":',
        "if True:",
        (
            "tests/test_corrections.py::test_the_ratio_denominator_is_mu_or_the_recomputed_pi_old"
            "[partial-recomputed-recomputed]",
        ),
    ),
    Mutant(
        "ratio-denominator-setting-ignored",
        "train.ratio_denominator overrides the method's own denominator",
        "rollverify/training/trl_adapter.py",
        "return config.train.ratio_denominator or method.denominator",
        "return method.denominator",
        (
            "tests/test_corrections.py::test_the_ratio_denominator_is_mu_or_the_recomputed_pi_old"
            "[partial-behavior]",
        ),
    ),
    Mutant(
        "correction-on-behavior-denominator",
        "a correction's weight pi_old/mu is refused on the ratio pi_theta/mu (mu counted twice)",
        "rollverify/config/check_links.py",
        'weights = correction is not None and correction != "opsm"  # opsm masks by pi_theta vs mu',
        "weights = False",
        ("tests/test_corrections.py::test_a_correction_refuses_the_behavior_denominator[tis]",),
    ),
    Mutant(
        "correction-share-uncounted",
        "trl/correction/token_share counts the tokens a correction masked",
        "rollverify/core/corrections.py",
        "    changed = weight == 0\n",
        "    changed = weight < 0\n",
        (
            "tests/test_corrections.py::test_each_token_weight_is_the_published_rule_and_the_loss_applies_it"
            "[icepop]",
        ),
    ),
    Mutant(
        "rollout-counts-not-checkpointed",
        "a run stopped in a rollout keeps the step's stale drops through its checkpoint",
        "rollverify/training/checkpoint/run_state.py",
        '**state.get("rollout_counts", {}),',
        "",
        (
            "tests/test_staleness_cap.py::"
            "test_a_run_stopped_in_the_rollout_after_a_stale_drop_still_counts_it",
        ),
    ),
    Mutant(
        "sweep-pairs-across-knobs",
        "in a grid over methods each point is paired with grpo at the same other values",
        "rollverify/experiments/report.py",
        'base = (*values[:i], "grpo", *values[i + 1 :])',
        'base = next(v for v in groups if v[i] == "grpo")',
        (
            "tests/test_report_pairs.py::"
            "test_a_grid_over_methods_pairs_each_point_with_grpo_at_the_same_knob",
        ),
    ),
    Mutant(
        "kv-preempts-oldest",
        "out of KV cache, vLLM preempts the newest running row (not the oldest)",
        "rollverify/rollout/engines/simulated_kv.py",
        "row_id = next(reversed(self._rows))",
        "row_id = next(iter(self._rows))",
        (
            "tests/test_kv_cache.py::test_the_newest_row_is_preempted_and_waits_at_the_front_of_the_queue",
        ),
    ),
    Mutant(
        "kv-admits-while-preempting",
        "a step that preempted admits nothing (vLLM's scheduler)",
        "rollverify/rollout/engines/simulated.py",
        "                    return finished  # vLLM admits nothing in a step that preempted",
        "                    return finished + self._admit()",
        (
            "tests/test_kv_cache.py::test_held_blocks_fit_after_every_poll_and_a_preempting_poll_admits_no_one",
        ),
    ),
    Mutant(
        "kv-blocks-not-rounded-up",
        "a row holds ceil(tokens / block_size) blocks: its last, partly filled block counts",
        "rollverify/cost/kv_cache.py",
        "padding = self.padding[step % self.block_size]",
        "padding = 0",
        ("tests/test_kv_cache.py::test_blocks_held_are_the_sum_of_each_rows_rounded_up_blocks",),
    ),
    Mutant(
        "kv-admission-ignores-memory",
        "a queued row is admitted only if its blocks fit beside the running rows'",
        "rollverify/rollout/engines/simulated_kv.py",
        "if held + blocks_for(context, size) > self.kv_blocks and (admitted or self._rows):",
        "if False:",
        (
            "tests/test_kv_cache.py::test_held_blocks_fit_after_every_poll_and_a_preempting_poll_admits_no_one",
        ),
    ),
    Mutant(
        "prefix-cache-front-drifts",
        "blocks a cache hit took back are skipped by the free queue's front, not evicted twice",
        "rollverify/cost/kv_cache.py",
        "                self._passed += end - start",
        "                pass",
        (
            "tests/test_kv_cache.py::test_blocks_a_cache_hit_took_back_are_skipped_by_the_front_not_evicted_twice",
        ),
    ),
    Mutant(
        "kv-no-profiling-pass",
        "the KV cache gets what the weights and the profiling pass's peak leave",
        "rollverify/cost/kv_cache.py",
        "activations=layer + sampler,",
        "activations=0,",
        (
            "tests/test_kv_cache.py::test_an_engines_kv_tokens_are_what_memory_leaves_after_weights_and_the_profiling_pass",
        ),
    ),
    Mutant(
        "async-admission-ignores-lag",
        "while the engines wait for the newest weights one batch fewer may be in play",
        "rollverify/core/staleness_bound.py",
        "return in_play < (engine_version + eta - version + 1) * batch_groups",
        "return in_play < (eta + 1) * batch_groups",
        (
            "tests/test_async_rollout.py::test_admission_keeps_the_groups_in_play_trainable_by_their_deadlines",
        ),
    ),
    Mutant(
        "async-batch-ignores-deadlines",
        "a batch that would leave groups unable to meet their deadline waits instead",
        "rollverify/core/staleness_bound.py",
        "if due > (start + eta - version) * batch_groups:",
        "if False:",
        (
            "tests/test_async_rollout.py::test_no_trained_token_lags_more_than_eta_and_no_group_is_starved"
            "[3]",
            "tests/test_async_rollout.py::test_the_batch_takes_the_earliest_complete_groups_and_waits_when_deadlines_would_slip",
        ),
    ),
    Mutant(
        "async-update-waits-for-an-event",
        "weights land at the first token boundary after they arrive, not at the next finish",
        "rollverify/rollout/engines/simulated.py",
        "steps = self._steps_until_arrival(self._steps_to_next_event())",
        "steps = self._steps_to_next_event()",
        (
            "tests/test_async_rollout.py::test_tokens_of_one_trajectory_carry_the_versions_that_sampled_them_across_an_update",
        ),
    ),
    Mutant(
        "async-update-relabels-old-tokens",
        "tokens sampled before an in-flight update keep the version that sampled them",
        "rollverify/rollout/engines/simulated.py",
        "            trajectory = self._flush(row)  # what it made so far, under the old weights\n"
        "            row.admitted_at, row.base = self.step + 1, offset + self.step + 1",
        "            trajectory = row.trajectory\n            (offset,)",
        (
            "tests/test_async_rollout.py::test_tokens_of_one_trajectory_carry_the_versions_that_sampled_them_across_an_update",
        ),
    ),
    Mutant(
        "async-kv-recompute-free",
        "recomputing running rows' KV under new weights costs a prefill of their contexts",
        "rollverify/rollout/engines/simulated.py",
        "        if recompute_kv and contexts:",
        "        if False:",
        (
            "tests/test_async_rollout.py::test_recomputing_the_kv_on_an_update_costs_a_prefill_of_every_running_row",
        ),
    ),
    Mutant(
        "gpu-check-train-flops-forward-only",
        "a forward and backward is 3x the forward's FLOPs (Kaplan et al. 2020)",
        "benchmarks/gpu_check.py",
        "backward = [([1.0, 3 * flops(c[1], c[2])], t) for c, t in train]",
        "backward = [([1.0, flops(c[1], c[2])], t) for c, t in train]",
        ("tests/test_gpu_check.py::test_the_achieved_figures_are_what_made_the_timings",),
    ),
    Mutant(
        "profile-efficiency-wrong-peak",
        "the bandwidth efficiency is achieved bytes/s over the GPU's HBM bandwidth",
        "rollverify/cost/costmodel/profile.py",
        'bandwidth=got["bandwidth"] / gpu.bandwidth',
        'bandwidth=got["bandwidth"] / gpu.peak_flops',
        (
            "tests/test_gpu_check.py::test_a_profiles_efficiency_is_what_it_achieved_over_the_gpus_peaks",
        ),
    ),
    Mutant(
        "hf-in-flight-keeps-stale-kv",
        "with recompute_kv the running rows are prefilled again under the new weights",
        "rollverify/rollout/engines/hf_engine.py",
        "        if recompute_kv:\n            self._rows, self._cache = [], None",
        "        if False:\n            self._rows, self._cache = [], None",
        (
            "tests/test_hf_engine.py::test_weights_loaded_in_flight_continue_every_sequence_and_tag_each_token"
            "[True]",
        ),
    ),
    Mutant(
        "hf-in-flight-retags-old-tokens",
        "tokens sampled before an in-flight update keep the old version",
        "rollverify/rollout/engines/hf_engine.py",
        "        running = [self._flush(row) for row in self._rows]",
        "        running = [row.trajectory for row in self._rows]",
        (
            "tests/test_hf_engine.py::test_weights_loaded_in_flight_continue_every_sequence_and_tag_each_token"
            "[False]",
        ),
    ),
    Mutant(
        "async-verify-trains-the-cut",
        "a trajectory verification cut leaves its group until it is regenerated",
        "rollverify/rollout/async_rollout.py",
        "        members[:] = [t for t in members if t is not trajectory]",
        "        pass",
        (
            "tests/test_async_rollout.py::test_the_schedule_regenerates_what_verification_cuts_and_admits_synchronously_after_a_switch",
        ),
    ),
    Mutant(
        "async-switch-keeps-running-ahead",
        "after a switch admission is synchronous (eta 0)",
        "rollverify/rollout/async_rollout.py",
        "admit(engine, source, state, version, admit_eta, batch_groups, group_size)",
        "admit(engine, source, state, version, eta, batch_groups, group_size)",
        (
            "tests/test_async_rollout.py::test_the_schedule_regenerates_what_verification_cuts_and_admits_synchronously_after_a_switch",
        ),
    ),
    Mutant(
        "async-checkpoint-misses-the-engine",
        "a checkpoint of asynchronous training holds the sequences the engine runs or queues",
        "rollverify/training/loop.py",
        "        with self.rollouts.engine_out():  # (a checkpoint's)",
        "        with nullcontext():  # (a checkpoint's)",
        (
            "tests/test_async_training.py::test_no_trained_token_lags_more_than_eta_and_tokens_keep_the_version_that_sampled_them"
            "[2]",
            "tests/test_async_training.py::test_killed_in_generation_and_in_training_resumes_bit_for_bit",
        ),
    ),
    Mutant(
        "async-evaluation-takes-the-sequences",
        "an evaluation between steps leaves the sequences in flight be",
        "rollverify/training/loop.py",
        "            self.rollouts.engine_out(),  # (an evaluation's; the engine is the trainer's "
        "from here)",
        "            nullcontext(),  # (an evaluation's; the engine is the trainer's from here)",
        (
            "tests/test_async_training.py::test_no_trained_token_lags_more_than_eta_and_tokens_keep_the_version_that_sampled_them"
            "[2]",
        ),
    ),
    Mutant(
        "async-no-in-flight-update",
        "in asynchronous training an update reaches the engine between two tokens",
        "rollverify/training/async_schedule.py",
        "        self.engine.load_weights_in_flight(tensors, step, recompute_kv=not keep_kv)",
        "        self.engine.load_weights(tensors, step)",
        (
            "tests/test_async_training.py::test_no_trained_token_lags_more_than_eta_and_tokens_keep_the_version_that_sampled_them"
            "[2]",
        ),
    ),
    Mutant(
        "vllm-update-drops-running",
        "on vLLM an update in flight continues every interrupted sequence under the new weights",
        "rollverify/rollout/engines/vllm_engine.py",
        "        self.submit(running)\n",
        "        pass\n",
        (
            "tests/test_vllm_engine.py::test_weights_land_in_flight_and_each_sequence_continues_under_them",
            "tests/test_vllm_engine.py::test_asynchronous_training_on_vllm_trains_every_group_once_through_a_stop"
            "[False-rollverify]",
        ),
    ),
    Mutant(
        "async-checkpoint-forgets-uncounted-tokens",
        "tokens generated since the last batch and kept by a checkpoint are booked after resume",
        "rollverify/rollout/async_rollout.py",
        "since = tuple(n - b + u for n, b, u in",
        "since = tuple(n - b + 0 * u for n, b, u in",
        (
            "tests/test_vllm_engine.py::test_asynchronous_training_on_vllm_trains_every_group_once_through_a_stop"
            "[True-grpo]",
        ),
    ),
    Mutant(
        "engine-thread-admits-for-the-version-trained",
        "once a batch is out, the engine thread admits for the version the trainer trains next",
        "rollverify/rollout/engine_thread.py",
        "self.version + self._training",
        "self.version",
        (
            "tests/test_engine_thread.py::test_the_engine_thread_generates_beside_the_trainer_within_the_bound",
        ),
    ),
    Mutant(
        "engine-thread-hold-takes-nothing",
        "a checkpoint or an evaluation parks the engine thread and takes its work out",
        "rollverify/rollout/engine_thread.py",
        "        with self._lock:\n            self._take_out_locked()\n        try:",
        "        try:",
        (
            "tests/test_engine_thread.py::test_the_engine_thread_generates_beside_the_trainer_within_the_bound",
        ),
    ),
    Mutant(
        "engine-thread-overlap-unmeasured",
        "the ledger's overlap comes from the engine thread's busy intervals",
        "rollverify/rollout/engine_thread.py",
        "            self._busy.append((started, ended))",
        "            pass",
        (
            "tests/test_engine_thread.py::test_the_engine_thread_generates_beside_the_trainer_within_the_bound",
        ),
    ),
    Mutant(
        "engine-thread-error-swallowed",
        "an error in the engine thread is raised in the trainer's",
        "rollverify/rollout/engine_thread.py",
        "                self._error, self._parked = error, True",
        "                self._parked = True",
        ("tests/test_engine_thread.py::test_an_error_in_the_engine_thread_reaches_the_trainer",),
    ),
    Mutant(
        "ledger-overlap-idle-dropped",
        "an overlapped step books the devices' waiting as idle",
        "rollverify/cost/ledger.py",
        '        self.device_seconds["idle"] += max(0.0, wall * layout.held - booked)',
        "        pass",
        (
            "tests/test_ledger.py::test_an_overlapped_step_books_each_sides_busy_seconds_and_the_rest_as_idle",
            "tests/test_engine_thread.py::test_the_engine_thread_generates_beside_the_trainer_within_the_bound",
        ),
    ),
    Mutant(
        "simulated-engine-one-pending-load",
        "weights sent before the last landed queue up and all land",
        "rollverify/rollout/engines/simulated.py",
        "        self._pending.append((at, version, seconds, recompute_kv))",
        "        self._pending.clear()\n"
        "        self._pending.append((at, version, seconds, recompute_kv))",
        (
            "tests/test_async_rollout.py::test_weights_sent_before_the_last_landed_all_land_in_order",
            "tests/test_async_rollout.py::test_the_bound_holds_and_every_version_lands_under_a_trainer_slower_than_the_engine"
            "[1]",
        ),
    ),
    Mutant(
        "simulated-engine-prefill-finish-keeps-blocks",
        "a row done at its prefill gives its blocks back to the free queue",
        "rollverify/rollout/engines/simulated.py",
        "                self._cached.free(blocks_for(context, self._blocks.block_size))",
        "                pass",
        (
            "tests/test_kv_cache.py::test_a_row_done_at_its_prefill_still_took_blocks_from_the_front_of_the_free_queue",
        ),
    ),
    Mutant(
        "engine-thread-hold-before-the-update",
        "a hold lands the updates on their way before the trainer uses the engine",
        "rollverify/rollout/engine_thread.py",
        "            self._land_weights()\n",
        "",
        (
            "tests/test_engine_thread.py::test_a_hold_lands_the_updates_on_their_way_before_the_engine_is_used",
        ),
    ),
    Mutant(
        "tool-output-as-policy",
        "a tool's output is marked not the policy's: out of the loss, OPS and verification",
        "rollverify/rollout/trajectory.py",
        "torch.full((count,), version), policy=False)",
        "torch.full((count,), version), policy=True)",
        (
            "tests/test_chain_tool.py::"
            "test_rollverify_verifies_cached_trajectories_that_hold_tool_output",
        ),
    ),
    Mutant(
        "tool-calls-not-run-in-training",
        "a run of a task with a tool runs its calls (the engine is wrapped)",
        "rollverify/training/run.py",
        "        with_tools(engine, parts.task, config) as engine,",
        "        nullcontext(engine) as engine,",
        ("tests/test_chain_tool.py::test_every_partial_method_trains_the_tool_task[rollverify]",),
    ),
    Mutant(
        "compiled-returns-late",
        "the compiled engine hands finished trajectories back when their group may be complete",
        "rollverify/rollout/engines/kernel/polls.py",
        "        if count and (ints[WAKE] or idle):",
        "        if count and idle:",
        (
            "tests/test_simulated_compiled.py::test_the_compiled_engine_gives_the_python_engines_results",
        ),
    ),
    Mutant(
        "compiled-stale-finishes-kept",
        "the compiled engine drops preempted rows' finishes when the reference does",
        "rollverify/rollout/engines/kernel/preemption.py",
        "    ints[STALE] += preempted  # their entries in `ends`, dropped when they come up",
        "    ints[STALE] += 0",
        ("tests/test_simulated_compiled.py::test_random_small_engines_give_the_same_rollouts",),
    ),
    Mutant(
        "compiled-prefix-cache-ignored",
        "a preempted row's cached prefix is not recomputed when it returns (compiled)",
        "rollverify/rollout/engines/kernel/admission.py",
        "                found = min(hits * size, context - 1)  # the last is computed",
        "                found = 0",
        (
            "tests/test_simulated_compiled.py::test_the_compiled_engine_gives_the_python_engines_results",
        ),
    ),
    Mutant(
        "compiled-decode-overhead-dropped",
        "the compiled prices add each decode step's fixed overhead, as the roofline does",
        "rollverify/rollout/engines/kernel/prices.py",
        "        + steps * fixed",
        "        + 0 * fixed",
        ("tests/test_simulated_compiled.py::test_the_kernels_prices_are_the_cost_models",),
    ),
    # -- issue 50: the compiled kernel over several files -----------------------------------
    Mutant(
        "compiled-cache-kept-after-a-callee-changed",
        "a compiled function whose callee's file changed is compiled again (numba's cache)",
        "rollverify/infra/numba_cache.py",
        "    if all(_stamp(folder) == digest for folder in folders):",
        "    if True:",
        ("tests/test_numba_cache.py::test_a_changed_callee_in_another_file_is_compiled_again",),
    ),
    Mutant(
        "cost-reads-the-run-config",
        "no part below training/ takes the whole RunConfig (each its own settings)",
        "rollverify/cost/ledger.py",
        "from rollverify.tracking import metric_names as m\n",
        "from rollverify.config import RunConfig  # noqa: F401\n"
        "from rollverify.tracking import metric_names as m\n",
        ("tests/test_layout.py::test_no_part_below_training_reads_the_whole_run_config",),
    ),
    # -- issue 49: rewards the program cannot forge, a sandbox that fails closed -------------
    Mutant(
        "judge-takes-builtins-from-the-program",
        "a builtin the tests check with (len, sorted) becomes the program's",
        "rollverify/tasks/rewards/judge.py",
        "        and not hasattr(builtins, n)",
        "        and True",
        (
            "tests/test_reward_hacks.py::test_replacing_a_builtin_the_tests_check_with_does_not_pass",
        ),
    ),
    Mutant(
        "judge-takes-the-prompts-helpers-from-the-program",
        "the prompt's helpers the tests use (encode_cyclic) become the program's",
        "rollverify/tasks/rewards/judge.py",
        "        trusted = set(namespace) - {entry_point}",
        "        trusted = set()",
        (
            "tests/test_reward_hacks.py::test_replacing_the_prompts_helper_the_tests_use_does_not_pass",
        ),
    ),
    Mutant(
        "judge-spoiled-test-passes",
        "a test that catches the failure of a call without plain data passes",
        "rollverify/tasks/rewards/judge.py",
        '        return f"test {number}: {self.spoiled}" if self.spoiled else None',
        "        return None",
        (
            "tests/test_reward_hacks.py::test_an_exception_the_tests_catch_still_fails_a_call_without_plain_data",
        ),
    ),
    Mutant(
        "tampering-uncounted",
        "the code task does not count the programs the judge caught tampering",
        "rollverify/tasks/code_task.py",
        "            self.reward_checks.tampered()",
        "            pass",
        (
            "tests/test_code_task.py::test_a_program_the_sandbox_fails_to_run_costs_its_reward_not_the_run",
        ),
    ),
    Mutant(
        "sandbox-error-ends-the-run",
        "an error of the sandbox for one program reaches the run (not a reward of 0)",
        "rollverify/tasks/code_task.py",
        "        except Exception as error:  # whatever the sandbox raised for this one program",
        "        except ZeroDivisionError as error:",
        (
            "tests/test_code_task.py::test_a_program_the_sandbox_fails_to_run_costs_its_reward_not_the_run",
        ),
    ),
    Mutant(
        "no-system-call-filter",
        "bubblewrap installs no seccomp filter",
        "rollverify/tools/namespaces.py",
        '    command += ["--die-with-parent", "--as-pid-1", "--new-session", '
        '"--seccomp", str(filter_fd)]',
        '    command += ["--die-with-parent", "--as-pid-1", "--new-session"]',
        ("tests/test_sandbox.py::test_the_system_call_filter_denies_ptrace_and_new_namespaces",),
    ),
    Mutant(
        "sandbox-outlives-its-caller",
        "the sandbox does not die with its caller (no --die-with-parent)",
        "rollverify/tools/namespaces.py",
        '    command += ["--die-with-parent", "--as-pid-1", "--new-session", '
        '"--seccomp", str(filter_fd)]',
        '    command += ["--as-pid-1", "--new-session", "--seccomp", str(filter_fd)]',
        ("tests/test_sandbox.py::test_the_sandbox_dies_with_its_caller",),
    ),
    Mutant(
        "hosts-dev",
        "the program sees the host's /dev",
        "rollverify/tools/namespaces.py",
        '    command = ["--size", str(COVER_BYTES), "--tmpfs", "/dev"]',
        '    command = ["--dev-bind", "/dev", "/dev"]',
        ("tests/test_sandbox.py::test_dev_holds_null_zero_full_and_urandom_only_read_only",),
    ),
    Mutant(
        "memory-per-process",
        "each process gets memory_mb of address space (the sandbox up to processes x memory_mb)",
        "rollverify/tools/sandbox.py",
        '        "RLIMIT_AS": memory_mb * 2**20 // processes,',
        '        "RLIMIT_AS": memory_mb * 2**20,',
        ("tests/test_sandbox.py::test_memory_is_bounded_for_the_whole_sandbox_not_per_process",),
    ),
    Mutant(
        "memory-gate-open",
        "sandboxes start whatever the host's free memory holds",
        "rollverify/tools/host_memory.py",
        "                lambda: self.running == 0 or self.held_mb + memory_mb <= self.budget_mb",
        "                lambda: True",
        ("tests/test_sandbox.py::test_sandboxes_at_once_are_bounded_by_the_memory_budget",),
    ),
    Mutant(
        "launcher-takes-sigint",
        "the launcher handles SIGINT, so a program of its uid can stop it (unprivileged)",
        "rollverify/tools/launcher.py",
        "    signal.signal(signal.SIGINT, signal.SIG_DFL)",
        "    pass",
        (
            "tests/test_unprivileged.py::test_the_sandbox_and_hack_tests_pass_as_an_unprivileged_user",
        ),
    ),
    Mutant(
        "one-uid-for-every-sandbox",
        "as root every sandbox runs as one uid, so their process limits are shared",
        "rollverify/tools/namespaces.py",
        "        uid = OWN_UID_BASE + secrets.randbelow(OWN_UID_RANGE)",
        "        uid = OWN_UID_BASE",
        ("tests/test_sandbox.py::test_a_fork_bomb_does_not_starve_a_concurrent_program",),
    ),
    Mutant(
        "masked-tokens-still-counted",
        "with correction.masked_tokens_in_count false, dapo's count is the kept tokens",
        "rollverify/training/trl_adapter.py",
        'output["num_items_in_batch"] = self.accelerator.gather(kept.sum()).sum()',
        "pass",
        (
            "tests/test_corrections.py::test_a_masked_token_leaves_the_token_count_when_asked[mis]",
            "tests/test_corrections.py::test_a_masked_token_leaves_the_token_count_when_asked"
            "[icepop]",
        ),
    ),
    Mutant(
        "masked-tokens-in-trls-mask",
        "with masked_tokens_in_count false, a masked token is out of TRL's mask (grpo, bnpo)",
        "rollverify/training/trl_adapter.py",
        'inputs["tool_mask"] = kept  # (completion_mask x kept = kept)',
        "pass",
        (
            "tests/test_corrections.py::test_every_loss_type_counts_only_the_kept_tokens_when_asked"
            "[grpo]",
            "tests/test_corrections.py::test_every_loss_type_counts_only_the_kept_tokens_when_asked"
            "[bnpo]",
        ),
    ),
    Mutant(
        "masked-count-refusal-dropped",
        "masked_tokens_in_count false is refused with opsm, whose mask comes after the count",
        "rollverify/config/check_links.py",
        'if correction == "opsm":',
        "if False:",
        (
            "tests/test_corrections.py::test_masked_tokens_out_of_the_count_is_refused_where_there_is_no_count"
            "[opsm]",
        ),
    ),
    Mutant(
        "m2po-scope-ignored",
        "m2po_scope micro_batch ranks each pass's tokens, not the whole batch's",
        "rollverify/training/trl_adapter.py",
        "trainer.m2po_scope = config.correction.m2po_scope",
        "pass",
        ("tests/test_corrections.py::test_m2po_per_micro_batch_masks_what_the_whole_batch_keeps",),
    ),
    Mutant(
        "m2po-pass-unweighted",
        "per micro-batch and out of the count, a pass weighs as its tokens before the mask",
        "rollverify/training/trl_adapter.py",
        'inputs["num_items_in_batch"] = inputs["num_items_in_batch"] * kept.sum() / before',
        "pass",
        (
            "tests/test_corrections.py::test_m2po_per_micro_batch_out_of_the_count_weighs_each_pass_as_areal",
        ),
    ),
    Mutant(
        "m2po-clip-kept",
        "m2po_clip false removes PPO's clip",
        "rollverify/core/corrections.py",
        'clip = unclipped if name == "m2po" and not cfg.m2po_clip else {}',
        "clip = {}",
        (
            "tests/test_corrections.py::test_m2po_without_its_clip_lets_a_ratio_beyond_one_plus_epsilon_count"
            "[False]",
        ),
    ),
    Mutant(
        "report-merges-correction-choices",
        "rvctl report gives each choice of the peers' corrections a row of its own, named",
        "rollverify/experiments/report.py",
        "groups = _group(runs, lambda r: (r.method, correction_choices(r), settings(r)))",
        "groups = _group(runs, lambda r: (r.method, None, settings(r)))",
        (
            "tests/test_report.py::test_a_row_says_which_of_the_peers_correction_choices_its_runs_made",
        ),
    ),
    Mutant(
        "report-merges-settings",
        "rvctl report gives each setting a method's runs differ in (ds=auto beside ds=0.01) a "
        "row of its own, each against grpo at its own values",
        "rollverify/experiments/report.py",
        "groups = _group(runs, lambda r: (r.method, correction_choices(r), settings(r)))",
        "groups = _group(runs, lambda r: (r.method, correction_choices(r), ()))",
        (
            "tests/test_report.py::"
            "test_a_method_at_two_settings_is_two_rows_each_against_grpo_at_its_own",
        ),
    ),
    Mutant(
        "report-split-drops-corrections",
        "each part of a split report table repeats a row's correction choices beside its method",
        "rvctl/commands/report.py",
        'keys = 1 + ("corrections" in rows[0]) + ("settings" in rows[0])',
        'keys = 1 + ("settings" in rows[0])',
        (
            "tests/test_report_cli.py::test_every_split_of_the_table_names_a_rows_correction_choices",
        ),
    ),
    Mutant(
        "sweep-point-run-again",
        "a resumed sweep's trial goes on with its grid point's run (kept if it trained all its "
        "steps, else resumed), never a second run of the point",
        "rollverify/experiments/sweep.py",
        "    run_dir = run_folder_of(Path(config.output), point)",
        "    run_dir = None",
        (
            "tests/test_sweep_stops.py::test_a_point_stopped_at_each_write_of_its_end_is_trained_once",
            "tests/test_sweep_stops.py::"
            "test_a_finished_run_missing_its_summary_is_kept_and_the_summary_rebuilt",
            "tests/test_orchestration.py::test_sweep_on_ray_resumes_without_rerunning_finished_trials",
        ),
    ),
    Mutant(
        "cut-end-trained-again",
        "a run stopped after its last checkpoint, before its summary, is finished from its "
        "records (summary rebuilt), not trained again",
        "rollverify/training/run_end.py",
        '        if found is None or found[0] < found[1]["config"]["train"]["steps"]:',
        "        if True:",
        (
            "tests/test_sweep_stops.py::test_a_point_stopped_at_each_write_of_its_end_is_trained_once",
        ),
    ),
    Mutant(
        "finished-run-left-open",
        "a finished run whose MLflow run a stop left open (RUNNING) is closed: FINISHED",
        "rollverify/training/run_end.py",
        "    _close_mlflow_run(run_dir, summary)\n    return summary",
        "    return summary",
        (
            "tests/test_sweep_stops.py::test_a_point_stopped_at_each_write_of_its_end_is_trained_once",
            "tests/test_sweep_stops.py::"
            "test_a_finished_run_missing_its_summary_is_kept_and_the_summary_rebuilt",
        ),
    ),
    Mutant(
        "report-counts-a-seed-twice",
        "rvctl report counts one finished run per seed in a row; the others as duplicates",
        "rollverify/experiments/run_figures.py",
        "        if not run.finished or run.seed in seen:",
        "        if not run.finished:",
        (
            "tests/test_report.py::test_a_seed_finished_twice_counts_once_and_the_report_says_so",
            "tests/test_report_pairs.py::test_a_seed_finished_twice_pairs_with_grpo_once",
        ),
    ),
    Mutant(
        "orphan-not-awaited",
        "a resumed sweep's trial waits for a trial of the stopped sweep still on its run (a Ray "
        "worker outlives its sweep's process group), then keeps the run it finished",
        "rollverify/experiments/child_runs.py",
        "    wait_for_its_process(run_dir)  # a stopped sweep's trial may still be on it",
        "    pass  # a stopped sweep's trial may still be on it",
        (
            "tests/test_sweep_stops.py::"
            "test_a_trial_waits_for_a_process_still_on_its_run_and_keeps_it",
        ),
    ),
    # -- issue 48: the staleness study's tools ------------------------------------------------
    Mutant(
        "new-store-opened-side-by-side",
        "runs opening a new sqlite store at once each migrate it, one at a time",
        "rollverify/tracking/tracker.py",
        '    if not uri.startswith("sqlite:///"):',
        "    if True:",
        ("tests/test_tracking.py::test_runs_opening_a_new_store_at_once_all_start",),
    ),
    Mutant(
        "cache-measured-when-not-asked",
        "tracking.cache_ops false: the cache of a method that does not verify is not scored",
        "rollverify/training/sync_schedule.py",
        "        if not (self.method.verify or self.tracking.cache_ops):",
        "        if False:",
        (
            "tests/test_train.py::"
            "test_not_measuring_the_cache_changes_no_step_and_logs_no_cache_ops",
        ),
    ),
    Mutant(
        "token-stage-cuts-uncounted",
        "what the token stage cut is counted apart from the sequence stage's",
        "rollverify/training/cache_check.py",
        "    cut_by_tokens = int((policy & (columns < after_sequence[:, None])).sum()) - after",
        "    cut_by_tokens = 0",
        ("tests/test_tool_output.py::test_the_cycle_counts_what_each_stage_cut_in_policy_tokens",),
    ),
    Mutant(
        "async-batches-not-in-start-order",
        "rollout.batch_order start: a batch is the first B groups started, complete or not",
        "rollverify/core/staleness_bound.py",
        "    if in_start_order:",
        "    if False:",
        (
            "tests/test_async_rollout.py::"
            "test_in_start_order_the_batch_is_the_first_groups_started_complete_or_waited_for",
            "tests/test_async_rollout.py::"
            "test_in_start_order_batches_train_groups_as_drawn_and_the_bound_still_holds",
        ),
    ),
    Mutant(
        "token-staleness-per-sample",
        "stale_token_share_8 counts tokens 8+ versions old, not samples",
        "rollverify/core/filters.py",
        "    return behind.mean().item(), (behind >= old).float().mean().item()",
        "    return behind.mean().item(), (behind.max() >= old).float().item()",
        ("tests/test_filters.py::test_token_staleness_counts_each_trained_token_not_each_sample",),
    ),
    Mutant(
        "m2po-tau-not-strict",
        "M2PO drops tokens until the rest's mean m2 is strictly below tau (AReaL's <)",
        "rollverify/core/corrections.py",
        "    below = torch.nonzero(rest_mean < tau)",
        "    below = torch.nonzero(rest_mean <= tau)",
        ("tests/test_corrections.py::test_m2po_keeps_dropping_while_the_rest_equals_tau",),
    ),
    Mutant(
        "engine-thread-trace-taken-beside-it",
        "the trainer takes the engine's trace under the lock the engine thread holds inside it",
        "rollverify/rollout/engine_thread.py",
        "        with self.in_engine:  # (`_trace` is the trainer's alone: holds are its)",
        "        if True:  # (`_trace` is the trainer's alone: holds are its)",
        (
            "tests/test_engine_thread.py::test_the_trace_is_taken_beside_the_engine_thread_one_thread_at_a_time",
            "tests/test_engine_thread.py::test_the_trainer_and_the_engine_thread_are_never_inside_the_engine_at_once",
        ),
    ),
    Mutant(
        "engine-counts-read-beside-its-thread",
        "the trainer reads the engine's counts (restarts, tool calls) under the engine's lock",
        "rollverify/training/async_schedule.py",
        "        return self.thread.in_engine if self.thread is not None else nullcontext()",
        "        return nullcontext()",
        (
            "tests/test_engine_thread.py::test_the_trainer_and_the_engine_thread_are_never_inside_the_engine_at_once",
        ),
    ),
    Mutant(
        "engine-thread-polls-unlocked",
        "the engine thread holds the engine's lock through its step (the load and the poll)",
        "rollverify/rollout/engine_thread.py",
        "        with self.in_engine:  # (not `_lock`: the trainer takes its batches meanwhile)",
        "        if True:  # (not `_lock`: the trainer takes its batches meanwhile)",
        (
            "tests/test_engine_thread.py::test_the_trainer_and_the_engine_thread_are_never_inside_the_engine_at_once",
        ),
    ),
    Mutant(
        "resumed-cache-loses-unfinished",
        "a resumed partial run gets back the unfinished trajectories its checkpoint cached",
        "rollverify/rollout/schedules.py",
        '        self.cache = TrajectoryCache.from_tensors(cache["tensors"], cache["records"])',
        "        self.cache = TrajectoryCache(\n"
        '            [t for t in TrajectoryCache.from_tensors(cache["tensors"], cache["records"])'
        " if t.finished]\n        )",
        (
            "tests/test_vllm_kill.py::test_a_vllm_run_killed_while_its_sidecars_generate_resumes_with_nothing_lost"
            "[partial]",
        ),
    ),
    Mutant(
        "async-resume-loses-one-in-flight",
        "a resumed asynchronous run gets back every trajectory its checkpoint held in flight",
        "rollverify/rollout/async_rollout.py",
        "            in_flight=trajectories[:count],",
        "            in_flight=trajectories[1:count],",
        (
            "tests/test_vllm_kill.py::test_a_vllm_run_killed_while_its_sidecars_generate_resumes_with_nothing_lost"
            "[async]",
        ),
    ),
    Mutant(
        "async-resume-forgets-uncounted-tokens",
        "a resumed asynchronous run books the tokens generated between the last batch and its "
        "checkpoint",
        "rollverify/rollout/async_rollout.py",
        '            uncounted=tuple(extra.get("uncounted", (0, 0))),',
        "            uncounted=(0, 0),",
        (
            "tests/test_async_training.py::test_killed_where_asynchronous_work_is_in_flight_resumes_with_nothing_lost"
            "[weights-in-flight-lockstep]",
            "tests/test_async_training.py::test_killed_where_asynchronous_work_is_in_flight_resumes_with_nothing_lost"
            "[regenerating-lockstep]",
        ),
    ),
    Mutant(
        "async-resume-loses-waiting-members",
        "a resumed asynchronous run gets back the finished members waiting for their groups",
        "rollverify/rollout/async_rollout.py",
        "            restored.finished[trajectory.group_id].append(trajectory)",
        "            pass",
        (
            "tests/test_async_training.py::test_killed_where_asynchronous_work_is_in_flight_resumes_with_nothing_lost"
            "[weights-in-flight-engine-thread]",
            "tests/test_async_training.py::test_killed_where_asynchronous_work_is_in_flight_resumes_with_nothing_lost"
            "[regenerating-engine-thread]",
        ),
    ),
    Mutant(
        "async-switch-ignored",
        "after the switch an asynchronous run admits no group ahead of its policy (eta 0)",
        "rollverify/training/async_schedule.py",
        "        admit_eta = 0 if self.monitor.switched else self.rollout.eta",
        "        admit_eta = self.rollout.eta",
        (
            "tests/test_async_training.py::test_a_collapsing_acceptance_rate_turns_an_asynchronous_run_synchronous",
        ),
    ),
    Mutant(
        "sweep-trials-absolute-model",
        "a sweep's trials keep a shipped model by its name, so they resume after a reinstall",
        "rollverify/experiments/sweep.py",
        '        "output": str(folder.resolve()),',
        '        "model.path": config.model_path(),\n        "output": str(folder.resolve()),',
        (
            "tests/test_sweep_trial_base.py::test_a_shipped_model_keeps_its_name_so_a_moved_install_still_resumes",
        ),
    ),
    Mutant(
        "resume-model-by-path-text",
        "a checkpoint naming the shipped model by this install's absolute path still resumes",
        "rollverify/training/checkpoint/run_state.py",
        '        if name == "model.path" and _one_folder(before[name], after.get(name)):',
        "        if False:",
        (
            "tests/test_sweep_trial_base.py::test_a_checkpoint_naming_the_shipped_model_by_its_absolute_path_still_resumes",
        ),
    ),
    Mutant(
        "per-seed-peak-latest",
        "a run's peak evaluation is dated by its earliest step",
        "rollverify/experiments/seed_rows.py",
        "(-evals[step], step)",
        "(-evals[step], -step)",
        ("tests/test_seed_rows.py::test_a_row_holds_the_best_evaluation_and_its_earliest_step",),
    ),
    # -- issue 63: a graded program sees only what it needs; a judge it cannot crash ---------
    Mutant(
        "sandbox-shows-the-venv-and-the-checkout",
        "the sandbox binds the venv (installed HumanEval) and the project (problem files) too",
        "rollverify/tools/view.py",
        "    paths = {executable, stdlib, *shared_libraries([executable, *extensions])}",
        "    paths = {executable, stdlib, *shared_libraries([executable, *extensions])}\n"
        "    paths |= {os.path.realpath(sys.prefix), str(Path(__file__).parents[2])}",
        (
            "tests/test_sandbox_view.py::test_no_file_the_program_can_see_holds_a_graded_problems_tests",
            "tests/test_reward_hacks_judge.py::"
            "test_a_program_that_reads_its_problems_tests_from_disk_scores_zero",
        ),
    ),
    Mutant(
        "sandbox-shows-site-packages",
        "the standard library's site-packages (an installed package's data) is in the view",
        "rollverify/tools/view.py",
        'COVERED_IN_STDLIB = ("site-packages", "test")',
        'COVERED_IN_STDLIB = ("test",)',
        (
            "tests/test_sandbox_view.py::"
            "test_the_program_sees_the_standard_library_and_nothing_installed_or_of_the_user",
        ),
    ),
    Mutant(
        "retool-packages-undeclared",
        "a ReTool call cannot import the maths packages its task declares",
        "rollverify/tasks/retool.py",
        "            result = run_python(code, **limits, packages=self.packages)",
        "            result = run_python(code, **limits)",
        (
            "tests/test_sandbox_view.py::test_a_retool_call_sees_the_same_view_and_its_declared_packages",
        ),
    ),
    Mutant(
        "control-flow-exception-raised-as-builtin",
        "a StopIteration of the program's is raised in the test as itself (map, filter end)",
        "rollverify/tasks/rewards/judge.py",
        "    if is_exception and kind not in CONTROL_FLOW:",
        "    if is_exception:",
        (
            "tests/test_reward_hacks_judge.py::test_a_control_flow_exception_from_the_program_fails_tests_that_iterate"
            "[StopIteration]",
            "tests/test_reward_hacks_judge.py::test_a_control_flow_exception_from_the_program_fails_tests_that_iterate"
            "[StopAsyncIteration]",
        ),
    ),
    Mutant(
        "keyboard-interrupt-is-an-exit",
        "a KeyboardInterrupt in a call is taken for an exit, not the program's error",
        "rollverify/tasks/rewards/candidate_server.py",
        "    except (Exception, GeneratorExit, KeyboardInterrupt) as error:"
        "  # the judge: its error",
        "    except Exception as error:",
        (
            "tests/test_reward_hacks_judge.py::test_a_control_flow_exception_from_the_program_fails_tests_that_iterate"
            "[KeyboardInterrupt]",
        ),
    ),
    Mutant(
        "decode-lets-other-errors-out",
        "a malformed encoding raises ValueError or OverflowError, not NotPlain",
        "rollverify/tasks/rewards/plain_data.py",
        "    except Exception as error:\n        raise NotPlain(",
        "    except ZeroDivisionError as error:\n        raise NotPlain(",
        (
            "tests/test_reward_hacks_judge.py::test_every_malformed_encoding_is_not_plain_data_never_another_error"
            "[{'bytes': 'zz'}]",
        ),
    ),
    Mutant(
        "judge-crashes-on-a-name-it-cannot-read",
        "a found reply of an unknown shape crashes the judge (nothing counted)",
        "rollverify/tasks/rewards/judge.py",
        "                except Exception as error:  # a reply's fault is the program's",
        "                except ZeroDivisionError as error:",
        (
            "tests/test_reward_hacks_judge.py::test_a_reply_the_judge_cannot_read_scores_zero_and_is_tampering"
            "[a found that is a list]",
        ),
    ),
    Mutant(
        "judge-crashes-on-builtins-replaced-as-a-number",
        "a first message whose list of replaced builtins is a number crashes the judge",
        "rollverify/tasks/rewards/judge.py",
        '        if message.get("ready") is not True or not isinstance(patched, list):',
        '        if message.get("ready") is not True:',
        (
            "tests/test_reward_hacks_judge.py::test_a_reply_the_judge_cannot_read_scores_zero_and_is_tampering"
            "[builtins replaced, as a number]",
        ),
    ),
    Mutant(
        "class-trusted-by-its-module",
        "a class that says __module__ = 'builtins' is not counted as comparing as it likes",
        "rollverify/tasks/rewards/candidate_server.py",
        "        if id(cls) not in standard and any(name in own for name in COMPARISONS):",
        '        if cls.__module__ == "solution" and any(name in own for name in COMPARISONS):',
        (
            "tests/test_reward_hacks_judge.py::test_tampering_is_counted_whatever_the_class_claims_or_the_program_patches"
            "[a class that claims to be a builtin]",
        ),
    ),
    Mutant(
        "server-sends-through-json-dumps",
        "the server's messages go through json.dumps, which the program can patch",
        "rollverify/tasks/rewards/candidate_server.py",
        '        data = (join(encoder(message, 0)) + "\\n").encode()',
        '        data = json.dumps(message, separators=(",", ":")).encode() + b"\\n"',
        (
            "tests/test_reward_hacks_judge.py::test_tampering_is_counted_whatever_the_class_claims_or_the_program_patches"
            "[json.dumps patched to drop the report]",
        ),
    ),
    Mutant(
        "tracing-left-on",
        "a trace function the program set stays on the server (it rewrites the reports)",
        "rollverify/tasks/rewards/candidate_server.py",
        "    found = [_GETTRACE(), _GETPROFILE(), _SETTRACE(None), _SETPROFILE(None)]",
        "    found = [None, None]",
        (
            "tests/test_reward_hacks_judge.py::test_tampering_is_counted_whatever_the_class_claims_or_the_program_patches"
            "[a tracer on the server's send]",
            "tests/test_reward_hacks_judge.py::test_tampering_is_counted_whatever_the_class_claims_or_the_program_patches"
            "[a tracer set in the call]",
        ),
    ),
    Mutant(
        "standard-classes-untrusted",
        "a standard library class that defines comparison (Counter) is not plain data",
        "rollverify/tasks/rewards/candidate_server.py",
        "    standard = _every_class()  # the classes there are before the program runs",
        "    standard = {}",
        (
            "tests/test_reward_hacks_judge.py::test_the_standard_librarys_counter_still_comes_back_as_a_dict",
        ),
    ),
    Mutant(
        "auto-drift-not-per-version",
        "ds/dt auto: the youngest stale tokens' OPS is divided by their age (per-version drift)",
        "rollverify/core/auto_thresholds.py",
        "    return drift / (version - youngest)",
        "    return drift",
        (
            "tests/test_auto_thresholds.py::test_each_vector_gives_its_drift_thresholds_and_kept_lengths",
        ),
    ),
    Mutant(
        "auto-thresholds-not-applied",
        "the cache check cuts at the auto thresholds it computed (not the paper's fixed ones)",
        "rollverify/training/cache_check.py",
        "verify_stages(ops, batch.versions, batch.mask, ds, dt, policy)",
        "verify_stages(ops, batch.versions, batch.mask, 0.01, 2.0, policy)",
        (
            "tests/test_auto_thresholds.py::"
            "test_the_cache_check_applies_auto_thresholds_from_the_new_policys_log_probs",
        ),
    ),
    Mutant(
        "auto-thresholds-not-logged",
        "a run with auto thresholds logs the ones it applied at every step it verified",
        "rollverify/training/records.py",
        "    if cache.auto is not None:  # logged where auto measured something, rather than NaN",
        "    if False:",
        (
            "tests/test_auto_thresholds.py::"
            "test_a_run_with_auto_thresholds_logs_them_at_every_step_it_verified",
        ),
    ),
    Mutant(
        "composition-without-its-mask",
        "rollverify-opsm puts OPSM's mask in the loss on top of RollVerify",
        "rollverify/core/methods.py",
        """            switching=True,
            correction="opsm",""",
        """            switching=True,""",
        (
            "tests/test_corrections.py::"
            "test_rollverify_with_opsm_masks_the_same_sequence_on_the_ratio_over_mu",
        ),
    ),
]
