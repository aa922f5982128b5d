//! toolshed's built-in tools, written as ordinary `#[tool]` functions so they go
//! through exactly the pipeline every other tool does.
//!
//! | tool | what it does |
//! | --- | --- |
//! | `get_current_time` | the current time as ISO 8601 (UTC or a fixed offset) and Unix seconds |
//! | `read_attachment` | one page (or a range) of a file attached to the run or its session, parsed once at upload |
//! | `markdown_writer` | writes a Markdown file in the run's tenant's folder under the output folder, never outside it, never through a symlink, size-capped |

use toolshed_core::Tool;

mod markdown;
mod read_attachment;
mod time;

pub use markdown::{
    DEFAULT_TENANT, MAX_FILE_BYTES, MAX_TENANT_BYTES, MAX_TENANT_ENTRIES, OUTPUT_DIR_ENV,
    WrittenFile, markdown_writer, markdown_writer_tool,
};
pub use read_attachment::{DEFAULT_READ_LENGTH, MAX_READ_LENGTH, read_attachment_tool};
pub use time::{CurrentTime, get_current_time, get_current_time_tool};

/// Every built-in tool.
pub fn tools() -> Vec<Tool> {
    vec![
        get_current_time_tool(),
        markdown_writer_tool(),
        read_attachment_tool(),
    ]
}

/// A built-in tool by name.
pub fn get(name: &str) -> Option<Tool> {
    tools().into_iter().find(|t| t.name() == name)
}
