from roll_agentic.model.chat_format import ASSISTANT, END, USER
from roll_agentic.rollout.conversation import (
    Conversation,
    MarkerChatFormat,
    TemplateChatFormat,
    template_ids,
)


def test_mask_covers_exactly_the_generated_tokens_over_three_turns(tokenizer):
    fmt = MarkerChatFormat(tokenizer)
    conv = Conversation(fmt)
    end = tokenizer.convert_tokens_to_ids(END)
    replies = [[11, 12, end], [13, 14, 15], [16, end]]  # turn 2 hit max_tokens: no <|end|>
    generated_positions = []
    for i, reply in enumerate(replies):
        conv.add_observation(f"observation {i}")
        start = len(conv.token_ids)
        conv.add_reply(reply, [-0.5] * len(reply))
        generated_positions += list(range(start, start + len(reply)))
    masked = [i for i, m in enumerate(conv.loss_mask) if m == 1]
    assert masked == generated_positions
    assert len(conv.token_ids) == len(conv.loss_mask) == len(conv.logprobs)
    assert all(conv.logprobs[i] == -0.5 for i in masked)
    assert all(conv.logprobs[i] == 0.0 for i in range(len(conv.token_ids)) if i not in masked)
    # the truncated second reply was closed by the framework, with mask 0
    third_obs_start = generated_positions[5] + 1
    assert conv.token_ids[third_obs_start] == end
    assert conv.loss_mask[third_obs_start] == 0


def test_token_ids_are_never_retokenised(tokenizer):
    fmt = MarkerChatFormat(tokenizer)
    conv = Conversation(fmt)
    conv.add_observation("P . .")
    # a reply whose text re-encodes to other ids ("Ġ" + "r" decodes to " r")
    odd_reply = [tokenizer.convert_tokens_to_ids("Ġ"), tokenizer.convert_tokens_to_ids("r")]
    start = len(conv.token_ids)
    conv.add_reply(odd_reply, [-1.0, -1.0])
    before = list(conv.token_ids)
    conv.add_observation("next")
    assert conv.token_ids[: len(before)] == before  # earlier ids untouched
    assert conv.token_ids[start:start + 2] == odd_reply
    assert tokenizer.encode(tokenizer.decode(odd_reply), add_special_tokens=False) != odd_reply
    assert conv.token_ids[0] == tokenizer.convert_tokens_to_ids(USER)
    assert conv.token_ids[-1] == tokenizer.convert_tokens_to_ids(ASSISTANT)


QWEN_LIKE_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_template_turns_are_the_templates_own_ids(tokenizer):
    """A chat-template model's conversation, built turn by turn from token ids, is what the
    template renders for the whole conversation: ids, not keys of a BatchEncoding (transformers
    5), with the newline the template writes after each reply's end token."""
    import copy

    tok = copy.deepcopy(tokenizer)
    tok.chat_template = QWEN_LIKE_TEMPLATE
    fmt = TemplateChatFormat(tok)
    conv = Conversation(fmt)
    conv.add_observation("first")
    reply = tok.encode("move left", add_special_tokens=False) + [tok.eos_token_id]
    conv.add_reply(reply, [-0.1] * len(reply))
    conv.add_observation("second")
    whole = template_ids(tok, [{"role": "user", "content": "first"}, {"role": "assistant", "content": "move left"},
                               {"role": "user", "content": "second"}], add_generation_prompt=True)
    assert all(isinstance(i, int) for i in conv.token_ids)
    assert tok.decode(conv.token_ids) == tok.decode(whole)
    assert conv.token_ids == whole
    assert [i for i, m in zip(conv.token_ids, conv.loss_mask, strict=True) if m] == reply


PHI3_LIKE_TEMPLATE = (  # the turn ends with <|end|>; the eos token is another one (Phi-3, Gemma)
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_a_template_whose_turn_end_is_not_eos_stops_and_closes_on_its_own_token(tokenizer):
    """Stopping on eos alone, a reply ran past its turn's end token, and a reply the model
    closed got the eos appended as a second closing token: ids the template never renders."""
    import copy

    tok = copy.deepcopy(tokenizer)
    tok.eos_token = "<|endoftext|>"
    tok.chat_template = PHI3_LIKE_TEMPLATE
    end = tok.convert_tokens_to_ids(END)
    fmt = TemplateChatFormat(tok)
    assert fmt.stop_token_ids[0] == end and tok.eos_token_id in fmt.stop_token_ids
    messages = [{"role": "user", "content": "first"}, {"role": "assistant", "content": "move left"},
                {"role": "user", "content": "second"}, {"role": "assistant", "content": "up"},
                {"role": "user", "content": "third"}]
    conv = Conversation(fmt)
    conv.add_observation("first")
    closed = tok.encode("move left", add_special_tokens=False) + [end]
    conv.add_reply(closed, [-0.1] * len(closed))
    conv.add_observation("second")
    cut = tok.encode("up", add_special_tokens=False)  # hit max_tokens: the framework closes it, mask 0
    conv.add_reply(cut, [-0.2] * len(cut))
    conv.add_observation("third")
    assert conv.token_ids == template_ids(tok, messages, add_generation_prompt=True)
    assert [i for i, m in zip(conv.token_ids, conv.loss_mask, strict=True) if m] == closed + cut


def test_a_reply_whose_logprobs_do_not_match_its_tokens_is_refused(tokenizer):
    import pytest

    conv = Conversation(MarkerChatFormat(tokenizer))
    conv.add_observation("start")
    with pytest.raises(ValueError, match="3 tokens came with 2 logprobs"):
        conv.add_reply([5, 6, 7], [-0.1, -0.2])
    assert len(conv.token_ids) == len(conv.loss_mask) == len(conv.logprobs)


def test_a_reply_with_nan_or_positive_logprobs_is_refused(tokenizer):
    import pytest

    conv = Conversation(MarkerChatFormat(tokenizer))
    conv.add_observation("start")
    for bad in ([-0.1, float("nan")], [0.5, -0.2]):
        with pytest.raises(ValueError, match="logprobs that are no log-probabilities"):
            conv.add_reply([5, 6], bad)
    conv.add_reply([5, 6], [-float("inf"), 0.0])  # an impossible token's -inf is the trainer's to clamp
    assert len(conv.token_ids) == len(conv.loss_mask) == len(conv.logprobs)
