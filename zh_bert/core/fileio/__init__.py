"""The one layer through which zh-bert reads what it did not just write, and writes, replaces and deletes files.

`read`: bounded, typed reading (`Record`), names from files checked before they become paths, one line naming the
file and the field for anything malformed. `claims`: what this command may replace (its claims
and the manifests of its folders). `atomic`: temp name + rename, recovery after a kill, one-line disk
errors. `household`: the entries every command writes at the top of a run dir, listed once. `owned`: claiming a
target before any work, writers for libraries that write by path, deleting only what a manifest lists. Every
module of zh_bert/ and bench/ writes through these names (tests/test_structure.py holds the few reasoned
exceptions)."""

from zh_bert.core.fileio.atomic import (atomic_dir, atomic_write, fault_point, pid_alive, recover, replace_dir,
                                   write_dir_manifest, write_json, write_vocab_txt)
from zh_bert.core.fileio.claims import (MANIFEST, check_dir_ours, foreign_entries, is_claimed, manifest_files,
                                   reset_claims)
from zh_bert.core.fileio.household import (ABLATE_EVALS, CHECKPOINTS, CURVES_PNG, DATA_CACHE, EVAL_RESULTS, FINAL,
                                          HOUSEHOLD, METRICS_LOG, PUBLISHED_RUN_FILES, RUN_RECIPE, RUN_SUMMARY,
                                          SUITE_DIR, TENSORBOARD, VERIFICATION_FILE, HouseholdEntry, household_entry,
                                          in_household)
from zh_bert.core.fileio.owned import (claim_dir, claim_file, copy_file, fresh_staging_dir, open_append, open_for_write, refuse_overlap,
                                  remove_owned, remove_scratch, rename_owned, save_pretrained, save_safetensors, scratch_dir, torch_save,
                                  truncate_owned, write_bytes, write_text)
from zh_bert.core.fileio.read import (MAX_JSON_BYTES, Record, api_answer, entry_name, inside, json_copy, name_problem,
                                     number, parse_json, parse_json_line, parse_yaml, preview, read_json, read_object, read_text, read_vocab_txt,
                                     shown_name)

__all__ = ["ABLATE_EVALS", "CHECKPOINTS", "CURVES_PNG", "DATA_CACHE", "EVAL_RESULTS", "FINAL", "HOUSEHOLD",
           "METRICS_LOG", "PUBLISHED_RUN_FILES", "RUN_RECIPE", "RUN_SUMMARY", "SUITE_DIR", "TENSORBOARD",
           "VERIFICATION_FILE", "HouseholdEntry", "household_entry", "in_household",
           "MANIFEST", "MAX_JSON_BYTES", "Record", "api_answer", "entry_name", "inside", "json_copy", "name_problem",
           "number", "parse_json", "parse_json_line", "parse_yaml", "preview", "read_object", "shown_name", "atomic_dir", "atomic_write", "check_dir_ours", "claim_dir", "claim_file", "copy_file",
           "fault_point", "foreign_entries", "fresh_staging_dir", "rename_owned", "is_claimed", "manifest_files", "open_append", "open_for_write", "pid_alive",
           "read_json", "read_text", "read_vocab_txt", "recover", "refuse_overlap", "remove_owned",
           "remove_scratch", "replace_dir", "reset_claims", "save_pretrained", "save_safetensors", "scratch_dir",
           "torch_save", "truncate_owned", "write_bytes", "write_dir_manifest", "write_json", "write_text",
           "write_vocab_txt"]
