//! Loading tool specs from `tool.yaml` / JSON files.
