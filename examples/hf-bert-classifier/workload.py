"""A BERT sequence classifier from Hugging Face transformers, built from a small config (no
download), on generated sentences: each is about the topic whose words it holds most of.

What it shows: text tokenized by a word-level tokenizer built in code (the ``tokenizers``
library, no vocabulary file), dict items as a Hugging Face dataset gives them (``input_ids``,
``attention_mask``, ``labels``), sentences of different lengths padded per batch by transformers'
own ``DataCollatorWithPadding``, a model that computes its own loss, and a macro F1 from
torchmetrics as the objective.
"""

from __future__ import annotations

import random

from tokenizers import Tokenizer, models, pre_tokenizers, processors
from torch.utils.data import Dataset
from torchmetrics.classification import MulticlassF1Score
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    DataCollatorWithPadding,
    PreTrainedTokenizerFast,
)

from tuner.workloads import Workload, WorkloadContext

#: Each topic's words; a sentence belongs to the topic it names most often.
TOPICS = {
    "sport": ["goal", "match", "team", "coach", "league", "score"],
    "science": ["atom", "cell", "theory", "lab", "energy", "data"],
    "music": ["song", "band", "chord", "tempo", "album", "stage"],
}
#: Words of no topic: most of every sentence.
FILLER = [
    "the", "a", "of", "and", "on", "in", "at", "to", "we", "they", "saw", "heard", "about", "new",
    "old", "big", "small", "first", "last", "day", "night", "city", "town", "people", "friend",
    "said", "with", "from", "after", "before", "very", "quite", "today",
]  # fmt: skip
SPECIAL = ["[PAD]", "[UNK]", "[CLS]"]


def make_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer over the topics' and filler words, ``[CLS]`` first in every sentence
    (BERT classifies from that position), ``[PAD]`` for padding: built in code, nothing loaded."""
    words = [*SPECIAL, *FILLER, *(word for topic in TOPICS.values() for word in topic)]
    backend = Tokenizer(models.WordLevel({word: i for i, word in enumerate(words)}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A", special_tokens=[("[CLS]", words.index("[CLS]"))]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]"
    )


def make_sentences(n: int, seed: int, label_noise: float) -> tuple[list[str], list[int]]:
    """``n`` sentences of 6 to 24 words and their topics: the topic's words appear 2 or 3 times,
    half the sentences hold one word of another topic too, among filler words. A ``label_noise``
    share of the labels is then drawn at random (as human labels go wrong): no model scores a
    perfect F1."""
    rng = random.Random(seed)
    names = list(TOPICS)
    sentences, labels = [], []
    for _ in range(n):
        label = rng.randrange(len(names))
        words = [rng.choice(TOPICS[names[label]]) for _ in range(rng.choice([2, 3]))]
        if rng.random() < 0.5:
            other = (label + rng.randrange(1, len(names))) % len(names)
            words.append(rng.choice(TOPICS[names[other]]))
        words += [rng.choice(FILLER) for _ in range(rng.randint(6, 24) - len(words))]
        rng.shuffle(words)
        sentences.append(" ".join(words))
        labels.append(rng.randrange(len(names)) if rng.random() < label_noise else label)
    return sentences, labels


class Sentences(Dataset):
    """Tokenized once; each item is a dict of lists, as ``tokenizer(text)`` gives it, plus its
    ``labels``: the collate pads a batch of them into tensors."""

    def __init__(self, sentences: list[str], labels: list[int], tokenizer: PreTrainedTokenizerFast) -> None:
        self.encoded = tokenizer(sentences)
        self.labels = labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, object]:
        return {
            "input_ids": self.encoded["input_ids"][index],
            "attention_mask": self.encoded["attention_mask"][index],
            "labels": self.labels[index],
        }


def build(ctx: WorkloadContext) -> Workload:
    tokenizer = make_tokenizer()
    n_train, n_val = ctx.options.get("n_train", 2000), ctx.options.get("n_val", 500)
    # the study's seed: every trial sees the same sentences and the same split
    sentences, labels = make_sentences(n_train + n_val, ctx.seed, ctx.options.get("label_noise", 0.1))
    hidden = ctx.options.get("hidden_size", 64)
    dropout = ctx.options.get("dropout", 0.1)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=hidden,
        num_hidden_layers=ctx.options.get("num_layers", 2),
        num_attention_heads=ctx.options.get("num_heads", 2),
        intermediate_size=4 * hidden,
        max_position_embeddings=32,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        classifier_dropout=dropout,
        pad_token_id=tokenizer.pad_token_id,
        num_labels=len(TOPICS),
        problem_type="single_label_classification",
    )
    return Workload(
        model=BertForSequenceClassification(config),
        train_data=Sentences(sentences[:n_train], labels[:n_train], tokenizer),
        eval_data=Sentences(sentences[n_train:], labels[n_train:], tokenizer),
        num_classes=len(TOPICS),
        collate=DataCollatorWithPadding(tokenizer, return_tensors="pt"),
        metrics=("loss", "accuracy", {"f1": MulticlassF1Score(len(TOPICS), average="macro")}),
    )
