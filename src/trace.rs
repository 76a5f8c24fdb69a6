//! W3C Trace Context: the `traceparent` header a caller may send and every delivery carries
//! (docs/API.md, "Traces"). Pure: parsing by the W3C rules, new ids, and the header text.
//!
//! `traceparent: 00-<trace-id: 32 hex>-<parent-id: 16 hex>-<flags: 2 hex>`, lowercase only.
//! A header that breaks a rule is ignored as a whole (the task then starts a trace of its own),
//! as the W3C recommendation asks of a receiver: it never fails the request.

/// The version webhookd writes. It reads later versions too, by their first four fields.
const VERSION: &str = "00";
/// Length of a version-00 header: 2 + 1 + 32 + 1 + 16 + 1 + 2.
const HEADER_LEN: usize = 55;
/// The `sampled` flag, set on traces webhookd starts itself.
pub const SAMPLED: u8 = 0x01;

/// One span's place in a trace: the trace it belongs to, its own id, and the trace flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanContext {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub flags: u8,
}

impl SpanContext {
    /// Parses a `traceparent` header value; `None` when it breaks a rule of the W3C format
    /// (wrong length or separators, upper-case or non-hex digits, version `ff`, an all-zero
    /// trace id or parent id, or extra text after a version-00 header).
    pub fn parse(value: &str) -> Option<SpanContext> {
        let value = value.trim_matches([' ', '\t']);
        let bytes = value.as_bytes();
        if bytes.len() < HEADER_LEN {
            return None;
        }
        let version = &value[..2];
        if !is_lower_hex(version) || version == "ff" {
            return None;
        }
        // Version 00 is exactly 55 characters; a later version may append fields after a dash.
        if version == VERSION && bytes.len() != HEADER_LEN {
            return None;
        }
        if bytes.len() > HEADER_LEN && bytes[HEADER_LEN] != b'-' {
            return None;
        }
        if bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
            return None;
        }
        let trace_id: [u8; 16] = decode_lower_hex(&value[3..35])?;
        let span_id: [u8; 8] = decode_lower_hex(&value[36..52])?;
        let [flags] = decode_lower_hex::<1>(&value[53..55])?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(SpanContext {
            trace_id,
            span_id,
            flags,
        })
    }

    /// A new trace: random trace and span ids, sampled.
    pub fn new_root() -> SpanContext {
        SpanContext {
            trace_id: nonzero_random(),
            span_id: nonzero_random(),
            flags: SAMPLED,
        }
    }

    /// A new span of the same trace with this one as its parent: same trace id and flags, a
    /// fresh span id.
    pub fn child(&self) -> SpanContext {
        SpanContext {
            span_id: nonzero_random(),
            ..*self
        }
    }

    /// The `traceparent` header value naming this span (always version 00).
    pub fn header(&self) -> String {
        format!(
            "{VERSION}-{}-{}-{:02x}",
            hex::encode(self.trace_id),
            hex::encode(self.span_id),
            self.flags
        )
    }

    /// The trace id as stored and shown in task records: 32 lowercase hex digits.
    pub fn trace_id_hex(&self) -> String {
        hex::encode(self.trace_id)
    }

    /// The span id as 16 lowercase hex digits.
    pub fn span_id_hex(&self) -> String {
        hex::encode(self.span_id)
    }
}

/// The trace a task's deliveries carry, as stored on the task: its trace id, the span its
/// spans hang under (the request or firing that made it), and the trace flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskTrace {
    pub trace_id: [u8; 16],
    pub parent_span_id: [u8; 8],
    pub flags: u8,
}

impl TaskTrace {
    /// A task made under `span`: it continues that span's trace, with `span` as parent.
    pub fn under(span: &SpanContext) -> TaskTrace {
        TaskTrace {
            trace_id: span.trace_id,
            parent_span_id: span.span_id,
            flags: span.flags,
        }
    }

    /// The context of one delivery attempt: the task's trace and flags, a new span id. Its
    /// header is the `traceparent` the receiver gets.
    pub fn attempt(&self) -> SpanContext {
        SpanContext {
            trace_id: self.trace_id,
            span_id: nonzero_random(),
            flags: self.flags,
        }
    }

    /// Reads the stored columns back: `None` unless all three are there and valid (tasks made
    /// before traces have none).
    pub fn from_columns(
        trace_id: Option<&str>,
        parent_span_id: Option<&str>,
        flags: Option<i64>,
    ) -> Option<TaskTrace> {
        Some(TaskTrace {
            trace_id: parse_trace_id(trace_id?)?,
            parent_span_id: parse_span_id(parent_span_id?)?,
            flags: u8::try_from(flags?).ok()?,
        })
    }

