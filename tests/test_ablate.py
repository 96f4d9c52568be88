"""`zh-bert ablate`: a real two-run grid (tiny pretraining on real text, held-out MLM eval, fine-tuning)."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import REPO, SAMPLE, read_lines
from zh_bert.evaluation.commands import ablate
from zh_bert.evaluation.ablation import results as ablation_results
from zh_bert import cli
from zh_bert.evaluation.ablation.spec import load_spec, plan_runs
from zh_bert.core.errors import ZhBertError

CHNSENTI = REPO / "corpora" / "tasks" / "chnsenticorp"


def write_yaml(path, obj):
    path.write_text(yaml.safe_dump(obj, allow_unicode=True), encoding="utf-8")
    return path


@pytest.fixture
def smoke_spec(tmp_path):
    corpus = tmp_path / "wiki.txt"
    corpus.write_text("\n".join(read_lines(SAMPLE / "zhwiki_sampled.txt", 160)) + "\n", encoding="utf-8")
    rows = [l.split("\t", 1) for l in read_lines(CHNSENTI / "train.tsv")[1:]]
    pos, neg = [r for r in rows if r[0] == "1"], [r for r in rows if r[0] == "0"]
    (tmp_path / "train.tsv").write_text("".join(f"{l}\t{t}\n" for l, t in pos[:24] + neg[:24]), encoding="utf-8")
    (tmp_path / "dev.tsv").write_text("".join(f"{l}\t{t}\n" for l, t in pos[24:34] + neg[24:34]), encoding="utf-8")
    write_yaml(tmp_path / "base.yaml", {
        "out_dir": str(tmp_path / "unused"), "data": [str(corpus)], "model": "tiny", "seq_len": 64,
        "global_batch": 8, "micro_batch": 8, "lr": 2e-3, "warmup_steps": 1, "max_steps": 4, "save_every": 0,
        "eval_every": 0, "eval_batches": 1, "log_every": 2, "valid_docs": 8, "precision": "fp32"})
    return write_yaml(tmp_path / "grid.yaml", {
        "name": "smoke", "base": "base.yaml", "out_dir": str(tmp_path / "out"), "grid": {"masking": ["token", "wwm"]},
        "set": {"max_steps": 4}, "heldout_docs": 20, "eval_max_seqs": 8,
        "finetune": f"tsv:{tmp_path / 'train.tsv'},{tmp_path / 'dev.tsv'}", "finetune_seeds": 2,
        "finetune_epochs": 1, "finetune_seq_len": 32})


def test_ablate_grid_end_to_end(smoke_spec, tmp_path, capsys):
    import torch

    torch.set_num_threads(1)
    assert cli.main(["ablate", str(smoke_spec)]) == 0
    out = capsys.readouterr().out
    res = json.loads(out.strip().split("\n")[-1])
    rows, baseline = res["rows"][:2], res["rows"][2]
    assert [r["value"] for r in rows] == ["token", "wwm"]
    assert baseline["label"] == "random init" and baseline["tokens"] == 0 and 0 <= baseline["dev_acc"] <= 1
    assert rows[0]["tokens"] == rows[1]["tokens"] == 4 * 8 * 64          # same budget in tokens
    assert rows[0]["heldout_masked"] == rows[1]["heldout_masked"] > 0      # the same held-out blanks
    for r in rows:
        assert 0 <= r["heldout_mlm_acc"] <= 1 and 0 <= r["val_mlm_acc"] <= 1
        assert 0 <= r["dev_acc"] <= 1 and "dev_acc_std" in r
        kinds = {e["task_type"] for e in json.loads((tmp_path / "out" / "runs" / f"masking={r['value']}" /
                                                      "eval_results.json").read_text(encoding="utf-8"))}
        assert kinds == {"fill-mask", "text-classification"}
    md = (tmp_path / "out" / "results.md").read_text(encoding="utf-8")
    assert "| token |" in md and "| wwm |" in md and "| random init" in md and "held-out MLM acc" in md and "± " in md
    assert "order gain" in md and all(-1 <= r["heldout_order_gain"] <= 1 for r in rows)
    assert (tmp_path / "out" / "results.png").read_bytes()[:4] == b"\x89PNG"
    # held-out documents never reach training: carved off before any run
    held = set((tmp_path / "out" / "corpus" / "heldout.txt").read_text(encoding="utf-8").split("\n")) - {""}
    train = set((tmp_path / "out" / "corpus" / "train-100" / "00-wiki.txt").read_text(encoding="utf-8").split("\n"))
    assert len(held) == 20 and not held & train
    # a re-run reuses the finished runs and their evals
    assert cli.main(["ablate", str(smoke_spec)]) == 0
    assert "reusing finished run" in capsys.readouterr().out


def test_ablate_spec_errors(tmp_path, capsys):
    bad = write_yaml(tmp_path / "two.yaml", {"name": "x", "grid": {"masking": ["token", "wwm"], "model": ["tiny", "mini"]}})
    with pytest.raises(ZhBertError, match="exactly one key"):
        load_spec(bad)
    typo = write_yaml(tmp_path / "typo.yaml", {"name": "x", "grid": {"masking": ["token", "wwm"]}, "finetune_sed": 3})
    assert cli.main(["ablate", str(typo)]) == 2
    assert "unknown key 'finetune_sed' (did you mean 'finetune_seeds'?)" in capsys.readouterr().err
    pool = write_yaml(tmp_path / "p.yaml", {"name": "x", "grid": {"masking": ["token", "wwm"]}, "finetune_pooling": "avg"})
    with pytest.raises(ZhBertError, match="'finetune_pooling' must be one of 'auto', 'cls', 'mean', 'first-last-avg', got 'avg'"):
        load_spec(pool)   # refused before any run starts, not after the first pretraining
    assert cli.main(["ablate", str(pool), "--set", "finetune_pooling=mean", "--set", "finetune_precision=fp8"]) == 2
    assert "'finetune_precision' must be one of 'auto', 'fp32', 'fp16', 'bf16', got 'fp8'" in capsys.readouterr().err
    lr = write_yaml(tmp_path / "lr.yaml", {"name": "x", "grid": {"masking": ["token", "wwm"]}, "finetune_lr": 5})
    with pytest.raises(ZhBertError, match=r"lr.yaml: finetune_lr must be in \(0, 1\), got 5"):
        load_spec(lr)
    from zh_bert.evaluation.ablation.spec import AblationSpec

    with pytest.raises(ZhBertError, match="'eval_masking' must be one of"):
        AblationSpec(name="x", grid={"masking": ["token", "wwm"]}, eval_masking="words")   # the Python API too
    frac = write_yaml(tmp_path / "f.yaml", {"name": "x", "grid": {"corpus_fraction": [0.5, 1.5]}})
    with pytest.raises(ZhBertError, match="not in"):
        plan_runs(load_spec(frac))


def test_eval_cache_is_keyed_per_task_on_the_whole_finetune_spec(tmp_path, monkeypatch):
    """Changing only finetune_precision re-runs a run's fine-tuning (and the random-init baseline); the same
    spec again reuses it; adding a task runs only the new task, for the run and the baseline."""
    from zh_bert.core.fileio import claim_dir

    claim_dir(tmp_path)   # what `zh-bert ablate` does with its out_dir before the first run
    corpus = tmp_path / "wiki.txt"
    corpus.write_text("\n".join(read_lines(SAMPLE / "zhwiki_sampled.txt", 20)) + "\n", encoding="utf-8")
    spec_path = write_yaml(tmp_path / "g.yaml", {"name": "x", "grid": {"masking": ["token", "wwm"]}, "heldout_docs": 0})
    out = tmp_path / "out"
    run = plan_runs(load_spec(spec_path))[0]
    run_dir = out / "runs" / run.label
    (run_dir / "final").mkdir(parents=True)
    (run_dir / "final" / "config.json").write_text("{}", encoding="utf-8")
    (run_dir / "run.json").write_text('{"status": "finished"}', encoding="utf-8")   # reused, never trained here
    calls = []

    def fake_finetune(spec, task, model_dir, random_init=False):
        calls.append((task, spec.finetune.config.precision, "random" if random_init else "run"))
        return {"task": task, "dev_acc": 0.5 if task == "chnsenticorp" else 0.25, "seeds": spec.finetune.seed_list()}

    monkeypatch.setattr(ablation_results, "_finetune", fake_finetune)
    monkeypatch.setattr(ablation_results, "record", lambda *a, **k: None)

    def evaluate(**overrides):
        spec = load_spec(spec_path, overrides)
        row = ablation_results.run_one(spec, run, {"data": [str(corpus)]}, out, None, None, {}, log=lambda m: None)
        return row, ablation_results.random_init_row(spec, row, out, log=lambda m: None)

    evaluate()
    evaluate()
    assert calls == [("chnsenticorp", "fp32", "run"), ("chnsenticorp", "fp32", "random")]   # cache hit
    evaluate(finetune_precision="bf16")
    assert calls[2:] == [("chnsenticorp", "bf16", "run"), ("chnsenticorp", "bf16", "random")]
    row, base = evaluate(finetune_precision="bf16", finetune="chnsenticorp,tnews")
    assert calls[4:] == [("tnews", "bf16", "run"), ("tnews", "bf16", "random")]          # only the new task
    for r in (row, base):
        assert r["dev_acc"] == 0.5 and r["finetune"]["tnews"]["dev_acc"] == 0.25   # flat keys: the first task
    evaluate(finetune_precision="bf16", finetune=["chnsenticorp", "tnews"])
    assert len(calls) == 6
    with pytest.raises(ZhBertError, match="'finetune' names tnews twice"):
        load_spec(spec_path, {"finetune": "tnews,tnews"})
    assert load_spec(spec_path, {"finetune": "tsv:a.tsv,b.tsv"}).finetune.tasks == ["tsv:a.tsv,b.tsv"]
    assert load_spec(spec_path, {"finetune": None}).finetune.tasks == []


def test_bundled_ablation_recipes_parse():
    from conftest import REPO
    from zh_bert.train.recipe import load_recipe

    specs = sorted((REPO / "recipes" / "ablations").rglob("*.yaml"))
    assert len(specs) >= 12   # six grids for this CPU + the same six for one 1080 Ti
    for path in specs:
        spec = load_spec(path)
        base = path.parent / spec.base
        for run in plan_runs(spec):
            r = load_recipe(base, {**spec.set, **run.overrides})   # every run is a valid recipe
            if spec.budget == "tokens":
                assert r.max_steps == spec.set.get("max_steps", r.max_steps)


def test_flops_budget_gives_each_run_the_first_runs_training_flops(tmp_path):
    """`budget: flops`: ELECTRA (generator + discriminator) trains fewer steps than MLM, by plan's FLOP ratio."""
    from conftest import REPO
    from zh_bert.evaluation.ablation.spec import recipe_flops_per_token, run_recipe

    path = REPO / "recipes" / "ablations" / "objective-compute.yaml"
    spec = load_spec(path)
    base = yaml.safe_load((path.parent / spec.base).read_text(encoding="utf-8"))
    recipes = [run_recipe(spec, r, base, tmp_path, ["x.txt"], {}) for r in plan_runs(spec)]
    steps = [r.max_steps for r in recipes]
    assert steps[0] == steps[1] == spec.set["max_steps"] and steps[2] < steps[0]
    flops = [r.max_steps * recipe_flops_per_token(r) for r in recipes]
    assert all(abs(f / flops[0] - 1) < 1e-3 for f in flops)


