"""`objective: distill`: task-agnostic knowledge distillation of a released masked LM (the teacher) into the
recipe's model (the student), as HFL's MiniRBT and TextBrewer's general distillation do it. The student reads
the teacher's tokenizer and is trained on masked text by
  kd_weight        × soft cross-entropy between softmax(teacher logits / T) and the student's, on masked positions
  hidden_weight    × MSE between the student's hidden states (through a learned linear projection to the
                     teacher's width) and the teacher's, on the `layer_map` pairs, per real token
  attention_weight × MSE between their attention maps on the same pairs (optional)
  mlm_weight       × the student's own masked-LM loss on the true tokens (optional)
each a sum normalised by the global batch's count, as every loss of the loop is (TextBrewer's means; no T²).

The teacher is a model folder, run dir, checkpoint, catalog alias or Hub id (a name that is no local path goes
to the model sources a later stage registers: `zh-bert download`'s). It runs frozen (eval mode, no gradients)
at the run's precision, is never saved into a checkpoint or `final/` (its path and the sha256 of its weights
are recorded; a resume refuses a changed teacher), and is refused in one line before any data work when it is
no masked LM, its vocabulary is not the student's, the layer map or the projection cannot map it, or the
temperature is not positive. A teacher -> assistant -> student chain is two recipes: the assistant's run dir
is the second one's teacher. The torch side is `distill_net`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from zh_bert.core.errors import ZhBertError
from zh_bert.corpus.corpus_io import bounded_lines
from zh_bert.corpus.tokenizer_files import tokenizer_fingerprint
from zh_bert.train.arch.base import FAMILIES
from zh_bert.train.objectives.base import LossTerm, Objective, add_objective
from zh_bert.train.objectives.teacher import plan_teacher, teacher_config, teacher_facts, teacher_folder

#: the text `--print-recipe` and `plan` measure the teacher's soft targets on, when the recipe names none
SAMPLE_TEXT = Path(__file__).resolve().parents[3] / "corpora" / "sample" / "zhwiki_sampled.txt"
SAMPLE_LINES = 64


def _first_lines(path: Path, n: int) -> list[str]:
    """The first `n` non-blank lines of a text file, each read within the corpus line bound."""
    out = []
    with open(path, "rb") as f:
        for raw in bounded_lines(f):
            text = raw.decode("utf-8", "replace").strip() if isinstance(raw, bytes) else ""
            if text:
                out.append(text)
            if len(out) == n:
                break
    return out


def uniform_layer_map(student_layers: int, teacher_layers: int) -> list[list[int]]:
    """[0, 0] (the embeddings' output) and student layer i with teacher layer round(i × Lt / Ls): MiniRBT's and
    TextBrewer's L4 presets (teacher 3, 6, 9, 12 for a 4-layer student of a 12-layer teacher)."""
    return [[0, 0]] + [[i, round(i * teacher_layers / student_layers)] for i in range(1, student_layers + 1)]


class Distill(Objective):
    name = "distill"
    summary = "knowledge distillation of a teacher masked LM (soft targets at T, hidden states, attention)"
    logged = Objective.logged + ("kd_loss_sum", "kd_agree", "hidden_loss_sum", "attention_loss_sum")
    validated = Objective.validated + ("kd_loss_sum", "kd_agree")

    # ----------------------------------------------------------------------------------------- recipe
    def check_recipe(self, recipe):
        if recipe.teacher is None or not str(recipe.teacher).strip():
            raise ZhBertError("objective distill needs 'teacher': a masked LM's folder, run dir, catalog alias or "
                              "Hub id")
        if not recipe.temperature > 0:
            raise ZhBertError(f"'temperature' must be > 0 (softmax(logits / T)), got {recipe.temperature}")
        weights = {k: getattr(recipe, k) for k in ("kd_weight", "hidden_weight", "attention_weight", "mlm_weight")}
        bad = next((k for k, v in weights.items() if v < 0), None)
        if bad:
            raise ZhBertError(f"'{bad}' must be >= 0, got {weights[bad]}")
        if not any(weights.values()):
            raise ZhBertError("objective distill with every loss weight 0 (kd_weight, hidden_weight, "
                              "attention_weight, mlm_weight) learns nothing: give one a positive weight")
        for i, pair in enumerate(recipe.layer_map or ()):
            if len(pair) != 2 or min(pair) < 0:
                raise ZhBertError(f"layer_map[{i}] must be [student layer, teacher layer], layers >= 0 (0 = the "
                                  f"embeddings' output), got {pair}")
        if recipe.student_init == "teacher-layers" and recipe.init_from:
            raise ZhBertError("student_init teacher-layers starts the student from the teacher; init_from starts it "
                              "from a checkpoint: set one of them")

    def check_inputs(self, recipe):
        """The teacher, before any data work: a masked LM of a known family, the student's vocabulary, layer
        map, projection and (for teacher-layers) widths that fit it."""
        folder = teacher_folder(recipe.teacher)
        teacher = teacher_config(folder)
        self._check_vocab(recipe, folder)
        student = recipe.arch.config(recipe, max(teacher.integer("vocab_size", 1, lo=1, hi=1 << 24), 1))
        self.check_shapes(recipe, student, teacher.data, folder)
        positions = teacher.integer("max_position_embeddings", recipe.seq_len, lo=1, hi=1 << 24)
        if recipe.seq_len > positions:
            raise ZhBertError(f"seq_len {recipe.seq_len} exceeds teacher {folder}'s max_position_embeddings "
                              f"{positions}")

    @staticmethod
    def _check_vocab(recipe, folder: Path) -> None:
        """The student reads the teacher's tokenizer: another one (`tokenizer:`, init_from's) is refused."""
        given = recipe.tokenizer or recipe.init_from
        if given and tokenizer_fingerprint(given) != tokenizer_fingerprint(folder):
            key = "tokenizer" if recipe.tokenizer else "init_from"
            raise ZhBertError(f"vocab mismatch: {key} {given} is not teacher {recipe.teacher}'s tokenizer "
                              f"({folder}); the student reads the teacher's: remove '{key}' or give its folder")

    def layer_pairs(self, recipe, student_layers: int, teacher_layers: int) -> list[tuple[int, int]]:
        """`layer_map` (or the uniform one) as (student, teacher) hidden-state indices, each in range."""
        pairs = getattr(recipe, "layer_map", None) or uniform_layer_map(student_layers, teacher_layers)
        for s, t in pairs:
            for who, layer, top in (("student", s, student_layers), ("teacher", t, teacher_layers)):
                if layer > top:
                    raise ZhBertError(f"layer_map [{s}, {t}]: {who} layer {layer} is out of range: the {who} has "
                                      f"{top} layers (0 = the embeddings' output, {top} = the last)")
        return [(s, t) for s, t in pairs]

    def check_shapes(self, recipe, student, teacher: dict, folder) -> None:
        """What the losses and the start need of the two shapes (`student` a config, `teacher` config.json)."""
        lt, ht, at = (teacher["num_hidden_layers"], teacher["hidden_size"], teacher["num_attention_heads"])
        ls, hs, hs_heads = student.num_hidden_layers, student.hidden_size, student.num_attention_heads
        pairs = self.layer_pairs(recipe, ls, lt)
        if recipe.hidden_weight > 0 and recipe.projection == "none" and hs != ht:
            raise ZhBertError(f"projection none cannot map the student's hidden size {hs} to teacher {folder}'s "
                              f"{ht}: set projection: linear, or a student of width {ht}")
        if recipe.attention_weight > 0 and hs_heads != at:
            raise ZhBertError(f"attention_weight {recipe.attention_weight:g} compares attention maps head by head, "
                              f"but the student has {hs_heads} heads and teacher {folder} {at}: set "
                              f"attention_weight: 0 or a student with {at} heads")
        if recipe.student_init == "teacher-layers":
            want = (ht, at, teacher.get("intermediate_size"), teacher.get("model_type") or "bert")
            have = (hs, hs_heads, student.intermediate_size, student.model_type)
            if want != have:
                raise ZhBertError(f"student_init teacher-layers copies teacher layers, but model {recipe.model} is "
                                  f"{have[3]} H{hs}/A{hs_heads}/I{have[2]} and teacher {folder} {want[3]} "
                                  f"H{ht}/A{at}/I{want[2]}: give a student config.json of the teacher's widths "
                                  f"and family, or student_init: random")
            paired = [s for s, t in pairs if s and t]
            if sorted(paired) != list(range(1, ls + 1)):
                raise ZhBertError(f"student_init teacher-layers: layer_map {[list(p) for p in pairs]} must pair each "
                                  f"student layer 1..{ls} with one teacher layer (past the embeddings, 0)")

    def input_paths(self, recipe):
        return [recipe.teacher] if Path(recipe.teacher).exists() else []

    def data_recipe(self, recipe):
        """The data is tokenised, and the student reads, with the teacher's tokenizer."""
        return dataclasses.replace(recipe, tokenizer=str(teacher_folder(recipe.teacher)))

    def check_shards(self, recipe, meta, where):
        folder = teacher_folder(recipe.teacher)
        if meta.get("tokenizer_fingerprint") != tokenizer_fingerprint(folder):
            raise ZhBertError(f"vocab mismatch: {where} was built with tokenizer {meta.get('tokenizer', '?')}, not "
                              f"teacher {recipe.teacher}'s ({folder}); shard with --tokenizer {folder}, or give the "
                              f"raw corpus")

    def loss_terms(self, recipe):
        terms = (LossTerm("mlm_loss_sum", "masked", recipe.mlm_weight), LossTerm("kd_loss_sum", "masked", recipe.kd_weight),
                 LossTerm("hidden_loss_sum", "tokens", recipe.hidden_weight),
                 LossTerm("attention_loss_sum", "tokens", recipe.attention_weight))
        return tuple(t for t in terms if t.weight > 0)

    def divergence_hint(self, recipe):
        return " or the loss weights (kd_weight, hidden_weight, attention_weight)"

    # ----------------------------------------------------------------------------------------- models
    def build(self, recipe, cfg, arch, tokenizer=None, hf=None):
        from zh_bert.train.objectives.distill_net import build_networks

        return build_networks(self, recipe, cfg, arch, hf)

    def random_networks(self, recipe, cfg, arch, config_of):
        """A random student and a random teacher of the plan's teacher shape (`plan --measure`)."""
        from zh_bert.train.objectives.distill_net import random_networks

        model, family = plan_teacher(recipe.teacher, recipe.architecture)
        return random_networks(self, recipe, cfg, arch, config_of(model, family))

    def module(self, nets, recipe):
        from zh_bert.train.objectives.distill_net import DistillModel

        return DistillModel(nets.hf, nets.frozen["teacher"], self.layer_pairs(
            recipe, nets.hf.config.num_hidden_layers, nets.frozen["teacher"].config.num_hidden_layers), recipe)

    def place(self, nets, device, precision):
        from zh_bert.train.objectives.distill_net import place_teacher

        place_teacher(nets.frozen["teacher"], device, precision)

    def module_state(self, module):
        return {f"projection.{k}": v for k, v in module.projection.state_dict().items()}

    def load_module_state(self, module, tensors, where):
        own = self.module_state(module)
        if set(tensors) != set(own):
            raise ZhBertError(f"{where}: the checkpoint's projection ({len(tensors)} tensors) does not fit this "
                              f"run's layer_map and widths ({len(own)})")
        module.projection.load_state_dict({k.removeprefix("projection."): v for k, v in tensors.items()})

    def run_state(self, recipe):
        return {"teacher": teacher_facts(recipe.teacher)}

    def check_resume(self, saved, recipe, where):
        now = self.run_state(recipe)["teacher"]
        then = saved.get("teacher") if isinstance(saved.get("teacher"), dict) else {}
        if then.get("sha256") != now["sha256"]:
            raise ZhBertError(f"{where}: teacher {now['name']} changed since this checkpoint (sha256 "
                              f"{str(then.get('sha256'))[:12]}... of {then.get('path')} then, {now['sha256'][:12]}... "
                              f"of {now['path']} now): resume with the teacher the run started with, or start a "
                              f"new run")

    # ----------------------------------------------------------------------------------------- reporting
    def train_row(self, sums, counts):
        masked, toks = max(counts["masked"], 1), max(counts["tokens"], 1)
        return {"kd_loss": sums["kd_loss_sum"] / masked, "teacher_agree": sums["kd_agree"] / masked,
                "hidden_loss": sums["hidden_loss_sum"] / toks, "attention_loss": sums["attention_loss_sum"] / toks}

    def progress_fields(self):
        return ("kd_loss", "teacher_agree")

    def validation_row(self, sums):
        masked = max(sums["mlm_count"], 1.0)
        return {"val_kd_loss": sums["kd_loss_sum"] / masked, "val_teacher_agree": sums["kd_agree"] / masked}

    def describe(self, nets):
        from zh_bert.train.model import count_params

        t = nets.frozen["teacher"]
        return (f" | teacher {t.name_or_path} ({type(t).__name__} L{t.config.num_hidden_layers}/"
                f"H{t.config.hidden_size}, {count_params(t) / 1e6:.1f}M, frozen)")

    def start_report(self, run):
        """The teacher's soft-target entropy at `temperature` on the run's first batches, as a fraction of ln V,
        and one warning line when they are almost uniform, naming a temperature that keeps signal."""
        from zh_bert.train.objectives.distill_net import (
            TEMPERATURES, entropy_lines, first_batches, soft_target_entropy)

        r, vocab = run.recipe, run.hf.config.vocab_size
        temps = sorted({float(r.temperature), *TEMPERATURES}, reverse=True)
        entropy = soft_target_entropy(run.nets.frozen["teacher"], first_batches(run), temps, vocab)
        if entropy:
            line, warning = entropy_lines(entropy, r.temperature, vocab, "the run's first 2 micro-batches")
            run.say(line)
            if warning:
                run.warn(warning)

    def recipe_notes(self, recipe):
        """The same measure on the first lines of the recipe's text (or the bundled sample) when the teacher is a
        local folder: a Hub teacher is not fetched to print a recipe."""
        from zh_bert.train.objectives.distill_net import entropy_on_text

        if not recipe.teacher or not Path(str(recipe.teacher)).exists():
            return []
        data = getattr(recipe, "data", None)     # `plan` has no data: the bundled sample
        where = next((Path(d) for d in ([data] if isinstance(data, str) else data or [])
                      if str(d).endswith(".txt") and Path(d).is_file()), SAMPLE_TEXT)
        if not where.is_file():
            return []
        texts = _first_lines(where, SAMPLE_LINES)
        line, warning = entropy_on_text(recipe, teacher_folder(recipe.teacher), texts,
                                        f"the first {len(texts)} lines of {where}")
        return [line] + ([warning] if warning else [])

    def summary_fields(self, run):
        from zh_bert.train.model import count_params

        t, r = run.nets.frozen["teacher"], run.recipe
        pairs = self.layer_pairs(r, run.hf.config.num_hidden_layers, t.config.num_hidden_layers)
        return {"teacher": {**self.run_state(r)["teacher"], "class": type(t).__name__,
                            "num_hidden_layers": t.config.num_hidden_layers, "hidden_size": t.config.hidden_size,
                            "parameters": count_params(t)},
                "distill": {"temperature": r.temperature, "kd_weight": r.kd_weight, "hidden_weight": r.hidden_weight,
                            "attention_weight": r.attention_weight, "mlm_weight": r.mlm_weight,
                            "layer_map": [list(p) for p in pairs], "projection": r.projection,
                            "student_init": r.student_init}}

    def card_rows(self, run):
        teacher, how = run.get("teacher"), run.get("distill")
        if not isinstance(teacher, dict) or not isinstance(how, dict):
            return []
        terms = ", ".join(f"{k.removesuffix('_weight')} × {how[k]:g}" for k in
                          ("kd_weight", "hidden_weight", "attention_weight", "mlm_weight")
                          if isinstance(how.get(k), (int, float)) and how[k] > 0)
        return [f"| teacher | `{teacher.get('name')}` ({teacher.get('class', '?')}, {teacher.get('num_hidden_layers', '?')} "
                f"layers, hidden {teacher.get('hidden_size', '?')}; weights sha256 `{str(teacher.get('sha256'))[:16]}`) |",
                f"| distillation | temperature {how.get('temperature')}, {terms}; layer map (student, teacher) "
                f"{how.get('layer_map')}; student start: {how.get('student_init')} |"]

    # ----------------------------------------------------------------------------------------- plan
    def _plan_teacher(self, cfg, args, config_of):
        """(the teacher's config, the learned projections' weights) of a plan."""
        teacher = config_of(*plan_teacher(args.teacher, args.architecture))
        pairs = self.layer_pairs(args, cfg.num_hidden_layers, teacher.num_hidden_layers)
        linear = args.projection == "linear" and getattr(args, "hidden_weight", 1.0) > 0
        return teacher, (len(pairs) * (cfg.hidden_size * teacher.hidden_size + teacher.hidden_size) if linear else 0)

    def plan_shape(self, cfg, arch, args, shapes, config_of):
        """The student and its projections train; the teacher only runs forward, frozen."""
        teacher, projection = self._plan_teacher(cfg, args, config_of)
        pairs = len(self.layer_pairs(args, cfg.num_hidden_layers, teacher.num_hidden_layers))
        return shapes.with_teacher(shapes.from_config(cfg), shapes.from_config(teacher), projection, pairs)

    def flops_per_token(self, cfg, arch, args, mask_rate, config_of):
        """The student's training FLOPs + the teacher's forward (a third of its training FLOPs, its head at the
        masked positions) + the projections' matmuls (trained: 6 FLOPs per multiply-accumulate)."""
        teacher, projection = self._plan_teacher(cfg, args, config_of)
        t_arch = FAMILIES.get(teacher.model_type) or arch
        return (arch.flops_per_token(cfg, args.seq_len, mask_rate)
                + t_arch.flops_per_token(teacher, args.seq_len, mask_rate) / 3 + 6.0 * projection)


DISTILL = add_objective(Distill())
