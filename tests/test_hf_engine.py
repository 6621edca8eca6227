"""The in-process engine: exact log-probs through continuous batching, pause/resume, weights."""

import copy

import pytest
import torch

from rollverify.rollout.engines.batching import length_groups, padded_positions
from rollverify.rollout.engines.hf_engine import HFEngine
from rollverify.rollout.trajectory import Trajectory
from tests.tiny import EOS, PAD, prompts, random_model, teacher_forced_logprobs


def _engine(model, slots=4, max_new_tokens=40, seed=0, temperature=1.0, top_p=1.0, top_k=0):
    return HFEngine(
        model,
        slots=slots,
        max_new_tokens=max_new_tokens,
        eos_token_id=EOS,
        pad_token_id=PAD,
        temperature=temperature,
        seed=seed,
        top_p=top_p,
        top_k=top_k,
    )


def _run(engine):
    finished, most_rows = [], 0
    while engine.has_work:
        finished += engine.poll()
        most_rows = max(most_rows, len(engine._rows))
    return finished, most_rows


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_every_logprob_equals_a_teacher_forced_pass(temperature):
    model = random_model(eos_bias=-1.0)
    engine = _engine(model, slots=3, temperature=temperature)
    trajectories = [Trajectory(p, g, 0) for g, p in enumerate(prompts(9))]
    engine.submit(trajectories)
    finished, most_rows = _run(engine)
    assert sorted(t.key for t in finished) == sorted(t.key for t in trajectories)
    assert most_rows <= 3  # never more rows than slots
    for t in finished:
        expected = teacher_forced_logprobs(model, t, temperature)
        assert torch.allclose(t.behavior_logprobs, expected, atol=1e-5), t.key
        assert t.finish_reason == ("stop" if t.token_ids[-1] == EOS else "length")
        assert (t.versions == 0).all()


@pytest.mark.parametrize("top_p, top_k", [(1.0, 3), (0.4, 0)])
def test_truncated_sampling_draws_kept_tokens_with_their_untruncated_logprobs(top_p, top_k):
    model = random_model(eos_bias=-1.0)
    engine = _engine(model, slots=3, temperature=0.7, top_p=top_p, top_k=top_k)
    engine.submit([Trajectory(p, g, 0) for g, p in enumerate(prompts(9))])
    finished, _ = _run(engine)
    assert sum(len(t) for t in finished) > 200
    for t in finished:
        ids = torch.cat([t.prompt_ids, t.token_ids])[None]
        with torch.no_grad():
            logits = model(ids).logits[0, len(t.prompt_ids) - 1 : -1].float() / 0.7
        probs = torch.softmax(logits, -1)
        chosen = probs.gather(1, t.token_ids[:, None])
        # What the truncation keeps: the top k; the nucleus, whose more likely tokens hold
        # less than top_p (the token that crosses top_p is kept too).
        assert ((probs > chosen).sum(-1) < (top_k or probs.shape[1])).all(), t.key
        assert ((probs * (probs > chosen)).sum(-1) < top_p).all(), t.key
        # The behavior log-prob is the untruncated softmax's, as the trainer scores it.
        expected = teacher_forced_logprobs(model, t, 0.7)
        assert torch.allclose(t.behavior_logprobs, expected, atol=1e-5), t.key


def test_pause_keeps_partial_tokens_and_resume_continues_them():
    model = random_model(eos_bias=-3.0)
    engine = _engine(model, slots=3, max_new_tokens=30, seed=1)
    trajectories = [Trajectory(p, g, 0) for g, p in enumerate(prompts(5, seed=1))]
    engine.submit(trajectories)
    for _ in range(6):
        engine.poll()
    paused = engine.pause()
    assert not engine.has_work and engine.idle_slots() == 3
    assert len(paused) == 5 and all(not t.finished for t in paused)
    assert sorted(len(t) for t in paused) == [0, 0, 6, 6, 6]  # 2 never started: kept, not lost
    prefixes = {t.key: t.token_ids.clone() for t in paused}
    engine.load_weights(model.state_dict().items(), version=1)
    engine.submit(paused)
    finished, _ = _run(engine)
    for t in finished:
        assert torch.equal(t.token_ids[: len(prefixes[t.key])], prefixes[t.key])
        cut = len(prefixes[t.key])
        assert (t.versions[:cut] == 0).all() and (t.versions[cut:] == 1).all()
        assert torch.allclose(t.behavior_logprobs, teacher_forced_logprobs(model, t), atol=1e-5)


def test_new_weights_change_logprobs_and_need_an_idle_engine():
    model = random_model()
    engine = _engine(model, slots=2)
    moved = copy.deepcopy(model)
    with torch.no_grad():
        for parameter in moved.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    engine.submit([Trajectory(prompts(1)[0], 0, 0)])
    with pytest.raises(RuntimeError, match="pause the engine"):
        engine.load_weights(moved.state_dict().items(), version=1)
    engine.pause()
    engine.load_weights(moved.state_dict().items(), version=1)
    t = Trajectory(prompts(1)[0], 0, 0)
    engine.submit([t])
    _run(engine)
    assert torch.allclose(t.behavior_logprobs, teacher_forced_logprobs(moved, t), atol=1e-5)
    assert not torch.allclose(t.behavior_logprobs, teacher_forced_logprobs(model, t), atol=1e-3)
    with pytest.raises(ValueError, match="do not fit"):
        engine.load_weights([("nonsense.weight", torch.zeros(1))], version=2)


