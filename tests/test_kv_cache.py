"""KV-cache capacity and preemption in the cost model (rollverify/cost/kv_cache.py, the simulated
engine): vLLM's blocks, its choice of whom to preempt, its admission, and what recomputation
costs each method."""

from __future__ import annotations

import random

import torch

from rollverify.config import load_config
from rollverify.config.model_shape import ModelShape
from rollverify.cost import kv_cache
from rollverify.cost.costmodel import GPUS, Layout, Pricing
from rollverify.cost.kv_cache import BlockCount, PrefixCache
from rollverify.experiments.simulate import simulate_one
from rollverify.experiments.simulate_settings import Settings
from rollverify.rollout.engines.simulated import SimulatedEngine
from rollverify.rollout.trajectory import Trajectory
from tests.cli import run_rvctl

QWEN3_8B = ModelShape.of("Qwen/Qwen3-8B-Base")
PRICING = Pricing(QWEN3_8B, GPUS["h100"], Layout("disaggregated", 1))
PAPER = "experiments/qwen3-8b-dapo-math.yaml"


def test_blocks_held_are_the_sum_of_each_rows_rounded_up_blocks():
    rng = random.Random(0)
    for size in (1, 4, 16):
        count, offsets = BlockCount(size), [rng.randint(-50, 200) for _ in range(30)]
        for offset in offsets:
            count.add(offset)
        count.remove(offsets.pop(3))
        for step in range(60, 90):
            brute = sum(-(-(c + step) // size) for c in offsets)
            assert count.blocks_at(step) == brute, (size, step)
        limit = count.blocks_at(75)
        scan = next(t for t in range(60, 200) if count.blocks_at(t) > limit)
        assert count.first_step_over(60, 199, limit) == scan
        assert count.first_step_over(60, scan - 1, limit) is None


def test_an_engines_kv_tokens_are_what_memory_leaves_after_weights_and_the_profiling_pass():
    """Qwen3-8B on an 80 GB H100 at 0.85 (the paper config): by hand."""
    kv = kv_cache.capacity(QWEN3_8B, 80e9, 0.85, max_num_seqs=256)
    weights = QWEN3_8B.parameters * 2
    activations = 2048 * (3 * 12288 + 4096) * 2 + 2 * 4 * 256 * 151936
    per_token = 2 * 36 * 8 * 128 * 2  # K and V, 36 layers, 8 KV heads of 128, bf16
    free = 0.85 * 80e9 - weights - activations
    assert kv.activations == activations and kv.kv_bytes_per_token == per_token
    assert free - 16 * per_token < kv.tokens * per_token <= free
    assert kv.tokens % 16 == 0 and 300_000 < kv.tokens < 400_000
    halves = kv_cache.capacity(QWEN3_8B, 80e9, 0.85, tensor_parallel=2, max_num_seqs=256)
    assert halves.tokens > 2 * kv.tokens  # two GPUs hold one copy of the weights between them


def sketches(count: int, prompt: int = 8) -> list[Trajectory]:
    return [Trajectory(torch.zeros(prompt, dtype=torch.long), i, 0) for i in range(count)]


def engine(kv_tokens, slots=4, length=40, block_size=4, **kwargs) -> SimulatedEngine:
    return SimulatedEngine(
        PRICING, slots, 64, lambda g, i: length + 7 * g, admit_batch=1, kv_tokens=kv_tokens,
        block_size=block_size, **kwargs,
    )  # fmt: skip


def run_until_done(simulated: SimulatedEngine, trajectories) -> list[tuple]:
    simulated.submit(trajectories)
    done = []
    while simulated.has_work:
        done += [(t.group_id, len(t)) for t in simulated.poll()]
    return done


def test_with_memory_to_spare_nothing_changes():
    plain, roomy = engine(None), engine(10**9)
    assert run_until_done(plain, sketches(9)) == run_until_done(roomy, sketches(9))
    assert plain.clock == roomy.clock and plain.stats == roomy.stats
    assert roomy.stats.preemptions == 0 and roomy.stats.tokens_recomputed == 0


def test_less_memory_only_adds_preemptions_and_never_changes_what_is_generated():
    expected = sorted(run_until_done(engine(None), sketches(9)))
    preemptions, clocks = [], []
    for kv_tokens in (400, 300, 240, 200, 160, 120):
        simulated = engine(kv_tokens)
        assert sorted(run_until_done(simulated, sketches(9))) == expected
        preemptions.append(simulated.stats.preemptions)
        clocks.append(simulated.clock)
    assert preemptions[0] == 0 and preemptions[-1] > 0
    assert preemptions == sorted(preemptions), preemptions
    assert clocks[-1] > clocks[0]


def test_the_newest_row_is_preempted_and_waits_at_the_front_of_the_queue():
    """Rows of 8-token prompts, blocks of 4, room for 48 tokens: the fourth row admitted is
    the newest; when the four outgrow the cache it is the one dropped, and it comes back
    before the queue's next trajectory."""
    simulated = engine(48, slots=4, length=30)
    first, later = sketches(4), sketches(6)[4:]
    simulated.submit(first + later)
    seen = []
    while simulated.stats.preemptions == 0:
        seen = list(simulated._queue)
        simulated.poll()
    assert simulated._queue[0] is first[3] and seen[0] is not first[3]
    assert [r.trajectory for r in simulated._rows.values()] == first[:3]
    assert list(simulated._queue)[1:] == later


def test_a_preempted_row_back_at_once_recomputes_only_its_unfinished_block():
    """A full cache of 100 blocks of 4 tokens; each preempted row has 43 tokens: 11 blocks,
    10 of them full (the last is never cached)."""
    cache = PrefixCache(blocks=100)
    cache.keep(key=1, tokens=43, block_size=4)  # 100 held -> 89
    assert cache.hits(1, held=89) == 10  # nothing was allocated since: its prefix is there
    assert cache.hits(1, held=89) is None  # taken back once; back in, 100 held
    cache.keep(key=2, tokens=43, block_size=4)  # 89 held; others then take 5 (94) ...
    cache.free(5)  # ... and a row that finishes frees 5 (89)
    assert cache.hits(2, held=89) == 6  # the 5 taken were its last blocks (freed first)
    cache.keep(key=3, tokens=43, block_size=4)  # 100 held -> 89; others take all 11
    assert cache.hits(3, held=100) == 0  # evicted
    cache.keep(key=4, tokens=43, block_size=4)
    cache.reset()  # new weights: cached KV is stale
    assert cache.hits(4, held=89) is None


def test_blocks_a_cache_hit_took_back_are_skipped_by_the_front_not_evicted_twice():
    """Cycles in a full cache of 100 blocks: a row of 10 full blocks is preempted, others take
    4 blocks (its last 4), another row finishes and frees 4, the row returns: it finds 6
    every time. A front that forgot the blocks taken back would fall behind and find more."""
    cache = PrefixCache(blocks=100)
    for key in range(20):
        cache.keep(key, tokens=40, block_size=4)  # 100 held -> 90; others take 4 -> 94
        cache.free(4)  # -> 90
        assert cache.hits(key, held=90) == 6, key  # back in with 4 new blocks: 100 held


def test_held_blocks_fit_after_every_poll_and_a_preempting_poll_admits_no_one():
    """Random small engines: what the running rows hold never exceeds the cache once a poll
    is done (admission waits for room), and a poll that preempted brought no row in."""
    rng = random.Random(1)
    for case in range(60):
        lengths = {g: rng.randint(3, 40) for g in range(12)}
        simulated = SimulatedEngine(
            PRICING, rng.randint(2, 6), 48, lambda g, i, lengths=lengths: lengths[g], admit_batch=1,
            kv_tokens=rng.randrange(56, 200, 4), block_size=4,
            finishes_per_poll=rng.choice([1, 2]),
        )  # fmt: skip
        prompts = [rng.randint(2, 12) for _ in range(12)]
        simulated.submit(
            [Trajectory(torch.zeros(n, dtype=torch.long), g, 0) for g, n in enumerate(prompts)]
        )
        while simulated.has_work:
            before, preemptions = set(simulated._rows), simulated.stats.preemptions
            simulated.poll()
            assert simulated._blocks.blocks_at(simulated.step) <= simulated.kv_blocks, case
            if simulated.stats.preemptions > preemptions:
                assert set(simulated._rows) <= before, case


def test_grpos_and_partial_rollouts_wide_batches_both_pay_when_memory_is_short():
    """The paper's setting for 2 steps: with memory for a few hundred thousand tokens grpo's
    1,024 rows and partial rollout's full slots both preempt and recompute; at 0.85 only
    the schedule that keeps every slot full does."""
    settings = Settings(methods=("grpo", "partial"), contexts=(8192,), steps=2)
    results = {}
    for utilization in (0.85, 0.3):
        config = load_config(PAPER, {"vllm.gpu_memory_utilization": utilization})
        for method in ("grpo", "partial"):
            results[method, utilization] = simulate_one(config, settings, method, 8192, 0)
    for method in ("grpo", "partial"):
        short = results[method, 0.3]
        assert short.preemptions > 0 and short.tokens_recomputed > 0, method
        assert short.seconds["rollout"] > results[method, 0.85].seconds["rollout"], method
    assert results["grpo", 0.85].preemptions == 0
    assert results["partial", 0.85].preemptions > 0


def test_no_kv_cache_prices_as_before_and_a_context_that_cannot_fit_is_refused(monkeypatch, capsys):
    config = load_config(PAPER)
    settings = Settings(methods=("partial",), contexts=(8192,), steps=2, kv_cache=False)
    assert simulate_one(config, settings, "partial", 8192, 0).preemptions == 0
    done = run_rvctl(
        ["simulate", "--config", PAPER, "--context", "400000", "--steps", "1"], monkeypatch, capsys
    )
    assert done.returncode == 2 and "--context 400000" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_row_done_at_its_prefill_still_took_blocks_from_the_front_of_the_free_queue():
    """Rows whose one token is their prefill's take blocks and give them straight back: the
    allocation moves the free queue's front (it evicts what the front held), as any other's."""
    simulated = engine(10**4, slots=4, length=1)
    prompts = (8, 13, 16)  # 2, 4 and 4 blocks of 4 (prompt + the prefill's token: 9, 14, 17)
    done = run_until_done(
        simulated,
        [Trajectory(torch.zeros(n, dtype=torch.long), 0, i) for i, n in enumerate(prompts)],
    )
    assert [n for _, n in done] == [1, 1, 1] and simulated._blocks.blocks_at(simulated.step) == 0
    assert simulated._cached.front(0) == 2 + 4 + 4
