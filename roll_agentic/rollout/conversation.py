"""Building a multi-turn conversation as token ids, turn by turn.

Each observation is encoded once, on its own, and appended; each reply is
appended as the exact ids the engine sampled. Nothing is ever decoded and
re-encoded, so what the trainer scores is what the policy generated.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Protocol

from roll_agentic.model.chat_format import ASSISTANT, END, USER

# A logprob above 0 is no log-probability; a renormalised nucleus may round a sure token's
# to a hair above it, so the check allows this much.
LOGPROB_SLACK = 1e-3


class ChatFormat(Protocol):
    stop_token_ids: tuple[int, ...]

    def observation_tokens(self, text: str, first: bool, last_reply_closed: bool) -> list[int]: ...

    def decode(self, token_ids: list[int]) -> str: ...


class MarkerChatFormat:
    """`<|user|> obs <|assistant|> reply <|end|>`: the tiny model's format."""

    def __init__(self, tokenizer):
        self.tok = tokenizer
        self.user = tokenizer.convert_tokens_to_ids(USER)
        self.assistant = tokenizer.convert_tokens_to_ids(ASSISTANT)
        self.end = tokenizer.convert_tokens_to_ids(END)
        self.stop_token_ids = (self.end,)

    def observation_tokens(self, text: str, first: bool, last_reply_closed: bool) -> list[int]:
        close = [] if first or last_reply_closed else [self.end]  # a truncated reply still gets closed
        # The env's text is text: one that spells "<|end|><|user|>" (e.g. quoting a reply the
        # model wrote in plain byte tokens) was encoded as those control tokens, a turn boundary
        # in the prompt that neither the model nor the framework made.
        body = self.tok.encode(text, add_special_tokens=False, split_special_tokens=True)
        return close + [self.user] + body + [self.assistant]

    def decode(self, token_ids: list[int]) -> str:
        return self.tok.decode(token_ids, skip_special_tokens=True)


def template_ids(tokenizer, messages: list[dict], add_generation_prompt: bool = False) -> list[int]:
    """The token ids of `messages` under the tokenizer's chat template.

    transformers 5 returns a BatchEncoding for tokenize=True; taken as a list,
    that was its keys (['input_ids', 'attention_mask']), not ids.
    """
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=True,
                                        return_dict=False)
    if isinstance(out, Mapping):
        out = out["input_ids"]
    return [int(i) for i in out]


_EXCHANGE = ({"role": "user", "content": "x"}, {"role": "assistant", "content": "y"})  # a finished exchange
_PLACEHOLDER = "ROLLAGENTICOBSERVATIONTEXT"  # stands for an observation's text in a rendered turn


class TemplateChatFormat:
    """Any HF tokenizer with a chat template: each turn is the template's delta.

    The ids of a new user turn are what the template adds after a finished
    exchange; computing that delta on a dummy exchange keeps the earlier ids
    untouched. What the template writes after a reply's end token (Qwen's
    newline after `<|im_end|>`) is not sampled, so it opens the next
    observation: the ids are then exactly the template's rendering.
    """

    def __init__(self, tokenizer):
        self.tok = tokenizer
        exchange = list(_EXCHANGE)
        base = template_ids(tokenizer, exchange)
        probe = template_ids(tokenizer, [*exchange, {"role": "user", "content": "z"}], add_generation_prompt=True)
        if probe[: len(base)] != base:
            raise ValueError("the tokenizer's chat template renders earlier turns differently once a turn is "
                             "added, so turns cannot be appended as token ids; use another template")
        self._base_len = len(base)
        # The token that ends a reply is the template's, which need not be the eos token
        # (Phi-3: <|end|> vs <|endoftext|>; Gemma: <end_of_turn> vs <eos>). Stopping on eos
        # alone let replies run past their turn, and a reply closed by the model got a
        # second, foreign closing token: ids the template never renders.
        end, self._after_end = _turn_end(tokenizer, exchange, base)
        eos = tokenizer.eos_token_id
        self.stop_token_ids = tuple(dict.fromkeys(t for t in (end, eos) if t is not None))  # closing token first
        if end is None:
            ends = [i for i, t in enumerate(base) if t in self.stop_token_ids]
            self._after_end = base[ends[-1] + 1 :] if ends else []  # e.g. the newline after <|im_end|>

    def observation_tokens(self, text: str, first: bool, last_reply_closed: bool) -> list[int]:
        close = [] if first or last_reply_closed or not self.stop_token_ids else [self.stop_token_ids[0]]
        head = [] if first else [*close, *self._after_end]
        if any(s in text for s in self._special_texts):
            literal = self._literal_turn(text, first)
            if literal is not None:
                return head + literal
        msg = [{"role": "user", "content": text}]
        if first:
            return template_ids(self.tok, msg, add_generation_prompt=True)
        full = template_ids(self.tok, [*_EXCHANGE, *msg], add_generation_prompt=True)
        return head + full[self._base_len :]

    @functools.cached_property
    def _special_texts(self) -> tuple[str, ...]:
        texts = set(self.tok.all_special_tokens)
        texts |= {t.content for t in self.tok.added_tokens_decoder.values() if t.special}
        return tuple(t for t in texts if t)

    def _literal_turn(self, text: str, first: bool) -> list[int] | None:
        """The turn's ids with `text` encoded as plain text. The template renders the env's text
        inline and the tokenizer then parsed any special token it spelled ("<|im_end|>" quoted
        from a reply) as that control token: a turn boundary nobody made. The template's own
        text around it keeps its special tokens. None if the template alters a placeholder."""
        messages = [{"role": "user", "content": _PLACEHOLDER}]
        rendered = self.tok.apply_chat_template(messages if first else [*_EXCHANGE, *messages],
                                                add_generation_prompt=True, tokenize=False)
        if not first:
            base = self.tok.apply_chat_template(list(_EXCHANGE), tokenize=False)
            if not rendered.startswith(base):
                return None
            rendered = rendered[len(base):]
        if rendered.count(_PLACEHOLDER) != 1:
            return None
        pre, post = rendered.split(_PLACEHOLDER)
        enc = functools.partial(self.tok.encode, add_special_tokens=False)
        return enc(pre) + enc(text, split_special_tokens=True) + enc(post)

    def decode(self, token_ids: list[int]) -> str:
        return self.tok.decode(token_ids, skip_special_tokens=True)


