"""Trajectory records and the partial-rollout cache: growth, truncation, padding, files."""

import json
import math

import pytest
import torch

from rollverify.core.off_policy_shift import token_ops
from rollverify.core.verify import verify
from rollverify.rollout.trajectory import PaddedTrajectories, Trajectory, TrajectoryCache


def _trajectory(group, sample, chunks, prompt=(5, 6, 7), finish_reason=None):
    """A trajectory grown chunk by chunk, each chunk (tokens, logprobs, version)."""
    t = Trajectory(torch.tensor(prompt), group, sample)
    for tokens, logprobs, version in chunks:
        t.extend(tokens, logprobs, version)
    t.finish_reason = finish_reason
    return t


def test_extend_stamps_each_chunk_with_its_version_and_truncate_unfinishes():
    t = _trajectory(3, 1, [([1, 2], [-0.5, -1.0], 4), ([3], [-2.0], 6)], finish_reason="stop")
    assert t.versions.tolist() == [4, 4, 6] and t.token_ids.tolist() == [1, 2, 3]
    assert t.finished
    assert t.truncate(1) == 2
    assert (t.token_ids.tolist(), t.behavior_logprobs.tolist(), t.versions.tolist()) == (
        [1],
        [-0.5],
        [4],
    )
    assert not t.finished  # what was cut must be regenerated
    with pytest.raises(ValueError, match=r"kept=2 must be in \[0, 1\]"):
        t.truncate(2)


def test_mismatched_fields_and_reasons_are_refused():
    with pytest.raises(ValueError, match="one length"):
        Trajectory(torch.tensor([1]), 0, 0, torch.tensor([1, 2]), torch.zeros(1), torch.zeros(2))
    with pytest.raises(ValueError, match="finish_reason='eos'"):
        Trajectory(torch.tensor([1]), 0, 0, finish_reason="eos")
    with pytest.raises(ValueError, match="2 tokens but 1 log-probs"):
        Trajectory(torch.tensor([1]), 0, 0).extend([1, 2], [0.0], 0)


def test_padded_batch_feeds_ops_and_verify():
    stale = _trajectory(0, 0, [([1, 2, 3], [-1.0, -1.0, -1.0], 1), ([4], [-1.0], 2)])
    fresh = _trajectory(0, 1, [([9], [-0.5], 2)])
    batch = PaddedTrajectories.of([stale, fresh])
    assert batch.mask.tolist() == [[True] * 4, [True, False, False, False]]
    assert batch.versions[1].tolist() == [2, -1, -1, -1]  # the documented padding
    assert batch.behavior_logprobs[1].tolist() == [-0.5, 0.0, 0.0, 0.0]
    # the current policy moved on version 1's tokens only
    current = batch.behavior_logprobs.clone()
    current[0, :3] += 0.5
    ops = token_ops(current, batch.behavior_logprobs, mask=batch.mask)
    assert verify(ops, batch.versions, batch.mask, ds=0.01, dt=2.0).tolist() == [0, 1]
    empty = PaddedTrajectories.of([])
    assert empty.mask.shape == (0, 0)


def test_cache_is_fifo_and_refuses_duplicates():
    cache = TrajectoryCache()
    for group, sample in [(2, 0), (0, 1), (1, 0)]:
        cache.add(_trajectory(group, sample, []))
    assert [t.key for t in cache] == [(2, 0), (0, 1), (1, 0)]
    with pytest.raises(ValueError, match=r"\(0, 1\) is already cached"):
        cache.add(_trajectory(0, 1, []))
    assert cache.pop((0, 1)).key == (0, 1) and (0, 1) not in cache
    assert [t.key for t in cache.take_all()] == [(2, 0), (1, 0)] and len(cache) == 0