    /// The stored columns: trace id and parent span id in lowercase hex, flags as a number.
    pub fn to_columns(&self) -> (String, String, i64) {
        (
            hex::encode(self.trace_id),
            hex::encode(self.parent_span_id),
            i64::from(self.flags),
        )
    }
}

/// Hands out the traces of the tasks one request or schedule firing makes (docs/API.md,
/// "Traces"). Under a caller's `traceparent`, every task continues the caller's trace below
/// the request's own span; otherwise each task starts a trace of its own, whose root span is
/// a copy of the request's or firing's span. Those roots are remembered only when spans are
/// exported (`keep_roots`), so that with export off nothing is allocated.
#[derive(Debug)]
pub struct TaskTraces {
    /// The span of the request, when it continues a caller's trace.
    under: Option<SpanContext>,
    keep_roots: bool,
    roots: Vec<SpanContext>,
}

impl TaskTraces {
    /// Traces for tasks made under `under` (a request that carried a valid `traceparent`) or,
    /// with `None`, one new trace per task.
    pub fn new(under: Option<SpanContext>, keep_roots: bool) -> TaskTraces {
        TaskTraces {
            under,
            keep_roots,
            roots: Vec::new(),
        }
    }

    /// The trace of the next task.
    pub fn for_task(&mut self) -> TaskTrace {
        match &self.under {
            Some(span) => TaskTrace::under(span),
            None => {
                let root = SpanContext::new_root();
                if self.keep_roots {
                    self.roots.push(root);
                }
                TaskTrace::under(&root)
            }
        }
    }

    /// Forgets the roots handed out so far (a transaction that is run again starts over).
    pub fn restart(&mut self) {
        self.roots.clear();
    }

    /// Where the roots handed out so far end, for [`TaskTraces::rewind`].
    pub fn mark(&self) -> usize {
        self.roots.len()
    }

    /// Forgets the roots handed out since `mark` (tasks planned, then not written).
    pub fn rewind(&mut self, mark: usize) {
        self.roots.truncate(mark);
    }

    /// The root spans of the traces started so far (empty unless `keep_roots`).
    pub fn roots(&self) -> &[SpanContext] {
        &self.roots
    }
}

/// Decodes a stored trace id (32 lowercase hex digits, not all zero).
pub fn parse_trace_id(text: &str) -> Option<[u8; 16]> {
    decode_lower_hex::<16>(text).filter(|id| *id != [0; 16])
}

/// Decodes a stored span id (16 lowercase hex digits, not all zero).
pub fn parse_span_id(text: &str) -> Option<[u8; 8]> {
    decode_lower_hex::<8>(text).filter(|id| *id != [0; 8])
}

fn is_lower_hex(text: &str) -> bool {
    text.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `N` bytes from exactly `2 * N` lowercase hex digits (the W3C format allows no upper case).
fn decode_lower_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != 2 * N || !is_lower_hex(text) {
        return None;
    }
    let mut out = [0u8; N];
    hex::decode_to_slice(text, &mut out).ok()?;
    Some(out)
}

