"""What a training step holds in memory and computes, counted from a BertConfig (or ModernBertConfig), never
from a built model: parameters, bytes per device by what holds them, training FLOPs per token.

Activation bytes per token per encoder layer (post-LN BERT, tensors autograd saves for backward):
fp32: QKV input 4h, Q/K/V 12h, attention output 4h, LayerNorm inputs 2×4h, FFN input 4h, FFN hidden
before/after GELU 2×16h, two dropout masks 2×1h = 66h. AMP (autocast): matmul inputs/outputs in half,
LayerNorm inputs in fp32 = 38h. A fused SDPA kernel keeps no s×s attention matrix; without one (Kepler;
a CPU with attention dropout > 0, which PyTorch's CPU flash kernel does not support) the probabilities
add 4·heads·s bytes per token, with attention dropout 9·heads·s (mask + dropped copy; 6 / 11 under AMP). The sparse MLM head stores per *masked* token its 4 h-sized inputs and
2 V-sized fp32 tensors (logits, log-softmax), plus 2 more V-sized gradients at the start of backward.

`--objective electra` plans both networks (`zh_bert.train.objectives.electra_net.electra_configs`): parameters =
discriminator + generator with the embeddings counted once; FLOPs = `electra_net.electra_flops_per_token` (the generator's encoder
and sparse head, the discriminator's encoder and per-token RTD head); activations = the generator's encoder at
its width (its embeddings E = the discriminator's hidden size, plus the projection input) and sparse head with
E in place of h, plus the discriminator's encoder and RTD head (3 h-sized inputs per token: 12h bytes fp32, 6h
under AMP).

`--objective distill --teacher T` plans the student (and its learned projections, one linear map per hidden-state
pair) as what trains, and the teacher as a frozen network (`objectives.distill.Distill.plan_shape`): its weights
at the run's precision (2 bytes per parameter under bf16/fp16, as the run casts them once; 4 in fp32), no
gradients or AdamW state, no saved activations, but what a step keeps of its forward: the hidden states of
the layer map's pairs (tokens × H_teacher each), one layer's working set (16·H_teacher per token) and its MLM
logits and soft targets at the masked positions (2 × 4·V bytes per masked token); on the student's side the
projected states (4·H_teacher per token per pair) and its soft cross-entropy (2 × 4·V per masked token).
FLOPs: the student's training FLOPs + the teacher's forward (a third of its training FLOPs, its head at the
masked positions) + the projections' matmuls.

`--architecture modernbert` (block `pre-norm-glu`, stock ModernBertForMaskedLM; measured tensor by
tensor with saved-tensor hooks, transformers 5.24): per layer the residual stream before the MLP norm and the
layer output (2×4h, fp32 even under AMP), the two matmul inputs after the bias-free pre-norms (2·x·h, x = 4
bytes fp32 / 2 under AMP), the fused QKV output (3·x·h: SDPA's V is a view that keeps all of it), RoPE-rotated
Q and K (2·x·h), the attention output (x·h), the GeGLU's 2·i up-projection + GELU output + gated product
(4·x·i) = 40h + 16i fp32, 24h + 8i AMP. Dropout masks: bool (1 byte) on CUDA, the input's dtype on a CPU.
Each sliding-window layer on a fused kernel keeps its own s×s mask in the query's dtype (x·s bytes per token);
the SDPA math path keeps copies of Q, K, V (3·x·h) and the probabilities instead. Embeddings: the token
embedding output (4h; no position or token-type tables) and its dropout mask; RoPE cos/sin: 16·s·head_dim
bytes per micro-batch. The MLM head is BERT's (dense, GELU, LayerNorm, tied decoder, masked rows only).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from zh_bert.train.arch import get as get_architecture
from zh_bert.train.arch import of_config
from zh_bert.train.arch.bert import layer_params
from zh_bert.train.objectives import objective_named

GiB = 2 ** 30
CUDA_CONTEXT_BYTES = 0.5 * GiB       # CUDA context + cuBLAS workspace + kernels, outside the allocator
ALLOCATOR_SLACK = 0.10               # caching-allocator fragmentation on top of live tensors
RECOMPUTE = 4 / 3                    # compute with gradient checkpointing: one extra forward of the encoder


@dataclass
class ModelShape:
    """The numbers the memory and FLOP models need, from a BertConfig (or ModernBertConfig)."""
    layers: int
    hidden: int
    heads: int
    intermediate: int
    vocab: int
    positions: int
    dropout: float                   # hidden dropout: two masks per layer
    attention_dropout: float
    params: int                      # BertForMaskedLM (tied decoder), or BertForPreTraining with pairs
    # ^ counted from the config, so a plan never builds the model (a large one takes GBs and seconds);
    #   tests/test_plan.py checks it equals model.count_params of the built model
    generator: Optional["ModelShape"] = None   # electra: the generator (its params: only what it adds)
    embedding: int = 0                         # electra: the generator's embedding width (= hidden here)
    frozen: Optional["ModelShape"] = None      # distill: the teacher (runs forward only; not in params)
    frozen_pairs: int = 0                      # distill: hidden-state pairs the loss compares
    architecture: str = "bert"                 # a zh_bert.train.arch family: its block picks the activation formula
    sliding_layers: int = 0                    # modernbert: layers attending in a window (each keeps its mask)
    window: int = 0                            # modernbert: local_attention, in tokens

    @classmethod
    def from_config(cls, cfg, pairs: bool = False) -> "ModelShape":
        """The shape of a transformers config of any family (its architecture counts the parameters)."""
        arch = of_config(cfg)
        dropout, attention_dropout = arch.dropouts(cfg)
        sliding, window = arch.local_layers(cfg)
        return cls(cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.intermediate_size,
                   cfg.vocab_size, cfg.max_position_embeddings, dropout, attention_dropout,
                   arch.config_params(cfg, "pairs" if pairs else "mlm"), architecture=arch.name,
                   sliding_layers=sliding, window=window)

    @classmethod
    def from_electra(cls, disc, gen) -> "ModelShape":
        """Discriminator (ElectraForPreTraining) + generator (ElectraForMaskedLM, tied output layer) sharing one
        embedding module of width E = disc.embedding_size; `params` = both, the shared embeddings once."""
        h, i, v, l, e = disc.hidden_size, disc.intermediate_size, disc.vocab_size, disc.num_hidden_layers, disc.embedding_size
        emb = v * e + disc.max_position_embeddings * e + disc.type_vocab_size * e + 2 * e
        d_params = emb + l * layer_params(h, i) + (h * h + h + h + 1)             # RTD head: dense + prediction
        hg, ig, lg = gen.hidden_size, gen.intermediate_size, gen.num_hidden_layers
        g_params = ((e * hg + hg) if e != hg else 0) + lg * layer_params(hg, ig) + (hg * e + e + 2 * e) + v
        g = cls(lg, hg, gen.num_attention_heads, ig, v, gen.max_position_embeddings, gen.hidden_dropout_prob,
                gen.attention_probs_dropout_prob, g_params, embedding=e)
        return cls(l, h, disc.num_attention_heads, i, v, disc.max_position_embeddings, disc.hidden_dropout_prob,
                   disc.attention_probs_dropout_prob, d_params + g_params, generator=g, embedding=e)

    @classmethod
    def with_teacher(cls, student: "ModelShape", teacher: "ModelShape", projection: int, pairs: int) -> "ModelShape":
        """A distillation student (its params + the projections' `projection` weights) and its frozen teacher."""
        return dataclasses.replace(student, params=student.params + projection, frozen=teacher, frozen_pairs=pairs)

    def label(self) -> str:
        own = get_architecture(self.architecture).shape_label(self)
        if self.frozen is not None:
            own += f" + teacher {self.frozen.label()} (frozen, {self.frozen.params / 1e6:.1f}M)"
        return own if self.generator is None else f"{own} + generator {self.generator.label()}"


def model_config(model: str, vocab_size: int, dropout: float = 0.1, attention_dropout: float = 0.0, *,
                 architecture: str = "bert", global_attn_every_n_layers: int = 3, local_attention: int = 128):
    """The config a run of preset/config `model` trains: the architecture's config of the same recipe keys that
    pretrain builds (tests/test_plan.py checks the two agree). Imported lazily: torch."""
    recipe = plan_recipe(model, dropout, attention_dropout, global_attn_every_n_layers, local_attention,
                         architecture=architecture)
    return recipe.arch.config(recipe, vocab_size)


def plan_recipe(model: str, dropout: float, attention_dropout: float, global_attn_every_n_layers: int,
                local_attention: int, objective: str = "mlm", architecture: str = "bert", teacher: str | None = None):
    """The `Recipe` of a run with these keys: building it applies the recipe's own one-line checks
    (the architecture's objectives, window, global period), so plan refuses what pretrain would."""
    from zh_bert.train.recipe import Recipe

    return Recipe(architecture=architecture, model=model, objective=objective, dropout=dropout,
                  attention_dropout=attention_dropout, global_attn_every_n_layers=global_attn_every_n_layers,
                  local_attention=local_attention, teacher=teacher)


def plan_config(args, dropout: float = 0.1):
    """`model_config` of a `zh_bert.plan.PlanArgs` (its model, vocab, attention dropout and architecture keys)."""
    return model_config(args.model, args.vocab_size, dropout, args.attention_dropout, architecture=args.architecture,
                        global_attn_every_n_layers=args.global_attn_every_n_layers,
                        local_attention=args.local_attention)


@dataclass
class Memory:
    """Bytes per device, by what holds them."""
    weights: float
    grads: float
    optimizer: float
    autocast_cache: float
    activations: float
    overhead: float

    @property
    def total(self) -> float:
        return (self.weights + self.grads + self.optimizer + self.autocast_cache + self.activations
                + self.overhead)


def activation_bytes(shape: ModelShape, seq_len: int, micro_batch: int, precision: str, **kw) -> float:
    """Bytes autograd keeps for backward in one micro-batch, by the architecture's block (see module docstring
    for the derivations); keywords: mask_rate, fused_attention, grad_checkpointing, device ('cpu' | 'cuda',
    which only changes the pre-norm GLU block's dropout masks)."""
    own = BLOCKS[get_architecture(shape.architecture).block](shape, seq_len, micro_batch, precision, **kw)
    return own + (teacher_bytes(shape, seq_len, micro_batch, precision, kw.get("mask_rate", 0.15))
                  if shape.frozen is not None else 0.0)


def teacher_bytes(shape: ModelShape, seq_len: int, micro_batch: int, precision: str, mask_rate: float) -> float:
    """What a distillation step keeps of its frozen teacher's forward and of the losses against it (module
    docstring): the pairs' hidden states, one teacher layer's working set, logits and soft targets at the masked
    positions; the student's projected states and soft cross-entropy."""
    t, tokens = shape.frozen, micro_batch * seq_len
    x = 2 if precision in ("fp16", "bf16") else 4
    masked = tokens * mask_rate
    teacher = tokens * (shape.frozen_pairs + 1) * t.hidden * x + tokens * 16 * t.hidden * x + masked * 8 * t.vocab
    student = tokens * shape.frozen_pairs * 4 * t.hidden + masked * 8 * t.vocab
    return teacher + student


def post_norm_activation_bytes(shape: ModelShape, seq_len: int, micro_batch: int, precision: str, *,
                               mask_rate: float = 0.15, fused_attention: bool = True,
                               grad_checkpointing: bool = False, device: str = "cuda") -> float:
    """BERT's post-LN block (and ELECTRA's two networks of it)."""
    if shape.generator is not None:
        kw = dict(fused_attention=fused_attention, grad_checkpointing=grad_checkpointing)
        half, tokens, h = precision in ("fp16", "bf16"), micro_batch * seq_len, shape.hidden
        discriminator = activation_bytes(dataclasses.replace(shape, generator=None), seq_len, micro_batch,
                                         precision, mask_rate=0.0, **kw) + tokens * (6 if half else 12) * h
        generator = activation_bytes(shape.generator, seq_len, micro_batch, precision, mask_rate=mask_rate, **kw)
        return discriminator + generator
    h, a, s, v = shape.hidden, shape.heads, seq_len, shape.vocab
    e = shape.embedding or h
    half = precision in ("fp16", "bf16")
    drop = 1 if shape.dropout > 0 else 0
    per_layer = (38 if half else 64) * h + 2 * drop * h
    if not fused_attention:                                 # probabilities (+ dropout mask and output)
        per_layer += ((11 if half else 9) if shape.attention_dropout > 0 else (6 if half else 4)) * a * s
    else:
        per_layer += 4 * a                                  # softmax log-sum-exp per head
    tokens = micro_batch * seq_len
    if grad_checkpointing:                                  # layer inputs kept; one layer recomputed at a time
        encoder = tokens * (shape.layers * 4 * h + per_layer)
    else:
        encoder = tokens * shape.layers * per_layer
    embeddings = tokens * (4 + drop) * e + (tokens * (2 if half else 4) * e if e != h else 0)   # + projection input
    masked = tokens * mask_rate
    head = masked * ((10 * e + 18 * v) if half else (16 * e + 16 * v))
    return encoder + embeddings + head


def glu_activation_bytes(shape: ModelShape, seq_len: int, micro_batch: int, precision: str, *,
                         mask_rate: float = 0.15, fused_attention: bool = True,
                         grad_checkpointing: bool = False, device: str = "cuda") -> float:
    """ModernBERT's block (module docstring): pre-norm, fused QKV + RoPE, GeGLU."""
    h, i, a, s, v = shape.hidden, shape.intermediate, shape.heads, seq_len, shape.vocab
    half = precision in ("fp16", "bf16")
    x = 2 if half else 4                                    # bytes of a matmul input/output element
    mask = x if device == "cpu" else 1                      # a dropout mask element (CPU: the input's dtype)
    per_layer = 8 * h + 2 * x * h + x * h + 4 * x * i       # residual ×2, norm outputs, attention out, GeGLU
    if shape.dropout > 0:
        per_layer += mask * i                               # dropout on the gated product
    if shape.attention_dropout > 0:
        per_layer += mask * h                               # out_drop after Wo
    if fused_attention:
        per_layer += 5 * x * h + 4 * a                      # QKV buffer + rotated Q, K; log-sum-exp per head
        window_mask = x * s                                 # each sliding layer's s×s mask, query dtype
    else:                                                   # math path: Q, K, V copies and the probabilities
        per_layer += 3 * x * h + (x + mask + x if shape.attention_dropout > 0 else x) * a * s
        window_mask = 0
    tokens = micro_batch * s
    if grad_checkpointing:                                  # layer inputs kept; one layer recomputed at a time
        encoder = tokens * (shape.layers * 4 * h + per_layer + (window_mask if shape.sliding_layers else 0))
    else:
        encoder = tokens * (shape.layers * per_layer + shape.sliding_layers * window_mask)
    embeddings = tokens * (4 * h + ((4 if device == "cpu" else 1) * h if shape.dropout > 0 else 0))
    rope = 16 * s * (h // a)                                # cos, sin of both layer types, fp32
    head = tokens * mask_rate * ((10 * h + 18 * v) if half else (16 * h + 16 * v))
    return encoder + embeddings + rope + head


#: `Architecture.block` -> its activation formula
BLOCKS = {"post-norm": post_norm_activation_bytes, "pre-norm-glu": glu_activation_bytes}


def estimate_memory(shape: ModelShape, seq_len: int, micro_batch: int, precision: str, *,
                    device: str = "cuda", mask_rate: float = 0.15, fused_attention: bool = True,
                    grad_checkpointing: bool = False) -> Memory:
    """Peak bytes per device of a training step with gradient accumulation (grads live across micro-steps).

    device 'cpu' counts live tensors only (no CUDA context, no caching-allocator slack): what
    `bench/plan_memory_check.py` measures.
    """
    p = shape.params
    frozen = shape.frozen.params * (2 if precision in ("fp16", "bf16") else 4) if shape.frozen is not None else 0
    acts = activation_bytes(shape, seq_len, micro_batch, precision, mask_rate=mask_rate,
                            fused_attention=fused_attention, grad_checkpointing=grad_checkpointing, device=device)
    cache = 2 * p if precision in ("fp16", "bf16") else 0   # autocast's half copies of the weights
    dynamic = 4 * p + frozen + 4 * p + 8 * p + cache + acts
    overhead = 0.0 if device == "cpu" else CUDA_CONTEXT_BYTES + ALLOCATOR_SLACK * dynamic
    return Memory(4 * p + frozen, 4 * p, 8 * p, cache, acts, overhead)


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def shape_and_flops(args, cfg) -> tuple[ModelShape, float]:
    """(what a step runs, its training FLOPs per token) for `args.objective` on `cfg` (`plan_config(args)`), asked
    of the objective; `args` is a `zh_bert.plan.PlanArgs` (its architecture, objective and their keys, seq_len,
    mask_rate)."""
    objective, arch = objective_named(args.objective), of_config(cfg)

    def config_of(model: str, architecture: str):
        return model_config(model, args.vocab_size, 0.1, args.attention_dropout, architecture=architecture,
                            global_attn_every_n_layers=args.global_attn_every_n_layers,
                            local_attention=args.local_attention)

    return (objective.plan_shape(cfg, arch, args, ModelShape, config_of),
            objective.flops_per_token(cfg, arch, args, args.mask_rate, config_of))