def _tree(root):
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*")}


@pytest.fixture
def small_spec(tmp_path):
    """A valid spec on a 40-document corpus (base recipe next to it), fine-tuning off."""
    corpus = tmp_path / "wiki.txt"
    corpus.write_text("\n".join(read_lines(SAMPLE / "zhwiki_sampled.txt", 40)) + "\n", encoding="utf-8")
    write_yaml(tmp_path / "base.yaml", {"data": [str(corpus)], "model": "tiny", "seq_len": 64, "global_batch": 8,
                                        "micro_batch": 8, "max_steps": 2})
    return write_yaml(tmp_path / "grid.yaml", {"name": "s", "base": "base.yaml", "out_dir": str(tmp_path / "out"),
                                               "grid": {"masking": ["token", "wwm"]}, "heldout_docs": 5,
                                               "finetune": None})


def test_dry_run_checks_everything_and_writes_nothing(small_spec, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    before = _tree(tmp_path)
    assert cli.main(["ablate", str(small_spec), "--dry-run"]) == 0
    assert "masking=token: pretrain" in capsys.readouterr().out
    assert _tree(tmp_path) == before                       # no corpus carved, no out dir, no run dir
    spec = yaml.safe_load(small_spec.read_text(encoding="utf-8"))
    for bad, says in [({"grid": {"masking": ["token", "foo"]}}, "run masking=foo"),
                      ({"grid": {"max_steps": [3, -5]}}, "run max_steps=-5"),
                      ({"grid": {"masking": ["wwm", "wwm"]}}, "appears twice"),
                      ({"heldout_docs": 30}, "too few to hold out 30")]:
        write_yaml(small_spec, {**spec, **bad})
        assert cli.main(["ablate", str(small_spec), "--dry-run"]) == 2
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1, err
        assert _tree(tmp_path) == {**before, "grid.yaml": small_spec.stat().st_size}


def test_a_bad_last_grid_value_is_refused_before_the_first_run_trains(small_spec, monkeypatch, capsys):
    """Run 1 is valid, run 2 is not: nothing is pretrained, carved or written (not even with --only run 1)."""
    from zh_bert.train import pretrain

    trained = []
    monkeypatch.setattr(pretrain, "train", lambda *a, **k: trained.append(a) or {"status": "finished"})
    spec = yaml.safe_load(small_spec.read_text(encoding="utf-8"))
    write_yaml(small_spec, {**spec, "grid": {"max_steps": [2, -5]}})
    for extra in ([], ["--only", "max_steps=2"]):
        assert cli.main(["ablate", str(small_spec), *extra]) == 2
        assert "run max_steps=-5" in capsys.readouterr().err
    assert not trained and not (small_spec.parent / "out").exists()


def test_spec_errors_name_the_key(tmp_path):
    with pytest.raises(ZhBertError, match="empty spec"):
        load_spec(_empty(tmp_path))
    from zh_bert.evaluation.ablation.spec import AblationSpec

    with pytest.raises(ZhBertError, match="'a' appears twice|x=a"):   # the Python API checks labels too
        AblationSpec(name="x", grid={"x": [{"label": "a", "set": {}}, {"label": "a", "set": {"masking": "wwm"}}]})
    for bad in (float("nan"), float("inf"), "abc", True):
        with pytest.raises(ZhBertError, match="corpus_fraction"):
            AblationSpec(name="x", grid={"corpus_fraction": [0.5, bad]})


def _empty(folder):
    from pathlib import Path

    path = Path(folder) / "empty.yaml"
    path.write_text("", encoding="utf-8")
    return path


def test_a_corpus_carved_from_other_settings_is_refused(small_spec, tmp_path):
    """heldout_docs changed after a carve: the old training copies and held-out text are not reused."""
    from pathlib import Path

    from zh_bert.evaluation.ablation.corpus import carve_corpus

    files = [tmp_path / "wiki.txt"]
    from zh_bert.core.fileio import claim_dir

    claim_dir(tmp_path / "out")   # what `zh-bert ablate` does with its out_dir before carving
    train, held = carve_corpus(files, tmp_path / "out" / "corpus", 5, {1.0}, "line")
    assert len(held.read_text(encoding="utf-8").split("\n")) == 6 and Path(train[1.0][0]).is_file()
    assert carve_corpus(files, tmp_path / "out" / "corpus", 5, {1.0}, "line")[1] == held   # same: reused
    with pytest.raises(ZhBertError, match="carved from other corpus files or another heldout_docs"):
        carve_corpus(files, tmp_path / "out" / "corpus", 6, {1.0}, "line")
    spec = yaml.safe_load(small_spec.read_text(encoding="utf-8"))
    write_yaml(small_spec, {**spec, "heldout_docs": 6})
    with pytest.raises(ZhBertError, match="delete"):
        ablate.plan_ablation(ablate.AblateArgs(spec=str(small_spec), dry_run=True))


def test_a_later_run_dir_from_other_settings_is_refused_before_any_training(small_spec, monkeypatch, capsys):
    from zh_bert.train import pretrain
    from zh_bert.train.recipe import load_recipe, save_recipe

    trained = []
    monkeypatch.setattr(pretrain, "train", lambda *a, **k: trained.append(a) or {"status": "finished"})
    other = small_spec.parent / "out" / "runs" / "masking=wwm"
    other.mkdir(parents=True)
    save_recipe(load_recipe(small_spec.parent / "base.yaml", {"max_steps": 7}), other / "recipe.yaml")
    before = _tree(small_spec.parent)
    assert cli.main(["ablate", str(small_spec)]) == 2
    err = capsys.readouterr().err
    assert "masking=wwm holds a run with other settings" in err and err.count("\n") == 1, err
    assert not trained and _tree(small_spec.parent) == before     # run 1 not trained, corpus not carved


CORRECTION_GRID = {"x": [{"label": "mlm+wwm", "set": {"masking": "wwm"}},
                         {"label": "mlm+correction", "set": {"masking": "correction"}}]}


def _correction_spec(small_spec, **over):
    spec = yaml.safe_load(small_spec.read_text(encoding="utf-8"))
    return write_yaml(small_spec, {**spec, "grid": CORRECTION_GRID, **over})


def test_ablate_correction_corpus_too_small_refused_before_any_training_dry_run_too(small_spec, monkeypatch,
                                                                                    capsys):
    """12 short documents cannot give correction's 20,000 train tokens at any tokenizer: `--dry-run` refuses the
    grid (it exited 0 before), and so does the real run before `mlm+wwm` trains (it trained it, then failed)."""
    from zh_bert.train import pretrain

    trained = []
    monkeypatch.setattr(pretrain, "train", lambda *a, **k: trained.append(a) or {"status": "finished"})
    (small_spec.parent / "wiki.txt").write_text("".join(f"北京是中国的首都，第{i}号文档。\n" for i in range(12)),
                                                encoding="utf-8")
    _correction_spec(small_spec)
    before = _tree(small_spec.parent)
    for extra in (["--dry-run"], []):
        assert cli.main(["ablate", str(small_spec), *extra]) == 2
        err = capsys.readouterr().err
        assert "run x=mlm+correction" in err and "needs at least 20,000" in err and err.count("\n") == 1, err
    assert not trained and _tree(small_spec.parent) == before


def test_ablate_correction_corpus_counted_in_its_shards_before_the_first_run_trains(small_spec, monkeypatch,
                                                                                    capsys):
    """35 training documents could hold 20,000 tokens by their bytes, but hold fewer: the real run prepares
    the correction run's shards (the cache its run would reuse) and refuses before `mlm+wwm` trains."""
    from zh_bert.train import pretrain

    trained = []
    monkeypatch.setattr(pretrain, "train", lambda *a, **k: trained.append(a) or {"status": "finished"})
    base = yaml.safe_load((small_spec.parent / "base.yaml").read_text(encoding="utf-8"))
    write_yaml(small_spec.parent / "base.yaml", {**base, "valid_docs": 4})
    _correction_spec(small_spec)
    assert cli.main(["ablate", str(small_spec), "--dry-run"]) == 0
    capsys.readouterr()
    assert cli.main(["ablate", str(small_spec)]) == 2
    err = capsys.readouterr().err
    assert "run x=mlm+correction" in err and "needs at least 20,000" in err and err.count("\n") == 1, err
    assert not trained and not (small_spec.parent / "out" / "runs").exists()


def test_ablate_correction_on_a_small_sharddir_refused_by_dry_run(small_spec, tmp_path, sample_docs,
                                                                  google_tokdir, build_shards, capsys):
    """A SHARDDIR base: its meta counts the train tokens, so the dry run makes pretrain's exact check."""
    small = tmp_path / "small.jsonl"
    small.write_text("".join(json.dumps({"text": t, "source": str(i)}, ensure_ascii=False) + "\n"
                             for i, t in enumerate(sample_docs[:10])), encoding="utf-8")
    shards = build_shards(small, google_tokdir, "--seq-len", "64", "--valid-docs", "2")
    base = yaml.safe_load((tmp_path / "base.yaml").read_text(encoding="utf-8"))
    write_yaml(tmp_path / "base.yaml", {**base, "data": str(shards), "tokenizer": str(google_tokdir)})
    _correction_spec(small_spec, heldout_docs=0)
    assert cli.main(["ablate", str(small_spec), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "run x=mlm+correction" in err and "needs at least 20,000" in err and err.count("\n") == 1, err


def test_ablate_finetune_mapping_error_names_the_key_the_user_wrote(small_spec, capsys):
    spec = yaml.safe_load(small_spec.read_text(encoding="utf-8"))
    write_yaml(small_spec, {**spec, "finetune": {"a": 1}})
    assert cli.main(["ablate", str(small_spec), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "'finetune' must be a task name" in err and "'tasks'" not in err, err