def test_cache_round_trips_through_safetensors_exactly(tmp_path):
    cache = TrajectoryCache(
        [
            _trajectory(7, 0, [([1, 2], [-0.25, -1e-8], 3), ([3], [-7.5], 5)]),
            _trajectory(7, 1, [], prompt=(1,)),  # paused before its first token
            _trajectory(8, 0, [([4] * 100, [-0.1] * 100, 6)], finish_reason="length"),
        ]
    )
    path = tmp_path / "cache.safetensors"
    cache.save(path)
    loaded = TrajectoryCache.load(path)
    assert [t.key for t in loaded] == [t.key for t in cache]
    for a, b in zip(cache, loaded, strict=True):
        assert a.finish_reason == b.finish_reason
        for name in ("prompt_ids", "token_ids", "behavior_logprobs", "versions"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert loaded.num_tokens == 103
    assert [p.name for p in tmp_path.iterdir()] == ["cache.safetensors"]  # no temp file left


def test_cache_file_is_safetensors_with_a_json_header_and_no_pickle(tmp_path):
    path = tmp_path / "cache.safetensors"
    TrajectoryCache([_trajectory(1, 0, [([1], [-1.0], 0)])]).save(path)
    raw = path.read_bytes()
    header_size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + header_size])
    assert json.loads(header["__metadata__"]["records"])[0]["group_id"] == 1
    assert b"\x80\x04" not in raw[:2] and b"torch._utils" not in raw  # no pickle stream


def test_a_broken_cache_file_is_named(tmp_path):
    path = tmp_path / "cache.safetensors"
    TrajectoryCache([_trajectory(1, 0, [([1, 2], [-1.0, -2.0], 0)])]).save(path)
    path.write_bytes(path.read_bytes()[:-4])  # truncated
    with pytest.raises(ValueError, match="cache.safetensors: not a readable trajectory cache"):
        TrajectoryCache.load(path)


def test_saving_over_an_old_cache_replaces_it_whole(tmp_path):
    path = tmp_path / "cache.safetensors"
    TrajectoryCache([_trajectory(1, 0, [([1] * 50, [-1.0] * 50, 0)])]).save(path)
    TrajectoryCache([_trajectory(2, 0, [([2], [-math.pi], 1)])]).save(path)
    assert [t.key for t in TrajectoryCache.load(path)] == [(2, 0)]


def _same(a: Trajectory, b: Trajectory) -> bool:
    fields = ("prompt_ids", "token_ids", "behavior_logprobs", "versions")
    return (
        a.key == b.key
        and a.finish_reason == b.finish_reason
        and a.high_water == b.high_water
        and all(
            getattr(a, f).dtype == getattr(b, f).dtype and torch.equal(getattr(a, f), getattr(b, f))
            for f in fields
        )
    )


def _truncated_cache() -> TrajectoryCache:
    """Trajectories whose high-water mark is above their length (truncated by verification)."""
    cut = _trajectory(4, 0, [([1, 2, 3, 4], [-0.5] * 4, 2)])
    cut.truncate(1)
    return TrajectoryCache(
        [cut, _trajectory(4, 1, [([7], [-3.0], 3)], finish_reason="stop"), _trajectory(5, 0, [])]
    )


def test_the_checkpoint_form_round_trips_exactly_high_water_marks_included():
    cache = _truncated_cache()
    tensors, records = cache.to_tensors()
    assert json.loads(json.dumps(records)) == records  # plain JSON
    assert {name: t.dtype for name, t in tensors.items()} == {
        "prompt_ids": torch.long,
        "prompt_lengths": torch.long,
        "token_ids": torch.long,
        "behavior_logprobs": torch.float32,
        "versions": torch.long,
        "token_lengths": torch.long,
    }
    restored = TrajectoryCache.from_tensors(tensors, records)
    assert all(_same(a, b) for a, b in zip(cache, restored, strict=True))
    assert next(iter(restored)).high_water == 4
    empty_tensors, empty_records = TrajectoryCache().to_tensors()
    assert len(TrajectoryCache.from_tensors(empty_tensors, empty_records)) == 0


def test_the_file_form_keeps_high_water_marks(tmp_path):
    cache = _truncated_cache()
    cache.save(tmp_path / "cache.safetensors")
    loaded = TrajectoryCache.load(tmp_path / "cache.safetensors")
    assert all(_same(a, b) for a, b in zip(cache, loaded, strict=True))


def test_an_inconsistent_checkpoint_cache_is_refused():
    tensors, records = _truncated_cache().to_tensors()
    with pytest.raises(ValueError, match="checkpoint: trajectory cache is inconsistent"):
        TrajectoryCache.from_tensors(tensors, records[:-1])  # a record missing
    tensors["token_lengths"] = tensors["token_lengths"] + 1  # lengths that do not add up
    with pytest.raises(ValueError, match="checkpoint: trajectory cache is inconsistent"):
        TrajectoryCache.from_tensors(tensors, records)


