// Generated from toolshed_core::text::RANGES by crates/toolshed-server/src/console/hidden.rs
// (UPDATE_CONSOLE=1 cargo test -p toolshed-server --lib console::hidden): do not edit.
//
// Characters that act on a display or hide from a reader (escapes, controls, bidi
// overrides, zero-width and tag characters), shown as \u{…} wherever the console
// shows server text, as the CLI does; tabs and newlines are kept.

/** [first, last, kind] code point ranges, sorted. */
export const RANGES = [
  [0x0000, 0x0008, 'control'],
  [0x000B, 0x001A, 'control'],
  [0x001B, 0x001B, 'escape'],
  [0x001C, 0x001F, 'control'],
  [0x007F, 0x007F, 'control'],
  [0x0080, 0x009F, 'escape'],
  [0x00AD, 0x00AD, 'zero_width'],
  [0x034F, 0x034F, 'zero_width'],
  [0x061C, 0x061C, 'bidi'],
  [0x115F, 0x1160, 'zero_width'],
  [0x17B4, 0x17B5, 'zero_width'],
  [0x180B, 0x180F, 'zero_width'],
  [0x200B, 0x200D, 'zero_width'],
  [0x200E, 0x200F, 'bidi'],
  [0x2028, 0x2029, 'control'],
  [0x202A, 0x202E, 'bidi'],
  [0x2060, 0x2064, 'zero_width'],
  [0x2066, 0x2069, 'bidi'],
  [0x206A, 0x206F, 'zero_width'],
  [0x3164, 0x3164, 'zero_width'],
  [0xFE00, 0xFE0D, 'zero_width'],
  [0xFEFF, 0xFEFF, 'zero_width'],
  [0xFFA0, 0xFFA0, 'zero_width'],
  [0xFFF9, 0xFFFB, 'control'],
  [0x1D173, 0x1D17A, 'zero_width'],
  [0xE0000, 0xE007F, 'tag'],
  [0xE0100, 0xE01EF, 'zero_width'],
];

const hex = (n) => `\\u{${n.toString(16).toUpperCase()}}`;
const PATTERN = new RegExp(
  `[${RANGES.map(([a, b]) => (a === b ? hex(a) : `${hex(a)}-${hex(b)}`)).join('')}]`,
  'gu',
);

/** `text` as a person may see it: each hidden character written as `\u{…}`. */
export function display(text) {
  return String(text).replace(PATTERN, (c) => `\\u{${c.codePointAt(0).toString(16)}}`);
}

/** The kind of each hidden character of `text`, counted: {kind: count}. */
export function hidden(text) {
  const counts = {};
  for (const c of String(text).match(PATTERN) || []) {
    const code = c.codePointAt(0);
    const range = RANGES.find(([a, b]) => code >= a && code <= b);
    counts[range[2]] = (counts[range[2]] || 0) + 1;
  }
  return counts;
}
