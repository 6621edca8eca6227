"""A character-level tokenizer for the chain task: one token per character, real `tokenizers`."""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}
CHARACTERS = list("0123456789Q:+x=;#")
TOOL_CHARACTERS = [*CHARACTERS, "?"]  # the chain_tool task's: "?" closes a calculator call


def build_char_tokenizer(characters: list[str] = CHARACTERS) -> PreTrainedTokenizerFast:
    vocab = {token: i for i, token in enumerate([*SPECIAL_TOKENS.values(), *characters])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=SPECIAL_TOKENS["unk_token"]))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()  # characters join back without spaces
    return PreTrainedTokenizerFast(tokenizer_object=core, **SPECIAL_TOKENS)
