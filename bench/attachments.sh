#!/usr/bin/env bash
# The attachment figures of BENCHMARKS.md: upload parse time of a 200-page PDF beside
# pdftotext (poppler-utils) on the same file, and read_attachment's read of one page of
# it once parsed (p50/p99). Needs pdftotext for the comparison (apt-get install
# poppler-utils); the PDF is the committed crates/toolshed-attachments/tests/fixtures/long-200.pdf.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench -p toolshed-attachments --bench parse
