//! Log output: JSON lines in production, plain text for people.
//!
//! # Guarantees
//! - A JSON line is one object in which every key appears once: `timestamp`, `level`, `target`,
//!   `message` (the event's text), then the event's fields, then `spans` (the spans the event is
//!   in, outermost first, each with its `name` and fields) if any. A field whose name is taken (a
//!   field named `message`, `level` or `target`, or a name used twice) is written as
//!   `fields.<name>`, then `fields.<name>#2`, `#3`, ... so nothing is lost and no key repeats.
//!   (`tracing_subscriber`'s own JSON format writes such a field a second time under the same key,
//!   and most collectors keep only one of the two.)

use crate::cli::LogFormat;
use serde_json::{Map, Value};
use std::collections::HashSet;
use std::fmt;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

pub fn init(format: LogFormat, filter: &str) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(filter).map_err(|e| anyhow::anyhow!("invalid --log-level {filter:?}: {e}"))?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Json => builder.fmt_fields(JsonFields::new()).event_format(JsonLines).try_init(),
        LogFormat::Text => builder.try_init(),
    };
    result.map_err(|e| anyhow::anyhow!("cannot install the logger: {e}"))
}

/// The JSON line format (see the module documentation).
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let mut timestamp = String::new();
        SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
        let meta = event.metadata();
        let mut line = Line::default();
        line.push("timestamp", Value::String(timestamp));
        line.push("level", Value::String(meta.level().to_string()));
        line.push("target", Value::String(meta.target().to_owned()));
        event.record(&mut line);
        if let Some(scope) = ctx.event_scope() {
            let spans: Vec<Value> = scope
                .from_root()
                .map(|span| {
                    // The span's fields, as `JsonFields` recorded them: one JSON object.
                    let mut fields = span
                        .extensions()
                        .get::<FormattedFields<N>>()
                        .and_then(|f| serde_json::from_str::<Map<String, Value>>(&f.fields).ok())
                        .unwrap_or_default();
                    fields.insert("name".into(), Value::String(span.name().to_owned()));
                    Value::Object(fields)
                })
                .collect();
            line.push("spans", Value::Array(spans));
        }
        writeln!(writer, "{}", line.to_json())
    }
}

/// The keys and values of one line, each key once.
#[derive(Default)]
struct Line {
    entries: Vec<(String, Value)>,
    taken: HashSet<String>,
}

impl Line {
    /// Adds `value` under `name`, or under the first free `fields.<name>`, `fields.<name>#2`, ...
    fn push(&mut self, name: &str, value: Value) {
        let mut key = name.to_owned();
        let mut n = 1;
        while self.taken.contains(&key) {
            key = if n == 1 { format!("fields.{name}") } else { format!("fields.{name}#{n}") };
            n += 1;
        }
        self.taken.insert(key.clone());
        self.entries.push((key, value));
    }

    /// One JSON object, keys in the order they were added.
    fn to_json(&self) -> String {
        let entries: Vec<String> =
            self.entries.iter().map(|(key, value)| format!("{}:{value}", Value::String(key.clone()))).collect();
        format!("{{{}}}", entries.join(","))
    }
}

impl Visit for Line {
    fn record_f64(&mut self, field: &Field, value: f64) {
        let value = serde_json::Number::from_f64(value).map_or_else(|| Value::String(value.to_string()), Value::Number);
        self.push(field.name(), value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.push(field.name(), Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.push(field.name(), Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.push(field.name(), Value::Bool(value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.push(field.name(), Value::String(value.to_owned()));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.push(field.name(), Value::String(value.to_string()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.push(field.name(), Value::String(format!("{value:?}")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    /// Collects what the formatter writes.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn lines(emit: impl FnOnce()) -> Vec<String> {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .fmt_fields(JsonFields::new())
            .event_format(JsonLines)
            .finish();
        tracing::subscriber::with_default(subscriber, emit);
        let bytes = buffer.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap().lines().map(str::to_owned).collect()
    }

    /// The keys of a JSON object line, in order, repeats included.
    fn keys(line: &str) -> Vec<String> {
        let value: Value = serde_json::from_str(line).unwrap();
        let keys: Vec<String> = value.as_object().unwrap().keys().cloned().collect();
        // serde_json keeps the last of repeated keys: count the raw occurrences too.
        for key in &keys {
            assert_eq!(line.matches(&format!("{:?}:", key)).count(), 1, "{key} repeats in {line}");
        }
        keys
    }

    #[test]
    fn fields_named_like_the_line_keys_are_kept_under_their_own_keys() {
        let lines = lines(|| {
            tracing::info!(node = "n1", message = "staging v2", level = 3, target = true, "node updated");
        });
        assert_eq!(lines.len(), 1);
        let at = |key: &str| lines[0].find(&format!("\"{key}\":")).unwrap();
        assert!(at("timestamp") < at("level") && at("level") < at("target") && at("target") < at("message"));
        let mut found = keys(&lines[0]);
        found.sort();
        assert_eq!(
            found,
            ["fields.level", "fields.message", "fields.target", "level", "message", "node", "target", "timestamp"]
        );
        let value: Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(value["message"], "node updated");
        assert_eq!(value["fields.message"], "staging v2");
        assert_eq!(value["level"], "INFO");
        assert_eq!(value["fields.level"], 3);
        assert_eq!(value["target"], module_path!());
        assert_eq!(value["fields.target"], true);
        assert_eq!(value["node"], "n1");
    }

    #[test]
    fn a_name_used_twice_is_numbered_and_spans_are_listed() {
        let lines = lines(|| {
            let span = tracing::info_span!("reconcile", term = 4);
            let _entered = span.enter();
            tracing::warn!(a = 1, a = 2, error = %std::io::Error::other("boom"), "twice");
        });
        let value: Value = serde_json::from_str(&lines[0]).unwrap();
        keys(&lines[0]);
        assert_eq!((value["a"].clone(), value["fields.a"].clone()), (1.into(), 2.into()));
        assert_eq!(value["error"], "boom");
        assert_eq!(value["spans"], serde_json::json!([{"name": "reconcile", "term": 4}]));
    }
}
