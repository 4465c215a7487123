"""The special tokens of a conversation, shared by the tiny tokenizer and the rollout.

A turn is `<|user|> observation <|assistant|> reply <|end|>`. The rollout
appends token ids turn by turn and never re-tokenises earlier text, so the
tokens the policy trained on are exactly the tokens it sampled.
"""

PAD = "<|pad|>"
USER = "<|user|>"
ASSISTANT = "<|assistant|>"
END = "<|end|>"
SPECIAL_TOKENS = [PAD, USER, ASSISTANT, END]