def test_seeded_block_leaves_the_training_random_stream_untouched():
    def sample(with_eval: bool):
        engine = _engine(random_model(), slots=2, seed=5)
        if with_eval:
            with engine.seeded(99):
                engine.submit([Trajectory(p, -1, 0) for p in prompts(3, seed=7)])
                _run(engine)
        t = Trajectory(prompts(1, seed=3)[0], 0, 0)
        engine.submit([t])
        _run(engine)
        return t.token_ids

    assert torch.equal(sample(False), sample(True))


def test_a_finished_trajectory_cannot_be_submitted():
    engine = _engine(random_model())
    done = Trajectory(prompts(1)[0], 0, 0, finish_reason="stop")
    with pytest.raises(ValueError, match="finished"):
        engine.submit([done])


def test_a_resumed_batch_of_mixed_lengths_prefills_in_groups_and_stays_exact():
    """Resumed trajectories of 0 to 35 tokens, admitted at once: prefilled in groups and decoded
    in bands of similar length (no row pays for the longest), every log-prob still a
    teacher-forced pass's."""
    model = random_model(eos_bias=-4.0)
    engine = _engine(model, slots=8, max_new_tokens=60, seed=2)
    trajectories = [Trajectory(p, g, 0) for g, p in enumerate(prompts(8, seed=2))]
    engine.submit(trajectories)
    cuts = [0, 1, 3, 8, 15, 22, 30, 35]
    for _ in range(max(cuts)):
        engine.poll()
    paused = sorted(engine.pause(), key=lambda t: t.group_id)
    assert all(not t.finished and len(t) >= max(cuts) for t in paused)
    for trajectory, cut in zip(paused, cuts, strict=True):
        trajectory.truncate(cut)
    engine.load_weights(model.state_dict().items(), version=1)
    engine.take_trace()
    engine.submit(paused)
    finished, bands = [], 0
    while engine.has_work:
        finished += engine.poll()
        bands = max(bands, len(engine._cache.layers[0].sizes) if engine._cache else 0)
    assert bands > 1, "decoded in bands of similar length"
    admission = engine.take_trace()[0]
    lengths = [len(t.prompt_ids) + cut for t, cut in zip(paused, cuts, strict=True)]
    assert admission.prefill_rows == 8 and admission.prefill_tokens == sum(lengths)
    assert admission.prefill_padded < 0.8 * 8 * max(lengths), "grouped, not one padded batch"
    for t in finished:
        assert torch.allclose(t.behavior_logprobs, teacher_forced_logprobs(model, t), atol=1e-5)


def test_length_groups_keep_every_row_once_and_bound_its_padding():
    lengths = [60, 300, 75, 290, 61, 150, 140, 59, 1]
    groups = length_groups(lengths, keep=0.75)
    assert sorted(i for group in groups for i in group) == list(range(len(lengths)))
    for group in groups:
        assert all(lengths[i] >= 0.75 * lengths[group[0]] for i in group)
    firsts = [lengths[group[0]] for group in groups]
    assert firsts == sorted(firsts, reverse=True)
    assert padded_positions(lengths) < len(lengths) * max(lengths) / 2


@pytest.mark.parametrize("recompute_kv", [True, False])
def test_weights_loaded_in_flight_continue_every_sequence_and_tag_each_token(recompute_kv):
    """Asynchronous training on the in-process engine: new weights while rows run. Each token
    keeps the version that sampled it and its behavior log-prob; recomputing the KV makes the
    tokens after the update exactly the new policy's (a teacher-forced pass of the new model),
    keeping the stale KV does not (PipelineRL's choice), while tokens before it stay the old
    policy's either way."""
    old, new = random_model(seed=0, eos_bias=-3.0), random_model(seed=1, eos_bias=-3.0)
    engine = _engine(old, slots=4, max_new_tokens=30)
    trajectories = [Trajectory(p, g, 0) for g, p in enumerate(prompts(4))]
    engine.submit(trajectories)
    for _ in range(6):
        engine.poll()
    engine.load_weights_in_flight(new.state_dict().items(), version=1, recompute_kv=recompute_kv)
    finished, _ = _run(engine)
    assert sorted(t.group_id for t in finished) == [0, 1, 2, 3]
    spanning = [t for t in trajectories if 0 in t.versions and 1 in t.versions]
    assert spanning, "no sequence ran across the update"
    worst_after = 0.0
    for trajectory in spanning:
        versions = trajectory.versions.tolist()
        assert versions == sorted(versions)  # old tokens first, then new
        before = trajectory.versions == 0
        with torch.no_grad():
            under_old = teacher_forced_logprobs(old, trajectory)
            under_new = teacher_forced_logprobs(new, trajectory)
        assert torch.allclose(trajectory.behavior_logprobs[before], under_old[before], atol=1e-4)
        after = ~before
        gap = (trajectory.behavior_logprobs[after] - under_new[after]).abs().max().item()
        worst_after = max(worst_after, gap)
    if recompute_kv:
        assert worst_after < 1e-4
        assert engine.stats.tokens_recomputed_on_update > 0
    else:
        assert worst_after > 1e-3  # the stale KV shows in what the new weights sample
        assert engine.stats.tokens_recomputed_on_update == 0