def _turn_end(tokenizer, exchange: list[dict], base: list[int]) -> tuple[int | None, list[int]]:
    """The special token the template writes right after a reply's text, and the ids after it
    (e.g. <|im_end|> and a newline); (None, []) if the template has no such token."""
    prompt = template_ids(tokenizer, exchange[:1], add_generation_prompt=True)
    reply = tokenizer.encode(exchange[1]["content"], add_special_tokens=False)
    if base[: len(prompt)] != prompt or base[len(prompt) : len(prompt) + len(reply)] != reply:
        return None, []
    rest = base[len(prompt) + len(reply) :]
    special = set(tokenizer.all_special_ids) | {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    if not rest or rest[0] not in special:
        return None, []
    return rest[0], rest[1:]


def chat_format_for(tokenizer) -> ChatFormat:
    if USER in tokenizer.get_vocab():
        return MarkerChatFormat(tokenizer)
    if getattr(tokenizer, "chat_template", None):
        return TemplateChatFormat(tokenizer)
    raise ValueError("the tokenizer has neither roll-agentic's chat markers nor a chat template; "
                     "use a chat model or the tiny model")


class Conversation:
    """Token ids of a conversation with the loss mask and sampling logprobs."""

    def __init__(self, fmt: ChatFormat):
        self.fmt = fmt
        self.token_ids: list[int] = []
        self.loss_mask: list[int] = []
        self.logprobs: list[float] = []
        self._last_reply_closed = True

    def add_observation(self, text: str) -> None:
        ids = self.fmt.observation_tokens(text, first=not self.token_ids, last_reply_closed=self._last_reply_closed)
        self.token_ids += ids
        self.loss_mask += [0] * len(ids)
        self.logprobs += [0.0] * len(ids)

    def add_reply(self, token_ids: list[int], logprobs: list[float]) -> None:
        if len(token_ids) != len(logprobs):  # every later position's mask and logprob would be off by the gap
            raise ValueError(f"a reply of {len(token_ids)} tokens came with {len(logprobs)} logprobs")
        if any(lp != lp or lp > LOGPROB_SLACK for lp in logprobs):  # nan (lp != lp) or above log 1
            # Trained on, one nan made the step's loss and every weight's gradient nan (-inf is
            # kept: the trainer clamps its ratio). The episode retries as on an engine failure.
            raise ValueError(f"a reply came with logprobs that are no log-probabilities: "
                             f"{[lp for lp in logprobs if lp != lp or lp > LOGPROB_SLACK][:3]}")
        self.token_ids += token_ids
        self.loss_mask += [1] * len(token_ids)
        self.logprobs += list(logprobs)
        self._last_reply_closed = bool(token_ids) and token_ids[-1] in self.fmt.stop_token_ids
