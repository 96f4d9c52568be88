"""`objective: electra` (Clark et al. 2020): a small generator, trained by the masked-LM loss, fills the masked
positions with samples; the discriminator (`final/`) learns which tokens were replaced, loss = generator MLM +
rtd_weight × RTD per real token. Both networks are BERT-style stock ELECTRA classes built from the recipe's
`model:`; the generator is saved beside the discriminator as `generator/` in every checkpoint and in `final/`.
The torch side is `electra_net`."""

from __future__ import annotations

from zh_bert.core.errors import ZhBertError
from zh_bert.train.objectives.base import LossTerm, Networks, Objective, add_objective
from zh_bert.train.rundir import GENERATOR

VALIDATION_STREAM = 2**31 - 1   # the first key of validation's generator samples (training keys are steps)


class Electra(Objective):
    name = "electra"
    summary = "replaced-token detection by a discriminator (ELECTRA)"
    generator = True
    logged = Objective.logged + ("rtd_loss_sum", "rtd_correct", "replaced")
    validated = Objective.validated + ("rtd_loss_sum", "rtd_correct", "rtd_count")

    def check_recipe(self, recipe):
        super().check_recipe(recipe)
        if recipe.init_from:
            raise ZhBertError("objective electra trains a generator and a discriminator from scratch; init_from "
                              "is not supported with it (set init_from: null)")

    def check_shards(self, recipe, meta, where):
        """ELECTRA trains on single-segment shards (sentence-pair shards carry NSP/SOP labels it would ignore,
        and segments cut for pairs)."""
        if meta.get("pairs"):
            raise ZhBertError(f"objective electra needs shards without sentence pairs, but {where} was built with "
                              f"--pairs {meta['pairs']}; give the raw corpus or shards built without --pairs")

    def loss_terms(self, recipe):
        return super().loss_terms(recipe) + (LossTerm("rtd_loss_sum", "tokens", recipe.rtd_weight),)

    def divergence_hint(self, recipe):
        return f" or rtd_weight ({recipe.rtd_weight:g})"

    def build(self, recipe, cfg, arch, tokenizer=None, hf=None):
        from zh_bert.train.objectives.electra_net import build_electra

        disc, gen = build_electra(cfg, recipe.generator_ratio)
        return Networks(disc, trained={GENERATOR: gen})

    def module(self, nets, recipe):
        from zh_bert.train.objectives.electra_net import ElectraPretrainModel

        return ElectraPretrainModel(nets.hf, nets.trained[GENERATOR])

    def step_batches(self, micro_batches, recipe, step, rank, world):
        """The generator's sampling noise, keyed per sequence (exact resume, any number of processes)."""
        from zh_bert.train.objectives.electra_net import add_sampling_noise

        return add_sampling_noise(micro_batches, recipe.seed, step, rank, world)

    def validation_batch(self, batch, k, rank, seed):
        """Fixed samples: keyed (validation, batch k, rank, row)."""
        import torch

        from zh_bert.train.objectives.electra_net import sampling_uniforms

        rows, seq_len = batch["input_ids"].shape
        u = sampling_uniforms([(VALIDATION_STREAM, k, rank, j) for j in range(rows)], seq_len, seed)
        return {**batch, "sample_u": torch.from_numpy(u)}

    def train_row(self, sums, counts):
        # per real token: a discriminator that calls every token original scores rtd_acc = 1 - replaced_frac
        toks = max(counts["tokens"], 1)
        return {"rtd_loss": sums["rtd_loss_sum"] / toks, "rtd_acc": sums["rtd_correct"] / toks,
                "replaced_frac": sums["replaced"] / toks}

    def progress_fields(self):
        return ("rtd_loss", "rtd_acc")

    def validation_row(self, sums):
        tokens = max(sums["rtd_count"], 1.0)
        return {"val_rtd_loss": sums["rtd_loss_sum"] / tokens, "val_rtd_acc": sums["rtd_correct"] / tokens}

    def describe(self, nets):
        from zh_bert.train.model import count_params

        g = nets.trained[GENERATOR]
        return (f" + generator ElectraForMaskedLM L{g.config.num_hidden_layers}/H{g.config.hidden_size}, "
                f"{count_params(g) / 1e6:.1f}M incl. the shared embeddings")

    def summary_fields(self, run):
        """run.json's `generator`: its shape, the weights it adds, and which folder holds it. Its MLM figures
        are the run's mlm_* / val_mlm_* (the discriminator predicts no tokens)."""
        from zh_bert.train.model import count_params

        gen = run.nets.trained[GENERATOR]
        c = gen.config
        shared = {id(p) for p in run.hf.parameters()}
        return {"generator": {
            "class": type(gen).__name__, "folder": f"final/{GENERATOR}",
            "generator_ratio": run.recipe.generator_ratio, "rtd_weight": run.recipe.rtd_weight,
            "num_hidden_layers": c.num_hidden_layers, "hidden_size": c.hidden_size,
            "num_attention_heads": c.num_attention_heads, "intermediate_size": c.intermediate_size,
            "embedding_size": c.embedding_size, "parameters": count_params(gen),
            "parameters_not_shared": sum(p.numel() for p in gen.parameters() if id(p) not in shared)}}

    def plan_shape(self, cfg, arch, args, shapes, config_of):
        """Both networks: parameters = discriminator + generator with the embeddings counted once."""
        from zh_bert.train.objectives.electra_net import electra_configs

        return shapes.from_electra(*electra_configs(cfg, args.generator_ratio))

    def flops_per_token(self, cfg, arch, args, mask_rate, config_of):
        from zh_bert.train.objectives.electra_net import electra_configs, electra_flops_per_token

        return electra_flops_per_token(*electra_configs(cfg, args.generator_ratio), args.seq_len, mask_rate)


ELECTRA = add_objective(Electra())
