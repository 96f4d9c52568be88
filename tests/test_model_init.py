"""`attention_init: neighbour`: layer-0 heads start on the previous/next token, and that is what lets a small
post-LN BERT learn from word order at all within a short budget (a stock-initialised one stays order-blind)."""

from __future__ import annotations

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from zh_bert.train.arch.bert import build_config
from zh_bert.train.model import neighbour_attention_init


def _attention(model, ids):
    model.config._attn_implementation = "eager"
    with torch.no_grad():
        return model.bert(input_ids=ids, output_attentions=True).attentions


@pytest.mark.parametrize("preset", ["tiny", "mini"])
def test_layer0_heads_start_on_the_neighbours(preset):
    torch.manual_seed(0)
    model = BertForMaskedLM(build_config(preset, 5000)).eval()
    neighbour_attention_init(model)
    ids = torch.randint(5, 5000, (4, 128))
    a = _attention(model, ids)[0]
    i = torch.arange(1, 127)
    for h in range(model.config.num_attention_heads):
        target = i + 1 if h % 2 == 0 else i - 1
        mass = a[:, h, i, target].mean().item()
        assert mass > 0.6, (preset, h, mass)   # ~0.75 at init; stock init spreads ~1/128 everywhere
    stock = BertForMaskedLM(build_config(preset, 5000)).eval()
    assert _attention(stock, ids)[0][:, 0, i, i + 1].mean().item() < 0.05


def _copy_partner_loss(init: str, steps: int = 150) -> float:
    """Sequences "a a b b c c …" with 15% of tokens masked: a masked token is predictable only from its
    neighbour (the pair partner), never from the bag of tokens around it."""
    torch.manual_seed(0)
    vocab, length, batch = 300, 32, 32
    cfg = BertConfig(vocab_size=vocab, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=512, attention_probs_dropout_prob=0.0, max_position_embeddings=64)
    model = BertForMaskedLM(cfg)
    if init == "neighbour":
        neighbour_attention_init(model)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.01)
    losses = []
    for _ in range(steps):
        x = torch.randint(10, vocab, (batch, length // 2)).repeat_interleave(2, dim=1)
        labels = x.clone()
        picked = torch.rand(x.shape) < 0.15
        labels[~picked] = -100
        x = x.masked_fill(picked, 3)
        loss = model(input_ids=x, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return sum(losses[-20:]) / 20


@pytest.mark.slow
def test_neighbour_init_learns_a_task_that_needs_word_order_where_stock_init_does_not():
    torch.set_num_threads(1)
    chance = torch.log(torch.tensor(290.0)).item()
    stock, neighbour = _copy_partner_loss("stock"), _copy_partner_loss("neighbour")
    assert stock > chance - 0.3            # stock init: still guessing uniformly after 150 steps
    assert neighbour < chance - 1.5        # neighbour init: already reading its neighbour
