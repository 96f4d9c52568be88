"""Released checkpoints into the pipeline: `download` (alias or repo id -> a local folder), `models` (the
catalog), `endpoint` (Hub/mirror endpoint, one-line errors and retries). Before evaluation, so any stage after
can take a catalog alias or a Hub id where it takes a checkpoint folder."""
