//! OTLP/HTTP's binary encoding (`http/protobuf`, the OpenTelemetry SDK's default protocol): the
//! request that [`super::request`] builds in OTLP/JSON's shape, written as the protobuf messages
//! of opentelemetry-proto's `collector/trace/v1` and `trace/v1`.
//!
//! Why by hand, not `opentelemetry-proto` with `prost`: the request is one fixed shape of ten
//! messages, and encoding it takes a varint, a length prefix and a fixed64, while the generated
//! types bring `prost`, `tonic`'s message types and their build into the bootstrap for a path
//! that runs once per invocation when traces are on. The test that holds it
//! (`tests/it/traces.rs`) decodes what it writes with the official generated Python types
//! (`opentelemetry-proto` from PyPI) and runs on the result the span-tree assertions the JSON
//! export passes.
//!
//! The mapping from OTLP/JSON is the protocol's own: ids are hex strings there and bytes here,
//! 64-bit integers are decimal strings there, enums are numbers in both.

use serde_json::Value;

/// Protobuf's wire types.
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LENGTH_DELIMITED: u8 = 2;

/// The `ExportTraceServiceRequest` for an OTLP/JSON request `request`.
pub fn encode(request: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(4_096);
    for resource_spans in list(request, "resourceSpans") {
        message(&mut out, 1, |m| encode_resource_spans(m, resource_spans));
    }
    out
}

fn encode_resource_spans(out: &mut Vec<u8>, value: &Value) {
    if let Some(resource) = value.get("resource") {
        message(out, 1, |m| {
            for kv in list(resource, "attributes") {
                message(m, 1, |m| encode_key_value(m, kv));
            }
        });
    }
    for scope_spans in list(value, "scopeSpans") {
        message(out, 2, |m| encode_scope_spans(m, scope_spans));
    }
}

fn encode_scope_spans(out: &mut Vec<u8>, value: &Value) {
    if let Some(scope) = value.get("scope") {
        message(out, 1, |m| {
            string(m, 1, text(scope, "name"));
            string(m, 2, text(scope, "version"));
        });
    }
    for span in list(value, "spans") {
        message(out, 2, |m| encode_span(m, span));
    }
}

fn encode_span(out: &mut Vec<u8>, span: &Value) {
    bytes(out, 1, &hex(text(span, "traceId")));
    bytes(out, 2, &hex(text(span, "spanId")));
    bytes(out, 4, &hex(text(span, "parentSpanId")));
    string(out, 5, text(span, "name"));
    varint_field(out, 6, span["kind"].as_u64().unwrap_or(0));
    fixed64(out, 7, nanos(&span["startTimeUnixNano"]));
    fixed64(out, 8, nanos(&span["endTimeUnixNano"]));
    for kv in list(span, "attributes") {
        message(out, 9, |m| encode_key_value(m, kv));
    }
    for link in list(span, "links") {
        message(out, 13, |m| {
            bytes(m, 1, &hex(text(link, "traceId")));
            bytes(m, 2, &hex(text(link, "spanId")));
        });
    }
    if let Some(status) = span.get("status") {
        message(out, 15, |m| {
            string(m, 2, text(status, "message"));
            varint_field(m, 3, status["code"].as_u64().unwrap_or(0));
        });
    }
}

fn encode_key_value(out: &mut Vec<u8>, kv: &Value) {
    string(out, 1, text(kv, "key"));
    let value = &kv["value"];
    // AnyValue is a oneof: the field present is the one written, even when it holds a default
    // (an empty string, false, 0), so the receiver sees which kind of value it is.
    message(out, 2, |m| {
        if let Some(s) = value["stringValue"].as_str() {
            always_string(m, 1, s);
        } else if let Some(b) = value["boolValue"].as_bool() {
            key(m, 2, VARINT);
            varint(m, u64::from(b));
        } else if let Some(i) = value.get("intValue") {
            key(m, 3, VARINT);
            // int64: a negative value is its two's complement, ten bytes as a varint.
            varint(m, int64(i) as u64);
        } else if let Some(d) = value["doubleValue"].as_f64() {
            key(m, 4, FIXED64);
            m.extend_from_slice(&d.to_bits().to_le_bytes());
        }
    });
}

/// The members of `value[name]`, an array, or none.
fn list<'a>(value: &'a Value, name: &str) -> &'a [Value] {
    value[name].as_array().map_or(&[], Vec::as_slice)
}

fn text<'a>(value: &'a Value, name: &str) -> &'a str {
    value[name].as_str().unwrap_or("")
}

/// OTLP/JSON's 64-bit integers are decimal strings (JavaScript's numbers lose precision past
/// 2^53); a number is read too.
fn int64(value: &Value) -> i64 {
    value
        .as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| value.as_i64())
        .unwrap_or(0)
}

fn nanos(value: &Value) -> u64 {
    value
        .as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| value.as_u64())
        .unwrap_or(0)
}

/// A hex id as bytes; what is not hex is no id (an empty field, which proto3 leaves out).
fn hex(text: &str) -> Vec<u8> {
    if !text.len().is_multiple_of(2) {
        return Vec::new();
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()
        .unwrap_or_default()
}

fn key(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, (u64::from(field) << 3) | u64::from(wire));
}

fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A scalar field: proto3 leaves a default value out.
fn varint_field(out: &mut Vec<u8>, field: u32, value: u64) {
    if value != 0 {
        key(out, field, VARINT);
        varint(out, value);
    }
}

fn fixed64(out: &mut Vec<u8>, field: u32, value: u64) {
    if value != 0 {
        key(out, field, FIXED64);
        out.extend_from_slice(&value.to_le_bytes());
    }
}

fn bytes(out: &mut Vec<u8>, field: u32, data: &[u8]) {
    if !data.is_empty() {
        always_bytes(out, field, data);
    }
}

fn string(out: &mut Vec<u8>, field: u32, text: &str) {
    bytes(out, field, text.as_bytes());
}

fn always_string(out: &mut Vec<u8>, field: u32, text: &str) {
    always_bytes(out, field, text.as_bytes());
}

fn always_bytes(out: &mut Vec<u8>, field: u32, data: &[u8]) {
    key(out, field, LENGTH_DELIMITED);
    varint(out, data.len() as u64);
    out.extend_from_slice(data);
}

/// An embedded message: written apart, then as a length-delimited field.
fn message(out: &mut Vec<u8>, field: u32, write: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    write(&mut inner);
    always_bytes(out, field, &inner);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_are_little_endian_groups_of_seven_bits() {
        let encoded = |v: u64| {
            let mut out = Vec::new();
            varint(&mut out, v);
            out
        };
        assert_eq!(encoded(1), [0x01]);
        assert_eq!(encoded(300), [0xac, 0x02]);
        assert_eq!(encoded(u64::MAX).len(), 10);
        // int64 -1: ten bytes, as protobuf writes a negative int64.
        assert_eq!(encoded(-1_i64 as u64), {
            let mut v = vec![0xff; 9];
            v.push(0x01);
            v
        });
    }

    #[test]
    fn ids_are_hex_and_anything_else_is_no_id() {
        assert_eq!(hex("0a1b"), [0x0a, 0x1b]);
        assert!(hex("0a1").is_empty() && hex("zz").is_empty() && hex("").is_empty());
    }
}
