"""The keys of a pretraining recipe, in groups, each declared once (type, default, help): `Recipe` is all the
groups together; other commands take the keys they share from here (`config.keys_of`, `config.option_of`)
instead of declaring them again. The order of the groups and of their fields is the order of a rendered
recipe (`--print-recipe`, recipes/tiny-cpu.yaml)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, Literal, Optional, Union

from zh_bert.core.config import option, option_of
from zh_bert.core.hardware import Precision
from zh_bert.core.options import Shared
from zh_bert.corpus.clean.readers import DocSep, ReadOptions
from zh_bert.corpus.shard.build import ShardConfig
from zh_bert.train.arch import names as architecture_names
from zh_bert.train.masking import MaskingConfig
from zh_bert.train.objectives import ObjectiveName

ARCHITECTURE = Literal[architecture_names()]    # the families of zh_bert.train.arch, by name


@dataclass
class PlaceAndModelKeys:
    """Where things are."""
    section: ClassVar[str] = 'where things are'
    out_dir: str = option("runs/tiny-cpu", help="run directory: metrics.jsonl, curves.png, run.json, "
                          "checkpoints/, final/ (a new folder, or a run dir of pretrain's own)")
    data: Union[str, list[str]] = option(
        "corpora/sample/zhwiki_sampled.txt",
        help="a SHARDDIR (has meta.json), cleaned documents (a `zh-bert clean` OUTDIR, or a dir of only "
             "*.jsonl / *.jsonl.gz parts of {\"text\", \"source\"} lines: vocab and shard, not cleaned again) or "
             "raw text files/dirs (cleaned, a vocab built and sharded first); a list may not mix cleaned and raw. "
             "Built data is cached under data_cache, keyed by the input bytes and settings")
    tokenizer: Optional[str] = option(None, help="TOKDIR; null = init_from's tokenizer, or the one built from "
                                      "the raw corpus (vocab_kind, vocab_size)")
    model: str = option("tiny", help="preset tiny L2/H128 | mini L4/H256 | small L4/H512 | medium L8/H512 | "
                        "base L12/H768 | large L24/H1024 (UER's names), or a config.json path (model_type bert, "
                        "or modernbert with architecture: modernbert)")
    architecture: ARCHITECTURE = option(
        "bert", help="bert = stock BertForMaskedLM (2018); modernbert = stock ModernBertForMaskedLM (RoPE, pre-norm, "
                     "GeGLU sized to the BERT preset's parameter count, no biases, local/global attention): the "
                     "preset's layers/hidden/heads either way")
    init_from: Optional[str] = option(None, help="checkpoint dir to continue pretraining from (its tokenizer, "
                                      "fitted to `tokenizer` if set); null = from scratch")
    attention_init: Literal["stock", "neighbour", "auto"] = option(
        "stock", help="start of a from-scratch model: stock = the architecture's own init (BERT's N(0, 0.02)); "
                      "neighbour = layer-0 heads start on the previous/next token (still a stock BERT checkpoint; "
                      "see model.neighbour_attention_init; bert only); auto = neighbour for bert, stock for modernbert")
    global_attn_every_n_layers: int = option(3, help="modernbert: layer i attends globally when i mod N = 0, the "
                                             "others in a sliding window (ModernBERT: 3)")
    local_attention: int = option(128, help="modernbert: sliding-window size in tokens, even (local_attention / 2 to "
                                  "each side; ModernBERT: 128)")
    global_rope_theta: float = option(160000.0, help="modernbert: RoPE base of the global layers (ModernBERT: 160,000)")
    local_rope_theta: float = option(10000.0, help="modernbert: RoPE base of the sliding-window layers (10,000)")


@dataclass
class ObjectiveKeys:
    """Objective and masking (the masking keys are zh_bert.train.masking.MaskingConfig's fields)."""
    section: ClassVar[str] = 'objective and masking'
    objective: ObjectiveName = option(
        "mlm", help="mlm; mlm+nsp / mlm+sop also train next-sentence / sentence-order prediction on shards built "
                    "with --pairs; electra = generator MLM + rtd_weight × the discriminator's replaced-token "
                    "detection (final/ = discriminator, final/generator/ = the masked LM); distill = the model "
                    "learns from `teacher` (soft targets at `temperature`, hidden states, attention maps)")
    generator_ratio: float = option(0.25, help="electra: generator hidden size / discriminator's, in (0, 1] "
                                    "(same layers, intermediate size scaled alike, one head per 64 dims)")
    rtd_weight: float = option(50.0, help="electra: λ in loss = generator MLM + λ · RTD, >= 0 (Clark et al.: 50)")
    teacher: Optional[str] = option(
        None, help="distill: the teacher, a BERT or ModernBERT masked LM: a model folder, run dir, checkpoint, catalog "
                   "alias or Hub id (downloaded once, as `zh-bert download`). Its tokenizer is the student's; it runs "
                   "frozen at the run's precision and is never saved (its sha256 is recorded: a resume refuses a "
                   "changed teacher)")
    temperature: float = option(1.0, help="distill: T of the soft targets, softmax(logits / T) of teacher and student "
                                "on the masked positions, > 0 (1: TinyBERT's; a small or briefly trained teacher's "
                                "soft targets are near uniform at MiniRBT's 8: the run's first lines give their "
                                "entropy at T, and warn above 0.95 of ln V)")
    kd_weight: float = option(1.0, help="distill: weight of the soft cross-entropy at `temperature`, per masked "
                              "token, >= 0")
    hidden_weight: float = option(1.0, help="distill: weight of the hidden-state MSE (the student's states through "
                                  "`projection`, per real token and teacher dimension, summed over layer_map's "
                                  "pairs), >= 0")
    attention_weight: float = option(0.0, help="distill: weight of the attention-map MSE on layer_map's pairs past "
                                     "the embeddings (per real query token, summed over keys, averaged over heads; "
                                     "the heads must agree; eager attention, slower), >= 0")
    mlm_weight: float = option(0.4, help="distill: weight of the student's own masked-LM loss on the true tokens "
                               "(hard labels), >= 0 (0.4: DistilBERT's 2 to 5 of its MLM and soft terms; 0 = the "
                               "teacher's targets alone, MiniRBT's)")
    layer_map: Optional[list[list[int]]] = option(
        None, help="distill: [student layer, teacher layer] pairs whose hidden states (and attention maps) are "
                   "compared, 0 = the embeddings' output; null = uniform (MiniRBT, TextBrewer): [0, 0] and student "
                   "layer i with teacher layer i × L_teacher / L_student")
    projection: Literal["linear", "none"] = option(
        "linear", help="distill: linear = a learned linear map per pair from the student's width to the teacher's "
                       "(in checkpoints, not in final/); none = states compared as they are (widths must agree)")
    student_init: Literal["random", "teacher-layers"] = option(
        "random", help="distill: random = the architecture's init; teacher-layers = the teacher's embeddings, MLM "
                       "head and, per student layer, the teacher layer layer_map pairs it with (RBT3-style; the "
                       "student's family and widths must be the teacher's)")
    masking: MaskingConfig = option(default_factory=MaskingConfig,
                                    help="the masking strategy and its settings (flat keys below)")
    mask_rate_schedule: Literal["constant", "rise-decay"] = option(
        "constant", help="constant = mask_rate at every step; rise-decay = Chinese ModernBERT's (arXiv 2510.12285): "
                         "mask_rate rising linearly to mask_rate_peak over warmup_steps, then falling linearly back to "
                         "mask_rate at max_steps (validation keeps mask_rate, so its figures stay comparable)")
    mask_rate_peak: float = option(0.3, help="rise-decay: the mask rate at the end of warmup, in (mask_rate, 1)")


@dataclass
class BatchKeys:
    """Shape and batch."""
    section: ClassVar[str] = 'shape and batch'
    seq_len: int = option_of(ShardConfig, "seq_len", help="tokens per packed sequence, [CLS] ... [SEP] (must match the SHARDDIR's)")
    global_batch: int = option(32, help="sequences per optimizer step, all processes together")
    micro_batch: int = option(32, help="sequences per forward pass per process; accumulation = global_batch / "
                              "(micro_batch × processes), which must divide exactly")


@dataclass
class OptimizerKeys:
    """Optimizer and schedule."""
    section: ClassVar[str] = 'optimizer and schedule'
    lr: float = option(1e-4, help="peak AdamW learning rate")
    weight_decay: float = option(0.01, help="AdamW decoupled weight decay (not on biases and LayerNorm)")
    betas: list[float] = option(default_factory=lambda: [0.9, 0.999], help="AdamW betas, two numbers in [0, 1)")
    adam_eps: float = option(1e-6, help="AdamW epsilon")
    grad_clip: float = option(1.0, help="max global gradient norm; 0 = no clipping")
    warmup_steps: int = option(100, help="linear warmup steps")
    max_steps: int = option(1000, help="optimizer steps in the run")
    schedule: Literal["linear", "cosine", "constant", "wsd"] = option(
        "linear", help="lr after warmup: linear or cosine decay to 0, constant, or wsd = warmup-stable-decay (peak lr "
                       "until the last decay_fraction of max_steps, then linear to 0; the weights at the start of the "
                       "decay are kept as checkpoints/nodecay/, to continue pretraining from)")
    decay_fraction: float = option(0.1, help="wsd: fraction of max_steps spent decaying, in (0, 1]")
    dropout: float = option(0.1, help="hidden dropout of models built from scratch (saved in config.json, so "
                            "fine-tuning the checkpoint uses it too)")
    attention_dropout: float = option(0.0, help="attention-probability dropout; 0 keeps SDPA on its fused kernel "
                                      "(on a CPU any other value takes the math path: 4-6x slower attention)")


@dataclass
class PrecisionKeys:
    """Precision and memory."""
    section: ClassVar[str] = 'precision and memory'
    precision: Precision = option(
        "auto", help="auto = bf16 where native (CPUs with avx512_bf16, Ampere+ GPUs), fp16 with loss scaling on "
                     "older GPUs, fp32 on Kepler and other CPUs; the log states the precision in effect")
    loss_scale_init: float = option(65536.0, bounds=(1.0, 2.0 ** 24),
                                    help="fp16: the dynamic loss scale at the start (2^16); an overflowed step is "
                                    "skipped and halves it. Bounded because above 2^24 the first steps overflow and "
                                    "are skipped until it halves down, and below 1 small gradients round to 0 in "
                                    "fp16; a run that still skips most steps, or whose every gradient is 0, ends "
                                    "with an error")
    loss_scale_growth_interval: int = option(2000, help="fp16: the loss scale doubles after this many steps in a "
                                             "row without overflow")
    deterministic: Optional[bool] = option(None, help="deterministic kernels, so a resumed run repeats an "
                                           "uninterrupted one exactly; null = true on a CPU (its kernels are), "
                                           "false on CUDA, where true sets torch.use_deterministic_algorithms and "
                                           "CUBLAS_WORKSPACE_CONFIG at some cost in speed (run.json says which)")
    tf32: bool = option(True, help="fp32 on Ampere+ GPUs: matmuls and convolutions in TF32 (10-bit mantissa, "
                        "several times faster); ignored elsewhere")
    compile: bool = option(False, help="torch.compile the encoder (Inductor; on CUDA needs Triton, sm_70+): "
                           "faster steps after a compile of a minute or more at the start")
    grad_checkpointing: bool = option(False, help="recompute activations in backward: less memory, ~30% slower")
    max_nan_streak: int = option(20, help="stop after this many consecutive skipped steps (non-finite loss or "
                                 "gradient norm)")


@dataclass
class BookkeepingKeys:
    """Bookkeeping."""
    section: ClassVar[str] = 'bookkeeping'
    save_every: int = option(500, help="checkpoint every N steps (also at the end and on SIGINT/SIGTERM); "
                             "0 = only then")
    keep_last: int = option(2, help="keep the newest K checkpoints")
    log_every: int = option(10, help="metrics.jsonl + TensorBoard line every N steps")
    eval_every: int = option(200, help="validation MLM loss/accuracy every N steps (and at the end); 0 = only "
                             "at the end")
    eval_batches: int = option(20, help="validation micro-batches, fixed masks (comparable across evaluations)")
    seed: int = option_of(Shared, "seed", help="model init, data order, masking, dropout; in [0, 2^32 - 1]")


@dataclass
class RawCorpusKeys:
    """Raw-corpus path only (ignored when data is a SHARDDIR)."""
    section: ClassVar[str] = 'raw-corpus path only (ignored when data is a SHARDDIR)'
    vocab_kind: Literal["char", "wordpiece", "sentencepiece", "word"] = option(
        "char", help="`zh-bert vocab --kind`")
    vocab_size: Optional[int] = option(None, help="`zh-bert vocab --size`; null = the builder's default")
    doc_sep: DocSep = option_of(ReadOptions, "doc_sep", help="`zh-bert clean --doc-sep`: one document per line, blank-line separated, or one per file")
    valid_docs: Optional[int] = option_of(ShardConfig, "valid_docs", default=100, help="`zh-bert shard --valid-docs`: documents held out for validation")
    data_cache: Optional[str] = option(None, help="where the clean/vocab/shard outputs are cached; null = "
                                       "out_dir/data")


#: the recipe's key groups, in the order a rendered recipe lists them (`Recipe` is all of them)
GROUPS = (PlaceAndModelKeys, ObjectiveKeys, BatchKeys, OptimizerKeys, PrecisionKeys, BookkeepingKeys, RawCorpusKeys)
# the first key of each group opens a section of a rendered recipe (`render_recipe`, docs/pretrain.md's table)
SECTIONS = {dataclasses.fields(g)[0].name: g.section for g in GROUPS}
