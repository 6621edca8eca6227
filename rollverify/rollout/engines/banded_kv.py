"""The hf engine's decode KV cache in bands, and the attention that reads it.

Running rows are kept in bands of similar length: per layer, each band is a left-padded block
[rows, kv_heads, width, head_dim] to which every row appends its new key at the same column,
in place (buffers keep spare columns), and attention runs band by band, so a short row never
attends to a long row's padding. A rebuild (rows joining or leaving) gathers each band's rows
from their old blocks with one gather and one copy per piece.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
from transformers import AttentionInterface
from transformers.cache_utils import DynamicLayer
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from rollverify.rollout.engines.batching import DECODE_KEEP, length_groups

GQA_ATTENTION = "rollverify_gqa_sdpa"
SPARE_COLUMNS = 64  # room to append before the buffers must grow (a copy)


def _gqa_sdpa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **_):
    """SDPA that shares each KV head across its query heads instead of copying it (as the stock
    sdpa path does whenever a mask is given): no copy of K and V per decode step.
    A decode step's `key` is the engine's `Bands`: each band of rows attends to its own block."""
    if isinstance(key, Bands):
        parts = [
            _sdpa(query[start:end], keys, values, mask, scaling)
            for (start, end, keys, values), mask in zip(key.blocks, key.masks, strict=True)
        ]
        return torch.cat(parts).transpose(1, 2).contiguous(), None
    # sdpa_mask returns None where plain causal attention is exact (an unpadded prefill).
    causal = attention_mask is None and query.shape[2] > 1
    output = _sdpa(query, key, value, attention_mask, scaling, causal, dropout)
    return output.transpose(1, 2).contiguous(), None


def _sdpa(query, key, value, mask, scaling, causal=False, dropout=0.0) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=mask,
        dropout_p=dropout,
        scale=scaling,
        is_causal=causal,
        enable_gqa=query.shape[1] != key.shape[1],
    )


AttentionInterface.register(GQA_ATTENTION, _gqa_sdpa)
AttentionMaskInterface.register(GQA_ATTENTION, sdpa_mask)


@dataclass
class Bands:
    """What a decode step's attention reads: per band, its rows' range in the batch and its
    block's keys and values [rows, kv_heads, width, head_dim], with its padding mask."""

    blocks: list[tuple[int, int, torch.Tensor, torch.Tensor]]
    masks: list[torch.Tensor | None]


class BandedLayer(DynamicLayer):
    """One layer's KV cache in bands: the batch's rows in runs of similar length, each run a
    left-padded block of its own width. A decode step appends one column to every block in
    place (buffers keep spare columns), so no row attends to the padding of a longer band."""

    def __init__(
        self, buffers: list[tuple[torch.Tensor, torch.Tensor]], widths: list[int], masks: list
    ) -> None:
        super().__init__()
        keys = buffers[0][0]
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
        self.sizes = [k.shape[0] for k, _ in buffers]
        self.widths = widths  # columns in use; each buffer holds spare columns after them
        self.buffers = buffers
        self.masks = masks  # shared by the layers; the engine sets them before each step

    def block(self, band: int) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = self.buffers[band]
        return keys[:, :, : self.widths[band]], values[:, :, : self.widths[band]]

    def update(self, key_states, value_states, *args, **kwargs):
        if key_states.shape[2] != 1:
            raise ValueError("banded KV layers take one decode token per row")
        blocks, start = [], 0
        for band, size in enumerate(self.sizes):
            width, (keys, values) = self.widths[band], self.buffers[band]
            if width == keys.shape[2]:  # out of spare columns: grow (a copy)
                keys, values = _with_spare(keys), _with_spare(values)
                self.buffers[band] = keys, values
            keys[:, :, width] = key_states[start : start + size, :, 0]
            values[:, :, width] = value_states[start : start + size, :, 0]
            self.widths[band] = width + 1
            blocks.append((start, start + size, *self.block(band)))
            start += size
        bands = Bands(blocks, self.masks)
        return bands, bands

    def get_seq_length(self) -> int:
        return max(self.widths)


def _with_spare(tensor: torch.Tensor) -> torch.Tensor:
    buffer = _buffer_like(tensor, tensor.shape[0], tensor.shape[2])
    buffer[:, :, : tensor.shape[2]] = tensor
    return buffer


def _buffer_like(tensor: torch.Tensor, rows: int, width: int) -> torch.Tensor:
    """An uninitialized block of `rows` rows and `width` columns, plus the spare columns."""
    _, heads, _, dim = tensor.shape
    return tensor.new_empty(rows, heads, width + SPARE_COLUMNS, dim)


def banded(blocks: list, width: int, pieces: list) -> tuple[torch.Tensor, torch.Tensor]:
    """One band's (keys, values) buffers from pieces (source block, row indices), in order:
    each row's last columns right-aligned at `width`, zeros on the left (padding must be
    finite: SDPA adds the mask to the scores). One gather and one copy per piece."""
    rows = sum(len(picked) for _, picked in pieces)
    buffers = tuple(_buffer_like(blocks[0][part], rows, width) for part in (0, 1))
    start = 0
    for block, picked in pieces:
        end = start + len(picked)
        for buffer, source in zip(buffers, blocks[block], strict=True):
            taken = min(source.shape[2], width)
            buffer[start:end, :, width - taken : width] = source[:, :, -taken:][picked]
            buffer[start:end, :, : width - taken] = 0
        start = end
    return buffers


def left_pad(tensor: torch.Tensor, width: int) -> torch.Tensor:
    missing = width - tensor.shape[2]
    if missing <= 0:
        return tensor
    shape = list(tensor.shape)
    shape[2] = missing
    return torch.cat([tensor.new_zeros(shape), tensor], dim=2)


def reband(
    old: list[BandedLayer],
    lengths: list[int],
    where: list[tuple[int, int]],
    fresh: int,
    new_kv: list,
    masks,
    device: torch.device,
) -> tuple[list[int], list[BandedLayer]]:
    """The rows (their KV `lengths`, each found at `where`: (band, index), band `fresh` being
    the new rows' `new_kv`, each layer's keys and values) banded again by length: each band as
    wide as its longest row, never wider. Returns the rows' new order and the layers.
    Rows of one source stay together in a band: one gather per (band, source)."""
    bands = [sorted(g, key=where.__getitem__) for g in length_groups(lengths, DECODE_KEEP)]
    plans = [_plan(band, where, lengths, old, device) for band in bands]
    widths = [max(lengths[i] for i in band) for band in bands]
    layers = []
    for index in range(len(old) if old else len(new_kv)):
        blocks = [old[index].block(s) for s in range(fresh)] + new_kv[index : index + 1]
        buffers = [
            old[index].buffers[plan] if isinstance(plan, int) else banded(blocks, *plan)
            for plan in plans
        ]
        layers.append(BandedLayer(buffers, list(widths), masks))
    return [i for band in bands for i in band], layers


def _plan(band: list[int], where: list[tuple[int, int]], lengths: list[int], old: list, device):
    """How to build one band: the index of an old band holding exactly these rows at this
    width (kept as it is, no copy), or its width and (source block, row indices) pieces."""
    width = max(lengths[i] for i in band)
    source = where[band[0]][0]
    if (
        old
        and source < len(old[0].sizes)
        and [where[i] for i in band] == [(source, j) for j in range(old[0].sizes[source])]
        and old[0].widths[source] == width
    ):
        return source
    pieces = [
        (block, torch.tensor([where[i][1] for i in members], device=device))
        for block, members in itertools.groupby(band, key=lambda i: where[i][0])
    ]
    return width, pieces