/// Random bytes that are not all zero (an all-zero id is invalid in the W3C format).
fn nonzero_random<const N: usize>() -> [u8; N] {
    loop {
        let mut id = [0u8; N];
        id.iter_mut().for_each(|b| *b = rand::random());
        if id.iter().any(|&b| b != 0) {
            return id;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn rewinding_forgets_the_roots_of_tasks_planned_since_the_mark() {
        let mut traces = TaskTraces::new(None, true);
        traces.for_task();
        let mark = traces.mark();
        traces.for_task();
        traces.for_task();
        assert_eq!(traces.roots().len(), 3);
        traces.rewind(mark);
        assert_eq!(traces.roots().len(), 1);
        traces.for_task();
        assert_eq!(traces.roots().len(), 2);
    }

    #[test]
    fn parses_the_w3c_example() {
        let ctx = SpanContext::parse(VALID).expect("valid");
        assert_eq!(ctx.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(ctx.span_id_hex(), "00f067aa0ba902b7");
        assert_eq!(ctx.flags, 0x01);
        assert_eq!(ctx.header(), VALID);
    }

    #[test]
    fn keeps_the_flags_it_was_given() {
        for (flags, text) in [(0x00, "00"), (0x01, "01"), (0x03, "03"), (0xff, "ff")] {
            let header = format!("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-{text}");
            let ctx = SpanContext::parse(&header).expect("valid");
            assert_eq!(ctx.flags, flags);
            assert!(ctx.child().header().ends_with(&format!("-{text}")));
        }
    }

    #[test]
    fn refuses_what_the_w3c_rules_refuse() {
        let bad = [
            "",
            // version ff is forbidden; versions are lowercase hex
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            // all-zero trace id or parent id
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            // upper case
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0A",
            // lengths and separators
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            // version 00 has nothing after the flags
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-010",
            // a later version may carry more fields, but only after a dash
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
            // non-hex digits
            "00-4bf92f3577b34da6a3ce929d0e0e473z-00f067aa0ba902b7-01",
        ];
        for header in bad {
            assert_eq!(
                SpanContext::parse(header),
                None,
                "{header:?} must be refused"
            );
        }
    }

    #[test]
    fn reads_later_versions_by_their_first_fields() {
        let ctx = SpanContext::parse(
            "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-holds",
        )
        .expect("a later version is read");
        assert_eq!(ctx.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        // webhookd writes version 00, whatever version it read.
        assert!(
            ctx.child()
                .header()
                .starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-")
        );
        assert!(
            SpanContext::parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").is_some()
        );
    }

    #[test]
    fn trims_surrounding_spaces_and_tabs() {
        assert!(SpanContext::parse(&format!(" \t{VALID} ")).is_some());
    }

    #[test]
    fn a_child_continues_the_trace_with_a_new_span() {
        let parent = SpanContext::parse(VALID).expect("valid");
        let child = parent.child();
        assert_eq!(child.trace_id, parent.trace_id);
        assert_eq!(child.flags, parent.flags);
        assert_ne!(child.span_id, parent.span_id);
        assert_eq!(SpanContext::parse(&child.header()), Some(child));
    }

    #[test]
    fn a_new_root_is_a_valid_sampled_trace() {
        let root = SpanContext::new_root();
        assert_eq!(root.flags, SAMPLED);
        assert_eq!(SpanContext::parse(&root.header()), Some(root));
        assert_ne!(SpanContext::new_root().trace_id, root.trace_id);
    }

    #[test]
    fn stored_ids_round_trip() {
        let root = SpanContext::new_root();
        assert_eq!(parse_trace_id(&root.trace_id_hex()), Some(root.trace_id));
        assert_eq!(parse_span_id(&root.span_id_hex()), Some(root.span_id));
        assert_eq!(parse_trace_id(&"0".repeat(32)), None);
        assert_eq!(parse_span_id("00F067AA0BA902B7"), None);
    }
    #[test]
    fn task_traces_continue_the_caller_or_start_one_per_task() {
        let request = SpanContext::parse(VALID).expect("valid").child();
        let mut under = TaskTraces::new(Some(request), true);
        let (a, b) = (under.for_task(), under.for_task());
        assert_eq!(a, b);
        assert_eq!(a.trace_id, request.trace_id);
        assert_eq!(a.parent_span_id, request.span_id);
        assert_eq!(a.flags, 0x01);
        assert!(under.roots().is_empty());

        let mut own = TaskTraces::new(None, true);
        let (a, b) = (own.for_task(), own.for_task());
        assert_ne!(a.trace_id, b.trace_id);
        assert_eq!(own.roots().len(), 2);
        assert_eq!(own.roots()[0].trace_id, a.trace_id);
        assert_eq!(own.roots()[0].span_id, a.parent_span_id);
        own.restart();
        assert!(own.roots().is_empty());

        let mut off = TaskTraces::new(None, false);
        off.for_task();
        assert!(off.roots().is_empty());
    }

    #[test]
    fn each_attempt_is_a_new_span_of_the_task_trace() {
        let task = TaskTrace {
            trace_id: [0x4b; 16],
            parent_span_id: [0x0a; 8],
            flags: 0x00,
        };
        let (first, second) = (task.attempt(), task.attempt());
        assert_eq!(first.trace_id, task.trace_id);
        assert_eq!(second.trace_id, task.trace_id);
        assert_ne!(first.span_id, second.span_id);
        assert_ne!(first.span_id, task.parent_span_id);
        assert!(
            first
                .header()
                .starts_with("00-4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b-")
        );
        assert!(first.header().ends_with("-00"));
    }

    #[test]
    fn task_trace_columns_round_trip() {
        let task = TaskTrace {
            trace_id: [0x4b; 16],
            parent_span_id: [0x0a; 8],
            flags: 0x03,
        };
        let (trace_id, parent, flags) = task.to_columns();
        assert_eq!(trace_id, "4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b");
        assert_eq!(parent, "0a0a0a0a0a0a0a0a");
        assert_eq!(flags, 3);
        assert_eq!(
            TaskTrace::from_columns(Some(&trace_id), Some(&parent), Some(flags)),
            Some(task)
        );
        assert_eq!(TaskTrace::from_columns(None, None, None), None);
        assert_eq!(
            TaskTrace::from_columns(Some(&trace_id), Some(&parent), Some(256)),
            None
        );
        assert_eq!(
            TaskTrace::from_columns(Some(&"0".repeat(32)), Some(&parent), Some(1)),
            None
        );
    }
}