def test_a_file_of_another_format_is_named(tmp_path):
    from safetensors.torch import save_file

    path = tmp_path / "other.safetensors"
    save_file({"x": torch.zeros(1)}, str(path), metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"other.safetensors: format 'pt', expected 'rollverify"):
        TrajectoryCache.load(path)


def test_truncate_keeps_any_prefix_from_empty_to_whole():
    whole = _trajectory(0, 0, [([1, 2, 3], [-1.0] * 3, 0)], finish_reason="stop")
    assert whole.truncate(3) == 0 and whole.finished, "keeping everything changes nothing"
    assert whole.truncate(0) == 3 and len(whole) == 0 and not whole.finished
    with pytest.raises(ValueError, match=r"kept=-1 must be in \[0, 0\]"):
        whole.truncate(-1)


def test_extend_stores_ids_as_long_and_logprobs_as_float32_whatever_it_is_given():
    t = Trajectory(torch.tensor([1]), 0, 0)
    t.extend(
        torch.tensor([3, 4], dtype=torch.int32), torch.tensor([-1.0, -2.0], dtype=torch.float64), 1
    )
    assert (t.token_ids.dtype, t.behavior_logprobs.dtype, t.versions.dtype) == (
        torch.long,
        torch.float32,
        torch.long,
    )


def test_an_empty_batch_has_the_documented_shapes_and_dtypes():
    empty = PaddedTrajectories.of([])
    fields = (empty.behavior_logprobs, empty.versions, empty.mask)
    assert [x.shape for x in fields] == [(0, 0)] * 3
    assert [x.dtype for x in fields] == [torch.float32, torch.long, torch.bool]


def test_a_checkpoint_without_high_water_marks_reads_them_as_the_lengths():
    tensors, records = _truncated_cache().to_tensors()
    for record in records:  # written before high-water marks were kept
        del record["high_water"]
    restored = TrajectoryCache.from_tensors(tensors, records)
    assert [t.high_water for t in restored] == [1, 1, 0]


# -- tool output (docs/rules.md, section 1) ----------------------------------------------------


def _with_tool_output():
    """Policy tokens at version 2 (a call), a tool's output, then policy tokens at version 3."""
    t = _trajectory(4, 0, [([1, 2, 3], [-0.1, -0.2, -0.3], 2)])
    t.extend_tool_output([40, 41], version=2)
    t.extend([5, 6], [-0.5, -0.6], 3)
    return t


def test_tool_output_is_marked_not_the_policys_with_the_calls_version():
    t = _with_tool_output()
    assert t.token_ids.tolist() == [1, 2, 3, 40, 41, 5, 6]
    assert t.policy.tolist() == [True, True, True, False, False, True, True]
    assert t.versions.tolist() == [2, 2, 2, 2, 2, 3, 3]
    assert t.behavior_logprobs[3:5].tolist() == [0.0, 0.0]
    assert (len(t), int(t.policy.sum()), t.high_water) == (7, 5, 7)
    t.truncate(4)  # in the middle of the output: the mask follows the tokens
    assert t.policy.tolist() == [True, True, True, False] and int(t.policy.sum()) == 3
    assert _trajectory(0, 0, [([1], [-1.0], 0)]).policy is None  # tool-free: no mask at all


def test_a_padded_batch_marks_tool_output_and_a_tool_free_one_is_its_mask():
    tool_free = _trajectory(0, 0, [([7], [-1.0], 0)])
    batch = PaddedTrajectories.of([_with_tool_output(), tool_free])
    assert batch.policy.tolist() == [
        [True, True, True, False, False, True, True],
        [True, False, False, False, False, False, False],
    ]
    alone = PaddedTrajectories.of([tool_free])
    assert alone.policy is alone.mask


@pytest.mark.parametrize("form", ["file", "checkpoint"])
def test_tool_output_marks_survive_the_cache_files(tmp_path, form):
    trajectories = [_with_tool_output(), _trajectory(1, 1, [([9, 8], [-1.0, -2.0], 1)])]
    if form == "file":
        TrajectoryCache(trajectories).save(tmp_path / "cache.safetensors")
        back = list(TrajectoryCache.load(tmp_path / "cache.safetensors"))
    else:
        back = list(TrajectoryCache.from_tensors(*TrajectoryCache(trajectories).to_tensors()))
    assert back[0].policy.tolist() == trajectories[0].policy.tolist()
    assert back[1].policy is None
    assert back[0].token_ids.tolist() == trajectories[0].token_ids.tolist()
