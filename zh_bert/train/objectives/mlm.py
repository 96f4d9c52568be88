"""The masked-LM objectives: `mlm` (RoBERTa: the masked-LM loss only), `mlm+nsp` (BERT 2018: + next-sentence
prediction) and `mlm+sop` (ALBERT: + sentence-order prediction). The pair objectives train on shards built with
`zh-bert shard --pairs` and keep the stock model's sentence-pair head (BertForPreTraining)."""

from __future__ import annotations

from zh_bert.train.objectives.base import LossTerm, Objective, add_objective


class MaskedLM(Objective):
    """The masked-LM loss, and with `pairs` the sentence-pair loss per sequence beside it."""

    def __init__(self, name: str, pairs: str | None = None, summary: str = ""):
        self.name, self.pairs, self.summary = name, pairs, summary
        if pairs:
            self.logged = Objective.logged + ("nsp_loss_sum", "nsp_correct")

    def module(self, nets, recipe):
        """The stock model with its heads run at the masked positions only (`model.PretrainModel`)."""
        from zh_bert.train.model import PretrainModel

        return PretrainModel(nets.hf)

    def loss_terms(self, recipe):
        pair = (LossTerm("nsp_loss_sum", "sequences"),) if self.pairs else ()
        return super().loss_terms(recipe) + pair

    def train_row(self, sums, counts):
        if not self.pairs:
            return {}
        seqs = max(counts["sequences"], 1)
        return {"nsp_loss": sums["nsp_loss_sum"] / seqs, "nsp_acc": sums["nsp_correct"] / seqs}


MLM = add_objective(MaskedLM("mlm", summary="masked-LM loss only"))
MLM_NSP = add_objective(MaskedLM("mlm+nsp", "nsp", "+ next-sentence prediction (BERT 2018)"))
MLM_SOP = add_objective(MaskedLM("mlm+sop", "sop", "+ sentence-order prediction (ALBERT)"))
