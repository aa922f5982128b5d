//! `tools/call` results mapped onto the pipeline: content blocks, `structuredContent`
//! and `isError`.
