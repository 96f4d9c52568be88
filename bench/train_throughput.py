"""Training tokens/s: zh-bert's pretrain step against the transformers Trainer, in the same process.

Same model config (BertForMaskedLM, Google's 21,128 vocab: the config `zh-bert pretrain` builds for the
preset, identical on both sides, attention dropout 0 as in the recipes), same real Chinese batches (zhwiki
sample, packed to 128 tokens, 15% token masking done once up front so both see identical inputs), same
batch (32 × 128), same precision, same optimizer (AdamW). Steps alternate (Trainer, zh-bert, matmul,
Trainer, ...) so all three see the same load on a shared machine; medians are compared. The Trainer
computes the full-vocabulary head at every position, as `BertForMaskedLM.forward` does; zh-bert runs its
real `train_step` (sparse head, fused AdamW, Accelerate). Useful-FLOP utilisation = useful FLOPs (encoder,
and the MLM head at masked positions only; `zh_bert.train.arch.bert.flops_per_token`) per second ÷ the FLOP/s of a
2048² matmul in the same precision.

    python -m bench.train_throughput                       # mini + small, fp32 (+ bf16 if the CPU has it)
    python -m bench.train_throughput --models mini --precisions fp32 --steps 6
    python -m bench.train_throughput --quick        # tiny, fp32, batch 8 × 64, 2 timed steps (a smoke test)
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from bench import REPO
from bench.cli import parse
from zh_bert.core.config import option

VOCAB = REPO / "tests" / "data" / "bert_base_chinese_vocab" / "vocab.txt"
CORPUS = REPO / "corpora" / "sample" / "zhwiki_sampled.txt"


def real_batches(n_batches: int, batch: int, seq_len: int, seed: int = 0) -> list[dict]:
    """Packed, masked batches of real Chinese text (token masking, 80/10/10)."""
    from transformers import BertTokenizer

    from zh_bert.train.masking import MaskingConfig, mask_batch

    tok = BertTokenizer(vocab=str(VOCAB))
    need = n_batches * batch * (seq_len - 2)
    ids: list[int] = []
    for line in CORPUS.read_text(encoding="utf-8").split("\n"):
        if line.strip():
            ids += tok.convert_tokens_to_ids(tok.tokenize(line)) + [tok.sep_token_id]
        if len(ids) >= need:
            break
    body = np.array((ids * (need // max(len(ids), 1) + 1))[:need], dtype=np.int64).reshape(-1, seq_len - 2)
    rows = np.concatenate([np.full((len(body), 1), tok.cls_token_id), body,
                           np.full((len(body), 1), tok.sep_token_id)], axis=1)
    rng = np.random.default_rng(seed)
    specials = [tok.pad_token_id, tok.cls_token_id, tok.sep_token_id, tok.mask_token_id, tok.unk_token_id]
    masked, labels = mask_batch(rows, np.ones_like(rows, dtype=bool), MaskingConfig(strategy="token"), rng,
                                mask_id=tok.mask_token_id, special_ids=specials, vocab_size=len(tok))
    out = []
    for b in range(n_batches):
        s = slice(b * batch, (b + 1) * batch)
        out.append({"input_ids": torch.from_numpy(masked[s]), "attention_mask": torch.ones(batch, seq_len, dtype=torch.long),
                    "token_type_ids": torch.zeros(batch, seq_len, dtype=torch.long), "labels": torch.from_numpy(labels[s])})
    return out


def _reset_accelerate():
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


HALF = {"fp16": torch.float16, "bf16": torch.bfloat16}


def set_tf32(on: bool) -> None:
    """fp32 matmuls in TF32 (on) or full fp32 (off) on CUDA, for both sides of a pair: the stable spelling,
    which the newer per-backend flags of torch follow."""
    torch.set_float32_matmul_precision("high" if on else "highest")


def bench_pair(cfg, batches, precision: str, warmup: int, device: str = "cpu",
               matmul_n: int = 2048) -> tuple[float, float, float]:
    """(Trainer tokens/s, zh-bert tokens/s, n² matmul FLOP/s), interleaved step by step so both see the same
    machine load. `precision`: fp32 | tf32 (fp32 with TF32 matmuls, CUDA) | fp16 | bf16; `device`: cpu | cuda.

    The Trainer trains on `batches`; after each of its steps a callback runs one zh-bert `train_step` (the
    one `zh-bert pretrain` runs, with its own fp16 loss scaler) on the same batch with its own model and
    optimizer. Each side's step time is measured separately (on CUDA between synchronisations, so queued
    kernels count where they run); medians over the steps after `warmup` are compared.
    """
    from transformers import BertForMaskedLM, Trainer, TrainerCallback, TrainingArguments

    from zh_bert.train.model import PretrainModel
    from zh_bert.train.recipe import Recipe
    from zh_bert.train.training import StepStats, lr_lambda, make_accelerator, make_optimizer, make_scaler, train_step

    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    set_tf32(precision == "tf32")
    _reset_accelerate()
    acc = make_accelerator("fp32" if precision == "tf32" else precision, cpu=not cuda)
    n = len(batches[0]["input_ids"])
    recipe = Recipe(lr=1e-4, warmup_steps=0, max_steps=len(batches), global_batch=n, micro_batch=n)
    torch.manual_seed(0)
    ours = PretrainModel(BertForMaskedLM(cfg))
    opt, _ = make_optimizer(ours, recipe)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(recipe))
    ours, opt = acc.prepare(ours, opt)
    ours.train()
    scaler = make_scaler(precision, acc.device, recipe)
    stats = StepStats()
    times = {"trainer": [], "zh-bert": [], "matmul": []}
    dtype = HALF.get(precision, torch.float32)
    mm_a = torch.randn(matmul_n, matmul_n, dtype=dtype, device=acc.device)
    mm_b = torch.randn(matmul_n, matmul_n, dtype=dtype, device=acc.device)

    class Interleave(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            sync()
            self.t = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            sync()
            times["trainer"].append(time.perf_counter() - self.t)
            t = time.perf_counter()
            train_step(ours, opt, sched, acc, [batches[state.global_step - 1]], recipe, stats,
                       state.global_step - 1, scaler)
            float(stats.loss)
            sync()
            times["zh-bert"].append(time.perf_counter() - t)
            t = time.perf_counter()
            mm_a @ mm_b                       # the reference matmul, under the same load
            sync()
            times["matmul"].append(time.perf_counter() - t)

    torch.manual_seed(0)
    model = BertForMaskedLM(cfg)
    rows = [{k: v[i] for k, v in b.items()} for b in batches for i in range(n)]
    if precision == "fp16":   # Accelerate's one process-wide state: zh-bert's "no" (its own scaler) vs the
        from accelerate.state import AcceleratorState   # Trainer's "fp16" would be refused; zh-bert's prepared
        AcceleratorState._reset_state(reset_partial_state=False)   # model and its step need none of it
    from zh_bert.core.fileio import claim_dir, remove_scratch

    output_dir = tempfile.mkdtemp(prefix="zh-bert-bench-trainer-")
    claim_dir(output_dir)   # the Trainer's scratch folder, ours to delete
    args = TrainingArguments(output_dir=output_dir, per_device_train_batch_size=n,
                             max_steps=len(batches), learning_rate=1e-4, warmup_steps=0, weight_decay=0.01,
                             use_cpu=not cuda, bf16=precision == "bf16", fp16=precision == "fp16", report_to=[],
                             logging_steps=10_000, save_strategy="no", dataloader_num_workers=0, disable_tqdm=True,
                             seed=0)
    Trainer(model=model, args=args, train_dataset=rows, callbacks=[Interleave()]).train()
    remove_scratch(args.output_dir)
    set_tf32(False)
    tokens = batches[0]["input_ids"].numel()
    med = {k: float(np.median(v[warmup:])) for k, v in times.items()}
    return tokens / med["trainer"], tokens / med["zh-bert"], 2 * matmul_n ** 3 / med["matmul"]


@dataclass
class Options:
    models: str = option("mini,small", metavar="A,B", help="presets (comma-separated)")
    precisions: Optional[str] = option(None, metavar="A,B", help="default: fp32, plus bf16 when the CPU has "
                                       "avx512_bf16")
    steps: int = option(8, help="timed steps per run (after 2 warm-up steps)")
    threads: int = option(2, help="torch threads")
    attention_dropout: bool = option(False, help="both sides with attention dropout 0.1 (HF's default) instead of "
                                     "the presets' 0.0")
    quick: bool = option(False, help="tiny model, fp32, small batches: a smoke test")


def main(argv: list[str] | None = None) -> None:
    args = parse(Options, "train_throughput", __doc__, argv)
    from transformers.utils import logging as hf_logging

    from zh_bert.core.hardware import cpu_supports_bf16
    from zh_bert.train.arch.bert import build_config, flops_per_token

    hf_logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    precisions = args.precisions.split(",") if args.precisions else ["fp32"] + (["bf16"] if cpu_supports_bf16() else [])
    warmup, batch, seq = 2, 32, 128
    if args.quick:
        args.models, precisions, args.steps, warmup, batch, seq = "tiny", ["fp32"], 2, 1, 8, 64
    batches = real_batches(warmup + args.steps, batch, seq)
    mask_rate = float(np.mean([(b["labels"] != -100).float().mean() for b in batches]))
    print(f"torch {torch.__version__}, {args.threads} threads")
    print(f"batch {batch} × {seq}, vocab 21128, masked fraction {mask_rate:.3f}, {args.steps} timed steps\n")
    print("| model | precision | Trainer tokens/s | zh-bert tokens/s | ratio | 2048² matmul GFLOP/s | "
          "zh-bert useful-FLOP utilisation |")
    print("|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        cfg = build_config(name, 21128, **({"attention_dropout": 0.1} if args.attention_dropout else {}))
        for prec in precisions:
            base, ours, peak = bench_pair(cfg, batches, prec, warmup)
            util = ours * flops_per_token(cfg, seq, mask_rate) / peak
            print(f"| {name} | {prec} | {base:,.0f} | {ours:,.0f} | **{ours / base:.2f}×** | {peak / 1e9:.0f} | {util:.0%} |", flush=True)


if __name__ == "__main__":
    main()
