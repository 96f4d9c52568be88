"""What every stage shares: one-line errors, the config schema, the file-ownership layer, text helpers, hardware facts."""
